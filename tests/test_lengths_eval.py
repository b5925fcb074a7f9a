"""benchmarks/lengths_eval.sh: issue 21's evaluation loops run from the repository (they lived in a cache directory
a fresh machine lacks): records land under the checkpoint's name per mode; a bad mode or a missing checkpoint is an
error that names it."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from orl.train.orl import SHIPPED_BASE

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "lengths_eval.sh"


def run(tmp_path, *args):
    env = {**os.environ, "R": str(tmp_path), "E": str(tmp_path / "eval"), "SEEDS": "0", "LIMIT": "1",
           "OMP_NUM_THREADS": "1", "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    return subprocess.run(["bash", str(SCRIPT), *args], env=env, capture_output=True, text=True, timeout=300)


def test_sweep_mode_writes_one_record_per_prompt_and_threshold(tmp_path):
    r = run(tmp_path, SHIPPED_BASE, "sweep")
    assert r.returncode == 0, r.stderr
    recs = [json.loads(x) for x in (tmp_path / "eval" / "orl-tiny-base-sweep.jsonl").read_text().splitlines()]
    assert len(recs) == 2 * 3  # long7xp and prog7xp, one prompt each, thresholds 0.8 / 0.95 / 0.99
    assert {r["task"] for r in recs} == {"long7xp", "prog7xp"} and {r["split"] for r in recs} == {"heldout"}


@pytest.mark.parametrize("args, msg", [(("nope",), "no checkpoint at"), ((SHIPPED_BASE, "fast"), "unknown mode 'fast'")])
def test_bad_input_is_named(tmp_path, args, msg):
    r = run(tmp_path, *args)
    assert r.returncode == 2 and msg in r.stderr
