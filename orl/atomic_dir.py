"""Directory writes that are atomic and never replace what orl did not write (DESIGN section 7).

A directory is built as a hidden sibling `.NAME.tmp-XXXX`, every file fsynced, its manifest written
last (so a copy with a manifest is complete), then swapped into place: rename(target -> .NAME.old-XXXX),
rename(tmp -> target), delete the old copy. A death between the two renames leaves no target but two
complete hidden copies; `recover(target)` runs before every write and at the start of every training
run and puts the newest complete copy back, so a rerun resumes instead of restarting at step 0.
Each hidden copy carries a mark (MARK, naming the target) from the moment it exists, and only a sibling with
that mark, a name of exactly orl's pattern and nothing but orl's own files is ever moved into place or removed:
a user's `.NAME.old-backup` holding a checkpoint is left alone.
"""
from __future__ import annotations

import glob
import hashlib
import json
import os
import re
import shutil
import tempfile
import uuid
from collections.abc import Callable
from pathlib import Path

MANIFEST = "orl.json"
MARK = ".orl-write"  # inside a hidden copy that orl made; removed from the target once the swap is done
# names orl writes into a checkpoint; a manifest without a file list (older checkpoints) is checked against these
ORL_NAMES = re.compile(r"^(config\.json|orl\.json|model\.safetensors|model-\d{5}-of-\d{5}\.safetensors|"
                       r"model\.safetensors\.index\.json|orl_tokenizer\.json|tokenizer\.json|tokenizer_config\.json|"
                       r"special_tokens_map\.json|chat_template\.jinja|generation_config\.json|trainer_state\.pt|"
                       r"trainer_state\.json)$")


# what a training run keeps inside its output directory besides the checkpoint: the JSONL log (appended
# between checkpoints, so not checksummed) and the end-of-stage-1 checkpoint; both are carried into
# every new copy of the directory by hard links
RUN_FILES = ("train.log.jsonl", "stage1")


class NotOrlDirectory(ValueError):
    pass


def file_digest(path: Path) -> str:
    with open(path, "rb") as f:
        return "sha256:" + hashlib.file_digest(f, "sha256").hexdigest()


def read_manifest(d: Path) -> dict | None:
    """The manifest as a dict, or None when it is absent or not a JSON object."""
    try:
        m = json.loads((d / MANIFEST).read_text())
    except (OSError, ValueError):
        return None
    return m if isinstance(m, dict) else None


def foreign_entries(d: Path) -> list[str]:
    """Entries of d that orl did not write: everything but the files its manifest lists (or, for a
    manifest without a list, orl's own file names). An empty directory has none."""
    entries = sorted(p.name for p in d.iterdir() if p.name != MARK and not _is_run_file(d / p.name))
    if not entries:
        return []
    manifest = read_manifest(d)
    if manifest is None or "format_version" not in manifest:
        return entries  # no orl manifest: nothing here is known to be orl's
    listed = manifest.get("files")
    if isinstance(listed, dict):  # (a malformed list leaves every entry foreign: never replaced)
        return [n for n in entries if n != MANIFEST and n not in listed]
    return [n for n in entries if not (ORL_NAMES.match(n) and (d / n).is_file())]


def listed_files(manifest: dict, where: Path) -> dict[str, str] | None:
    """The manifest's `files` ({name: "sha256:..."}), None when it has none (a checkpoint from before checksums),
    else ValueError: a list, a name with a path in it (`../x`, `/etc/x`, `a/b`) or a digest that is no string
    must never make orl read, hash or copy a file outside the checkpoint directory, or skip the check."""
    listed = manifest.get("files")
    if listed is None:
        return None
    if not isinstance(listed, dict):
        raise ValueError(f"{where}: 'files' must map file names to checksums, got {type(listed).__name__}")
    for name, digest in listed.items():
        if name in ("", ".", "..", MANIFEST) or Path(name).name != name or "\\" in name:
            raise ValueError(f"{where}: 'files' lists {name!r}, which is not a plain file name inside the checkpoint")
        if not (isinstance(digest, str) and digest.startswith("sha256:")):
            raise ValueError(f"{where}: 'files' gives {name!r} the checksum {digest!r}, expected 'sha256:<hex>'")
    return listed


