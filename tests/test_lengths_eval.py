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


def run(tmp_path, *args, **extra):
    env = {**os.environ, **extra, "R": str(tmp_path), "E": str(tmp_path / "eval"), "SEEDS": "0", "LIMIT": "1",
           "OMP_NUM_THREADS": "1", "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    return subprocess.run(["bash", str(SCRIPT), *args], env=env, capture_output=True, text=True, timeout=300)


def test_sweep_mode_writes_one_record_per_prompt_and_threshold(tmp_path):
    r = run(tmp_path, SHIPPED_BASE, "sweep")
    assert r.returncode == 0, r.stderr
    recs = [json.loads(x) for x in (tmp_path / "eval" / "orl-tiny-base-sweep.jsonl").read_text().splitlines()]
    assert len(recs) == 2 * 3  # long7xp and prog7xp, one prompt each, thresholds 0.8 / 0.95 / 0.99
    assert {r["task"] for r in recs} == {"long7xp", "prog7xp"} and {r["split"] for r in recs} == {"heldout"}


def test_every_mode_gives_commands_orl_eval_accepts(tmp_path):
    """DRY=1: each mode's commands, parsed by the real `orl eval` parser (a misspelt flag fails here)."""
    import shlex

    from orl.cli import build_parser

    r = run(tmp_path, SHIPPED_BASE, "ar", "thr", "fused", "sweep", "rules", DRY="1")
    assert r.returncode == 0, r.stderr
    cmds = [shlex.split(x)[1:] for x in r.stdout.splitlines() if x.startswith("orl eval ")]
    assert len(cmds) == 2 + 2 + 2 + 1 + 2  # both splits for ar / thr / fused, one seed
    outs = {}
    for c in cmds:
        a = build_parser().parse_args(c)
        outs.setdefault(a.out.rsplit("-", 1)[1], []).append(a)
    assert sorted(outs) == ["ar.jsonl", "fused.jsonl", "rules.jsonl", "sweep.jsonl", "thr.jsonl"]
    assert {a.split for a in outs["fused.jsonl"]} == {"heldout", "beyond"}


def test_an_empty_mode_list_means_the_default(tmp_path):
    r = run(tmp_path, SHIPPED_BASE, "", DRY="1")
    assert r.returncode == 0 and sum(x.startswith("orl eval ") for x in r.stdout.splitlines()) == 4  # thr, fused


@pytest.mark.parametrize("args, msg", [(("nope",), "no checkpoint at"), ((SHIPPED_BASE, "fast"), "unknown mode 'fast'")])
def test_bad_input_is_named(tmp_path, args, msg):
    r = run(tmp_path, *args)
    assert r.returncode == 2 and msg in r.stderr
