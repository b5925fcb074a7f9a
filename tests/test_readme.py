"""The README's how-tos run as written (issue 23 item 7): every ```bash block after a
`<!-- doc-test -->` line, from the repository root with the venv's bin on the PATH."""
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BLOCK = re.compile(r"<!-- doc-test -->\n```bash\n(.*?)```", re.S)


def blocks() -> list[str]:
    return BLOCK.findall((ROOT / "README.md").read_text())


def clean() -> None:
    for p in (ROOT / "runs").glob("howto-*"):  # only what these how-tos write
        shutil.rmtree(p) if p.is_dir() else p.unlink()


def run_block(code: str, env: dict) -> subprocess.CompletedProcess:
    """One how-to in its own process group, output to files (not pipes), the group killed afterwards:
    a background job it leaves running (the server of a failed serve how-to) would otherwise keep
    the pipes open and hang the test."""
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        p = subprocess.Popen(["bash", "-e", "-c", code], cwd=ROOT, env=env, stdout=out, stderr=err,
                             text=True, start_new_session=True)
        try:
            p.wait(timeout=600)
        except subprocess.TimeoutExpired:
            err.write("\ntimed out after 600 s")
        finally:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            p.wait()
        out.seek(0)
        err.seek(0)
        return subprocess.CompletedProcess(p.args, p.returncode, out.read(), err.read())


def test_the_readme_has_its_how_tos():
    assert len(blocks()) >= 5


@pytest.mark.slow
def test_how_tos_run_as_written():
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
           "OMP_NUM_THREADS": "1"}
    clean()
    try:
        for code in blocks():
            r = run_block(code, env)
            assert r.returncode == 0, f"{code}\n--- stdout\n{r.stdout[-3000:]}\n--- stderr\n{r.stderr[-3000:]}"
            if "curl" in code:
                assert '"text"' in r.stdout, r.stdout
            if "logits.shape" in code:
                assert "torch.Size([1, 11, 128])" in r.stdout, r.stdout
    finally:
        clean()