def _is_run_file(p: Path) -> bool:
    if p.name == RUN_FILES[0]:
        return p.is_file()
    return p.name == RUN_FILES[1] and p.is_dir() and not p.is_symlink() and not foreign_entries(p)


def check_replaceable(target: Path) -> None:
    """Raise NotOrlDirectory unless target is absent, empty, or a directory orl wrote in full."""
    if not target.exists():
        return
    if not target.is_dir():
        raise NotOrlDirectory(f"refusing to write {target}: it is a file, not a directory")
    foreign = foreign_entries(target)
    if foreign:
        shown = ", ".join(foreign[:5]) + (f" and {len(foreign) - 5} more" if len(foreign) > 5 else "")
        raise NotOrlDirectory(f"refusing to replace {target}: it holds entries orl did not write ({shown}); "
                              "choose another output directory")


class OutputIsInput(ValueError):
    pass


def check_apart(out: Path, source: Path, flag: str) -> None:
    """Raise OutputIsInput when the output directory `out` is the input `source` (a run's --base) or
    either lies inside the other, after resolving `..` and symlinks and comparing inodes (a bind mount
    or another spelling of one directory is the same directory). The first checkpoint of a run whose
    --out is its base replaces the weights it starts from (an orl-written base passes
    check_replaceable); a run inside the base writes entries into the base; a base inside --out is
    deleted with the old copy when a checkpoint is swapped in (only the run files are carried)."""
    out, source = Path(out).resolve(), Path(source).resolve()
    if same_dir(out, source):
        raise OutputIsInput(f"--out {out} is the {flag} checkpoint: the run's first checkpoint would replace the "
                            "weights it starts from; give the run a directory of its own")
    if any(same_dir(p, source) for p in out.parents):
        raise OutputIsInput(f"--out {out} lies inside the {flag} checkpoint {source}: the run would write into "
                            f"the base's directory; choose a directory outside {source}")
    if any(same_dir(p, out) for p in source.parents):
        raise OutputIsInput(f"the {flag} checkpoint {source} lies inside --out {out}: every checkpoint write "
                            "replaces --out with a new copy, and the base with it; choose another --out")


def same_dir(a: Path, b: Path) -> bool:
    """Whether two paths name one directory (or file): the same inode, or, when one does not exist (yet), the same
    resolved path."""
    try:
        return os.path.samefile(a, b)
    except OSError:
        return Path(a).resolve() == Path(b).resolve()


def _siblings(target: Path, kind: str, marked: bool = True) -> list[Path]:
    """Hidden copies of target that orl made: `.NAME.tmp-XXXXXXXX` (tempfile.mkdtemp's 8 characters) or
    `.NAME.old-XXXXXXXX` (8 hex digits), each a real directory holding orl's mark for this target, or empty (a
    kill between mkdtemp and the mark: nothing in it to lose). marked=False: the unmarked ones of that name."""
    if not target.parent.is_dir():
        return []
    name = re.compile(re.escape(f".{target.name}.{kind}-") + r"[a-z0-9_]{8}")
    return sorted(p for p in target.parent.glob(glob.escape(f".{target.name}.{kind}-") + "*")
                  if name.fullmatch(p.name) and p.is_dir() and not p.is_symlink()
                  and (_marked(p, target) or not any(p.iterdir())) == marked)


def _mark(d: Path, target: Path) -> None:
    (d / MARK).write_text(json.dumps({"orl": "atomic directory write", "target": target.name}))
    _fsync(d / MARK)


def _marked(d: Path, target: Path) -> bool:
    try:
        return json.loads((d / MARK).read_text()).get("target") == target.name
    except (OSError, ValueError, AttributeError):
        return False


def _complete(d: Path) -> bool:
    return d.is_dir() and read_manifest(d) is not None and not foreign_entries(d)


def _remove_if_ours(d: Path) -> None:
    """d is one of _siblings' marked copies: removed when it holds nothing but orl's own files."""
    if all(p.name == MARK or (ORL_NAMES.match(p.name) and p.is_file() and not p.is_symlink()) or _is_run_file(p)
           for p in d.iterdir()):
        _remove_marked(d)


