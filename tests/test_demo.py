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


def test_demo_families_leave_helpers_out_and_default_to_tasks_v6():
    from orl.demo import demo_families

    recipe = lambda tasks: {"recipe": {"config": {"tasks": tasks}}}  # noqa: E731
    assert demo_families(recipe(["long7xp", "prog7xp", "long7xph", "split7xps", "keysort7xh"])) == ["long7xp", "prog7xp"]
    assert demo_families({}) == list(task_names()) == demo_families(recipe([]))
    with pytest.raises(ValueError, match="only helpers"):
        demo_families(recipe(["long7xph"]))


def test_demo_samples_add_the_beyond_split_only_for_length_varied_families():
    from orl.demo import demo_budget, demo_samples

    samples = demo_samples(["split", "long7xp"], 2)
    assert (demo_budget(samples[:2]), demo_budget(samples)) == (64, 112)
    got = [(s.task, s.split, s.index) for s in samples]
    assert got == [("split", "heldout", 0), ("split", "heldout", 1), ("long7xp", "heldout", 0), ("long7xp", "heldout", 1),
                   ("long7xp", "beyond", 0), ("long7xp", "beyond", 1)]


@pytest.fixture(scope="module")
def length_varied_base(tmp_path_factory):
    """The shipped base's weights under a manifest that says it trained on two length-varied families and a helper."""
    from orl.checkpoint import load_checkpoint, save_checkpoint

    model, tok, manifest = load_checkpoint(ROOT / "orl-tiny-base")
    manifest["recipe"]["config"]["tasks"] = ["long7xp", "prog7xp", "long7xph"]
    kept = {k: manifest[k] for k in ("block_len", "residual_mode", "recipe", "objective") if k in manifest}
    return save_checkpoint(model, tok, tmp_path_factory.mktemp("lv") / "base", manifest=kept)


@pytest.mark.parametrize("spec_tokens", [0, 4])
def test_demo_of_a_length_varied_base_reports_in_range_and_beyond(length_varied_base, tmp_path, spec_tokens):
    out = io.StringIO()
    rows = run_demo(length_varied_base, tmp_path / "no-orl", per_task=1, spec_tokens=spec_tokens,
                    max_new_tokens=64, out=out)  # its table holds 160 positions, 7 blocks do not fit
    text = out.getvalue()
    assert "4 held-out prompts of long7xp, prog7xp (1 per family and split" in text and "long7xph" not in text
    ok = rows["base"]["ok"]  # long7xp in range, beyond; prog7xp in range, beyond
    assert len(ok) == 4 and rows["base"]["acc"] == pytest.approx(sum(ok) / 4)
    line = next(ln for ln in text.splitlines() if ln.startswith("base   accuracy in range"))
    assert line == (f"base   accuracy in range {100 * (ok[0] + ok[2]) / 2:.1f}%, beyond the training range "
                    f"{100 * (ok[1] + ok[3]) / 2:.1f}%")
    table = next(ln for ln in text.splitlines() if ln.startswith("base ") and "accuracy" not in ln)
    assert table.split()[1] == ("off" if not spec_tokens else "unused")
    assert ("fused self-speculative decoder, 4 drafted tokens" in text) == bool(spec_tokens)
