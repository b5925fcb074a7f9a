"""benchmarks/convert_profile.py runs the recipe's own step on a tiny base, a draft-only one included (the base
frozen on the clean rows: only the drafter's parameters are trained)."""
import json
import subprocess
import sys
from pathlib import Path

from orl.train import convert as cv
from test_convert import base, smoke_cfg  # noqa: F401  (base: a module fixture)

SCRIPT = Path(__file__).parents[1] / "benchmarks" / "convert_profile.py"


def profile(base_dir, *sets: str) -> list[dict]:
    out = subprocess.run([sys.executable, str(SCRIPT), "--base", str(base_dir / "base"), "--preset", "smoke",
                          "--steps", "2", "--corpus", str(base_dir / "corpus"), *[a for s in sets for a in ("--set", s)]],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    return [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]


def test_profile_plain_and_draft_only(base, tmp_path):
    cv.convert(smoke_cfg(base, steps=1), tmp_path / "run", log=lambda *_: None)  # builds base/corpus
    plain = profile(base)
    drafts = profile(base, "draft_only=true", "freeze_embeddings=true", "draft_aux=1.0", "draft_tokens=2",
                     "draft_stride=2", "draft_target=ar")
    assert not plain[0]["draft_only"] and drafts[0]["draft_only"]
    # the frozen base and the frozen embeddings are not trained: fewer trained parameters than a plain run's
    assert 0 < drafts[0]["trained_params"] < plain[0]["trained_params"]
    assert "summary" in drafts[-1] and drafts[-1]["summary"]["steps"] == 1