def _remove_marked(d: Path) -> None:
    """Delete one of orl's copies so that a kill at any point leaves it recognisable as orl's and incomplete: the
    manifest first (never again a complete copy to recover), the mark last (still orl's to finish removing)."""
    (d / MANIFEST).unlink(missing_ok=True)
    for p in d.iterdir():
        if p.name != MARK:
            shutil.rmtree(p) if p.is_dir() and not p.is_symlink() else p.unlink()
    (d / MARK).unlink(missing_ok=True)
    d.rmdir()


def _carry(src: Path, dst: Path) -> None:
    """Hard-link the run files of the current copy into the new one (a copy where links fail)."""
    for name in RUN_FILES:
        p = src / name
        if not _is_run_file(p):
            continue
        if p.is_dir():
            shutil.copytree(p, dst / name, copy_function=_link_or_copy)
        else:
            _link_or_copy(p, dst / name)


def _link_or_copy(a, b) -> None:
    try:
        os.link(a, b)
    except OSError:
        shutil.copy2(a, b)


def recover(target: Path) -> str | None:
    """Finish or undo a swap that a crash interrupted. Returns what was done (for the log), or None."""
    target = Path(target).resolve()
    tmps, olds = _siblings(target, "tmp"), _siblings(target, "old")
    action = None
    if not target.exists():
        by_age = sorted((p for p in tmps + olds if _complete(p)), key=lambda p: (p / MANIFEST).stat().st_mtime_ns)
        if by_age:
            os.rename(by_age[-1], target)
            _fsync(target.parent)
            (target / MARK).unlink(missing_ok=True)
            action = f"recovered {target} from {by_age[-1].name} (a write was interrupted)"
    for p in tmps + olds:
        if p.exists():
            _remove_if_ours(p)
    if not target.exists() and (unmarked := [p for kind in ("tmp", "old") for p in _siblings(target, kind, False)
                                             if _complete(p)]):
        # orl before session 52 left copies without a mark; a user's backup can look the same: never moved here
        action = (f"{target} is missing and {', '.join(p.name for p in unmarked)} beside it look(s) like a complete "
                  f"copy from an interrupted write of an older orl (no mark): not touched; rename the newest to "
                  f"{target.name} to resume from it")
    return action


def write_atomically(target: Path, fill: Callable[[Path], None]) -> Path:
    """Create target with fill(tmp_dir), replacing an earlier orl directory. fill must write the
    manifest last. A crash at any point leaves the old or the new copy, recoverable by recover().
    The run files of an existing target (RUN_FILES) are carried into the new copy first."""
    target = Path(target).resolve()
    recover(target)
    check_replaceable(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.tmp-", dir=target.parent))
    try:
        os.chmod(tmp, 0o777 & ~_umask())  # mkdtemp's 0700 would make the checkpoint private to its writer
        _mark(tmp, target)
        if target.is_dir():
            _carry(target, tmp)
        fill(tmp)
        for f in tmp.iterdir():
            _fsync(f)
        _fsync(tmp)
        _swap_into_place(tmp, target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return target


def copy_checkpoint(src: Path, target: Path) -> Path:
    """target as a copy of the orl directory src: the files its manifest lists (hard links where the disk
    allows: a later write of src swaps in new files and leaves these), the manifest last, written atomically;
    the run files (RUN_FILES) stay with src."""
    src = Path(src).resolve()
    names = list(listed_files(read_manifest(src) or {}, src / MANIFEST) or {})
    if not names:
        raise NotOrlDirectory(f"cannot copy {src}: its {MANIFEST} lists no files")

    def fill(tmp: Path) -> None:
        for name in names + [MANIFEST]:
            _link_or_copy(src / name, tmp / name)

    return write_atomically(target, fill)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _swap_into_place(tmp: Path, target: Path) -> None:
    aside = target.with_name(f".{target.name}.old-{uuid.uuid4().hex[:8]}") if target.exists() else None
    if aside:
        _mark(target, target)  # an orl directory (check_replaceable): marked before it is moved aside
        try:
            os.rename(target, aside)
        except BaseException:
            (target / MARK).unlink(missing_ok=True)  # still the target (a mount point cannot move): leave it as it was
            raise
    try:
        os.rename(tmp, target)
    except BaseException:
        if aside:
            os.rename(aside, target)
        raise
    _fsync(target.parent)
    (target / MARK).unlink(missing_ok=True)  # left by a crash just before this line, it is harmless (foreign_entries)
    if aside:
        _remove_marked(aside)


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
