"""benchmarks/device_tree.sh: the shipped checkpoints out of what a device call carries, and back, in a scratch
git repository - the files stay on disk, the user's exclude lines and staged work survive."""
import shutil
import subprocess
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "device_tree.sh"
pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="needs git")


def git(repo, *args):
    return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=repo, check=True,
                          capture_output=True, text=True).stdout


def tree(repo, cmd):
    return subprocess.run(["bash", str(SCRIPT), cmd], cwd=repo, capture_output=True, text=True)


@pytest.fixture
def repo(tmp_path):
    git(tmp_path, "init", "-q")
    (tmp_path / "checkpoints" / "tiny").mkdir(parents=True)
    (tmp_path / "checkpoints" / "tiny" / "model.safetensors").write_bytes(b"w" * 4096)
    (tmp_path / "code.py").write_text("x = 1\n")
    git(tmp_path, "add", ".")
    git(tmp_path, "commit", "-qm", "init")
    (tmp_path / ".git" / "info").mkdir(exist_ok=True)
    (tmp_path / ".git" / "info" / "exclude").write_text("# mine\n/scratch/\n")
    return tmp_path


def test_slim_then_restore_leaves_everything_as_it_was(repo):
    r = tree(repo, "slim")
    assert r.returncode == 0, r.stderr
    assert git(repo, "ls-files").split() == ["code.py"]  # what a device call would carry
    assert (repo / "checkpoints" / "tiny" / "model.safetensors").read_bytes() == b"w" * 4096  # still on disk
    assert "checkpoints" not in git(repo, "ls-files", "--others", "--exclude-standard")
    assert tree(repo, "status").stdout.strip() == "slim"
    assert tree(repo, "slim").stdout.strip() == "already slim"
    r = tree(repo, "restore")
    assert r.returncode == 0, r.stderr
    assert git(repo, "status", "--porcelain") == ""
    assert (repo / ".git" / "info" / "exclude").read_text() == "# mine\n/scratch/\n"
    assert tree(repo, "restore").stdout.strip() == "not slim: nothing to restore"


def test_slim_refuses_staged_work_under_the_paths(repo):
    (repo / "checkpoints" / "tiny" / "model.safetensors").write_bytes(b"v" * 10)
    git(repo, "add", "checkpoints")
    r = tree(repo, "slim")
    assert r.returncode == 2 and "staged changes" in r.stderr
    assert tree(repo, "status").stdout.strip() == "not slim"
    assert "M  checkpoints/tiny/model.safetensors" in git(repo, "status", "--porcelain")  # the staged work stays


def test_restore_puts_back_what_slim_took_even_with_other_settings_and_no_final_newline(repo):
    (repo / ".git" / "info" / "exclude").write_text("# mine\n/scratch/")  # no newline at the end
    (repo / "docs").mkdir()
    (repo / "docs" / "report").mkdir()
    (repo / "docs" / "report" / "plot.png").write_bytes(b"p" * 100)
    git(repo, "add", ".")
    git(repo, "commit", "-qm", "docs")
    assert tree(repo, "slim").returncode == 0
    assert git(repo, "ls-files").split() == ["code.py"]
    assert "/scratch/\n# device_tree.sh slim\n" in (repo / ".git" / "info" / "exclude").read_text()
    r = subprocess.run(["bash", str(SCRIPT), "restore"], cwd=repo, capture_output=True, text=True,
                       env={**__import__("os").environ, "SLIM_PATHS": "checkpoints"})
    assert r.returncode == 0, r.stderr
    assert git(repo, "status", "--porcelain") == ""  # docs/report came back too
    assert (repo / ".git" / "info" / "exclude").read_text() == "# mine\n/scratch/\n"
