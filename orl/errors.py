"""One-line messages for the errors a command can end with (the CLI prints them; --debug shows the
traceback instead)."""
from __future__ import annotations

import errno


def error_message(e: BaseException) -> str:
    if isinstance(e, OSError) and e.errno == errno.ENOSPC:
        return f"no space left on device{_where(e)}: free some space or write elsewhere"
    if isinstance(e, OSError) and e.errno in (errno.EROFS, errno.EACCES, errno.EPERM):
        kind = "read-only file system" if e.errno == errno.EROFS else "permission denied"
        return f"{kind}{_where(e)}: choose an output directory you can write"
    if isinstance(e, OSError) and e.strerror:
        return f"{e.strerror}{_where(e)}"
    if isinstance(e, (ValueError, KeyError, TypeError, OSError)) and str(e):
        return str(e).strip("'\"") if isinstance(e, KeyError) else str(e)
    return f"{type(e).__name__}: {e} (rerun with --debug for the traceback)"


def _where(e: OSError) -> str:
    return f" ({e.filename})" if e.filename else ""
