"""Run untrusted Python (model-written code) in a throwaway sandbox; the only place orl executes it.

Every program runs as `python -I -S` (isolated mode, no site-packages) in its own process, with:
- a wall-time limit (the whole process tree is killed when it passes),
- rlimits set in preexec_fn: address space (RLIMIT_AS), processes (RLIMIT_NPROC), file size
  (RLIMIT_FSIZE), no core dumps, and CPU seconds as a backstop,
- a fresh temporary working directory, deleted afterwards, and a scrubbed environment.
A program passes only when it runs to its last line and exits 0: the sandbox appends a line that creates a file
of a random name in its working directory and fails a run that exits without it, so a candidate that exits 0
early (sys.exit(0), raise SystemExit, os._exit(0) inside the function the tests call) skips no test into a pass.
A test that ends its program with sys.exit(0) on purpose fails for the same reason: end it by running out.

Isolation "namespaces" (running as root with util-linux `unshare` and `setpriv`, as on the dev and CI
machines): the program runs under `unshare --net --pid --fork --kill-child`, i.e.
- in a new network namespace, which has no interface but a downed loopback: no network at all,
- in a new PID namespace: when its first process ends or is killed, the kernel kills every process
  the program left behind, so forks cannot outlive the time limit,
and `setpriv` drops it to a fresh unprivileged uid/gid (random, unused by anything else, no
supplementary groups, no_new_privs so setuid binaries cannot regain root). As that uid it can write
only its own working directory and world-writable places (/tmp, /dev/shm; the sticky bit there keeps
it from deleting or changing others' files); every other file is read-only to it. A private uid per
run also makes RLIMIT_NPROC count this program's processes alone.

Isolation "rlimits" (not root, or no unshare/setpriv): the same limits, a new session that is killed
as a group, and `socket` replaced in the child by a stub that raises. This is weaker: the program runs
as the calling user and could write that user's files, and the socket stub can be bypassed
(e.g. through `_socket`). `isolation()` says which mode is in effect.
"""
from __future__ import annotations

import os
import resource
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import cache

# uids nothing else uses: above the 16-bit ranges distributions allocate, below the 2**32-1 sentinel
UID_BASE, UID_SPAN = 1 << 30, 1 << 29
NO_SOCKET = """\
import socket as _s
def _no_network(*a, **k):
    raise OSError("network access is disabled in the sandbox")
for _n in ("socket", "create_connection", "socketpair", "fromfd", "getaddrinfo", "create_server"):
    setattr(_s, _n, _no_network)
del _s, _n, _no_network
"""
# the program's last line; the tests before it ran iff it did (a name no program can guess)
REACHED_END = """

import os as _orl_os
_orl_os.close(_orl_os.open({path!r}, _orl_os.O_CREAT | _orl_os.O_WRONLY, 0o600))
"""


@dataclass(frozen=True)
class Limits:
    wall_s: float = 10.0
    memory_bytes: int = 1 << 30
    processes: int = 32
    file_bytes: int = 16 << 20
    output_bytes: int = 16 << 10   # tail of stdout/stderr kept in the result


@dataclass(frozen=True)
class Result:
    status: str          # "passed" (ran to its end, exit 0) | "failed" | "timeout"
    returncode: int | None
    stdout: str
    stderr: str
    wall_s: float
    uid: int | None      # the run's private uid (namespaces mode)

    @property
    def passed(self) -> bool:
        return self.status == "passed"


@cache
def isolation() -> str:
    """The probe runs this interpreter as an unprivileged uid: it must be readable by everyone."""
    if os.geteuid() != 0 or not (shutil.which("unshare") and shutil.which("setpriv")):
        return "rlimits"
    probe = subprocess.run(["unshare", "--net", "--pid", "--fork", "--kill-child", "--", "setpriv",
                            f"--reuid={UID_BASE}", f"--regid={UID_BASE}", "--clear-groups", "--",
                            sys.executable, "-I", "-S", "-c", "pass"],
                           capture_output=True, timeout=30)
    return "namespaces" if probe.returncode == 0 else "rlimits"


def _set_limits(limits: Limits) -> None:
    for kind, value in ((resource.RLIMIT_AS, limits.memory_bytes), (resource.RLIMIT_NPROC, limits.processes),
                        (resource.RLIMIT_FSIZE, limits.file_bytes), (resource.RLIMIT_CORE, 0),
                        (resource.RLIMIT_CPU, int(limits.wall_s) + 2)):
        resource.setrlimit(kind, (value, value))


def _tail(f, n: int) -> str:
    f.seek(0, os.SEEK_END)
    f.seek(max(0, f.tell() - n))
    return f.read().decode("utf-8", errors="replace")


def run_python(source: str, limits: Limits = Limits()) -> Result:
    """Run `source` as a script in the sandbox; status "passed" iff it runs to its end and exits 0 within the wall
    time."""
    mode = isolation()
    workdir = tempfile.mkdtemp(prefix="orl-sandbox-")
    uid = UID_BASE + secrets.randbelow(UID_SPAN) if mode == "namespaces" else None
    try:
        script = os.path.join(workdir, "program.py")
        reached_end = os.path.join(workdir, f".orl-end-{secrets.token_hex(16)}")
        with open(script, "w", encoding="utf-8") as f:
            f.write((source if mode == "namespaces" else NO_SOCKET + source) + REACHED_END.format(path=reached_end))
        cmd = [sys.executable, "-I", "-S", "program.py"]
        if uid is not None:
            os.chown(workdir, uid, uid)
            cmd = ["unshare", "--net", "--pid", "--fork", "--kill-child", "--", "setpriv", f"--reuid={uid}",
                   f"--regid={uid}", "--clear-groups", "--no-new-privs", "--", *cmd]
        env = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "HOME": workdir, "TMPDIR": workdir}
        with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
            t0 = time.perf_counter()
            # stdout/stderr go to files, not pipes: a program printing forever fills at most
            # RLIMIT_FSIZE bytes instead of the parent's memory
            proc = subprocess.Popen(cmd, cwd=workdir, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                                    start_new_session=True, preexec_fn=lambda: _set_limits(limits))
            try:
                rc: int | None = proc.wait(timeout=limits.wall_s)
                status = "passed" if rc == 0 and os.path.exists(reached_end) else "failed"
            except subprocess.TimeoutExpired:
                rc, status = None, "timeout"
            finally:
                # in namespaces mode killing unshare kills the PID namespace; otherwise the session
                _kill_group(proc)
            stderr = _tail(err, limits.output_bytes)
            if rc == 0 and status == "failed":
                stderr += "\n[orl sandbox] exited 0 before its last line (sys.exit, SystemExit or os._exit): failed\n"
            return Result(status, rc, _tail(out, limits.output_bytes), stderr, time.perf_counter() - t0, uid)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


def run_many(sources: list[str], limits: Limits = Limits(), parallelism: int = 2) -> list[Result]:
    """Results in input order; threads suffice since each run waits on its own child process."""
    if parallelism < 1:
        raise ValueError(f"parallelism must be >= 1, got {parallelism}")
    with ThreadPoolExecutor(max_workers=parallelism) as pool:
        return list(pool.map(lambda s: run_python(s, limits), sources))
