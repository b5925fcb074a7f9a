"""benchmarks/loss_curves.py: window means per run and family, a resumed step counted once, balanced rows."""
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def write_log(path: Path, records: list[dict]) -> None:
    path.mkdir()
    (path / "train.log.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))


def test_table_of_window_means(tmp_path):
    fixed = [{"step": s, "stage": "ar", "task_loss": {"a": float(s), "b": 10.0}} for s in (1, 2, 3)]
    fixed.append({"step": 3, "task_loss": {"a": 5.0, "b": 10.0}})  # step 3 again (an old log): this one counts
    fixed.append({"step": 4, "stage": "diffusion", "task_loss": {"a": 99.0, "b": 99.0}})  # not in the AR table
    balanced = [{"step": s, "task_loss": {"a": 1.0, "b": 2.0}, "rows": {"a": r, "b": 8 - r}}
                for s, r in ((1, 4), (2, 2), (3, 3))]
    write_log(tmp_path / "fixed", fixed)
    write_log(tmp_path / "bal", balanced)
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks/loss_curves.py"), str(tmp_path / "fixed"),
                          str(tmp_path / "bal") + "/", "--window", "2"], capture_output=True, text=True, check=True)
    lines = out.stdout.splitlines()
    assert lines[0] == "| run | family | 1-2 | 3-3 | rows/step |"
    assert lines[2:] == ["| fixed | a | 1.500 | 5.000 | fixed |", "| fixed | b | 10.000 | 10.000 | fixed |",
                         "| bal | a | 1.000 | 1.000 | 3.0 |", "| bal | b | 2.000 | 2.000 | 5.0 |"]
    diff = subprocess.run([sys.executable, str(ROOT / "benchmarks/loss_curves.py"), str(tmp_path / "fixed"),
                           "--stage", "diffusion"], capture_output=True, text=True, check=True).stdout.splitlines()
    assert diff[0] == "| run | family | 4-4 | rows/step |" and diff[2] == "| fixed | a | 99.000 | fixed |"
    bad = subprocess.run([sys.executable, str(ROOT / "benchmarks/loss_curves.py"), str(tmp_path / "bal"),
                          "--stage", "diffusion"], capture_output=True, text=True)
    assert bad.returncode == 1 and "no steps of stage 'diffusion'" in bad.stderr
