"""The README's how-tos run as written (issue 23 item 7): every ```bash block after a
`<!-- doc-test -->` line, from the repository root with the venv's bin on the PATH."""
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BLOCK = re.compile(r"<!-- doc-test -->\n```bash\n(.*?)```", re.S)


def blocks() -> list[str]:
    return BLOCK.findall((ROOT / "README.md").read_text())


def clean() -> None:
    for p in (ROOT / "runs").glob("howto-*"):  # only what these how-tos write
        shutil.rmtree(p) if p.is_dir() else p.unlink()


def test_the_readme_has_its_how_tos():
    assert len(blocks()) >= 5


@pytest.mark.slow
def test_how_tos_run_as_written():
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
           "OMP_NUM_THREADS": "1"}
    clean()
    try:
        for code in blocks():
            r = subprocess.run(["bash", "-e", "-c", code], cwd=ROOT, env=env, capture_output=True, text=True,
                               timeout=600)
            assert r.returncode == 0, f"{code}\n--- stdout\n{r.stdout[-3000:]}\n--- stderr\n{r.stderr[-3000:]}"
            if "curl" in code:
                assert '"text"' in r.stdout, r.stdout
            if "logits.shape" in code:
                assert "torch.Size([1, 11, 128])" in r.stdout, r.stdout
    finally:
        clean()
