"""`orl demo` on the shipped checkpoints: its table shows accuracy in %, TPF as a ratio of sums over
the prompts (with and without EOS) and tokens/s at batch 1, and the ORL / base line the paired test."""
from __future__ import annotations

import io
from pathlib import Path

import pytest

from orl.demo import run_demo
from orl.engine import DecodeConfig, Engine
from orl.eval import metrics
from orl.eval.tasks import get_task, task_names

ROOT = Path(__file__).resolve().parent.parent / "checkpoints"
pytestmark = pytest.mark.usefixtures("one_thread")


def test_demo_table_is_ratio_of_sums_in_one_unit():
    out = io.StringIO()
    rows = run_demo(ROOT / "orl-tiny-base", ROOT / "orl-tiny-orl", per_task=1, out=out)
    text = out.getvalue()
    samples = [get_task(t).sample("heldout", 0) for t in task_names()]
    for name, r in rows.items():
        engine = Engine.from_checkpoint(ROOT / f"orl-tiny-{name}")
        cfg = DecodeConfig.from_manifest(engine.manifest, max_new_tokens=64, threshold=0.9)
        gens = [engine.generate(s.prompt, cfg)[0] for s in samples]
        tokens, fwd = sum(g.n_tokens for g in gens), sum(g.forwards for g in gens)
        assert r["tpf"] == pytest.approx(tokens / fwd)  # not the mean of per-prompt TPF
        assert r["tpf_no_eos"] == pytest.approx((tokens - sum(g.finished for g in gens)) / fwd)
        line = next(ln for ln in text.splitlines() if ln.startswith(name + " "))
        assert line.split()[2:5] == [f"{100 * r['acc']:.1f}", f"{r['tpf']:.2f}", f"{r['tpf_no_eos']:.2f}"]
    assert "acc %" in text and "tok/s (batch 1)" in text
    _, only_base, only_orl = metrics.paired_counts(dict(enumerate(rows["base"]["ok"])), dict(enumerate(rows["orl"]["ok"])))
    assert f"McNemar p = {metrics.mcnemar_exact(only_base, only_orl):.3g}" in text
    assert "ORL / base: TPF x" in text and "step by step" in text
