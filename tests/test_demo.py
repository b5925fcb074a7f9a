"""`orl demo` on the shipped checkpoints: its table shows accuracy in %, TPF as a ratio of sums over
the prompts (with and without EOS) and tokens/s at batch 1, and the ORL / base line the paired test."""
from __future__ import annotations

import io
import json
import re
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


def test_trained_tasks_leave_helpers_out_k_shot_ones_too_and_default_to_tasks_v6():
    from orl.eval.tasks import trained_tasks

    recipe = lambda tasks: {"recipe": {"config": {"tasks": tasks}}}  # noqa: E731
    assert trained_tasks(recipe(["long7xp", "prog7xp:3shot", "long7xph", "long7xph:3shot", "keysort7xh"])) == (
        "long7xp", "prog7xp:3shot")
    assert trained_tasks({"recipe": None}) == tuple(task_names()) == trained_tasks(recipe(["long7xph"]))


def test_demo_samples_add_the_beyond_split_only_for_length_varied_families():
    from orl.demo import demo_budget, demo_samples

    samples = demo_samples(["split", "long7xp:1shot"], 2)
    got = [(s.task, s.split, s.index) for s in samples]
    assert got == [("split", "heldout", 0), ("split", "heldout", 1), ("long7xp:1shot", "heldout", 0),
                   ("long7xp:1shot", "heldout", 1), ("long7xp:1shot", "beyond", 0), ("long7xp:1shot", "beyond", 1)]
    longest = max(len(s.prompt) for s in samples)
    assert demo_budget(samples[:2], 10_000, 16) == 64 and demo_budget(samples, 10_000, 16) == 112
    assert demo_budget(samples, longest + 100, 16) == 96  # whole blocks of what the context leaves
    with pytest.raises(ValueError, match="per_task must be >= 1"):
        demo_samples(["split"], 0)


@pytest.fixture(scope="module")
def length_varied_base(tmp_path_factory):
    """The shipped base's weights under a manifest that says it trained on a fixed-size family, a
    length-varied one and a helper."""
    from orl.checkpoint import load_checkpoint, save_checkpoint

    model, tok, manifest = load_checkpoint(ROOT / "orl-tiny-base")
    manifest["recipe"]["config"]["tasks"] = ["split", "long7xp", "long7xph"]
    kept = {k: manifest[k] for k in ("block_len", "residual_mode", "recipe", "objective") if k in manifest}
    return save_checkpoint(model, tok, tmp_path_factory.mktemp("lv") / "base", manifest=kept)


def fused_reference(path, samples, spec_tokens: int, max_new_tokens: int) -> tuple[list[bool], float]:
    """Verdicts and pooled TPF of `orl eval --spec-draft fused`'s decoder, built here by hand."""
    from orl.checkpoint import load_checkpoint
    from orl.engine.ar import ARConfig, ARDecoder

    model, tok, manifest = load_checkpoint(path)
    dec = ARDecoder(model, tok, manifest=manifest)
    cfg = ARConfig(max_new_tokens=max_new_tokens, spec_tokens=spec_tokens, spec_draft="fused",
                   spec_groups=min(3, 2 * spec_tokens))
    gens = [dec.generate(s.prompt, cfg)[0] for s in samples]
    ok = [get_task(s.task).verify(s.prompt, g.text) for s, g in zip(samples, gens)]
    return ok, sum(g.n_tokens for g in gens) / sum(g.forwards for g in gens)


def test_default_decoder_is_the_fused_one_only_for_a_base_trained_with_a_next_token_loss():
    from orl.demo import default_spec_tokens

    pretrain = lambda ar_aux, objective="block_diffusion": {  # noqa: E731
        "objective": objective, "recipe": {"name": "pretrain", "config": {"ar_aux": ar_aux}}}
    assert default_spec_tokens(pretrain(2.0)) == 8
    assert default_spec_tokens(pretrain(0.0)) == default_spec_tokens(pretrain(None)) == 0
    assert default_spec_tokens(pretrain(2.0, "autoregressive")) == 0  # nothing to draft with
    assert default_spec_tokens({"objective": "block_diffusion"}) == 0  # no recipe recorded
    orl = json.loads((ROOT / "orl-tiny7-orl" / "orl.json").read_text())  # no ar_aux of its own: its base's
    assert default_spec_tokens(orl) == 8
    assert default_spec_tokens({**orl, "recipe": {**orl["recipe"], "base": "/nowhere"}}) == 0


def test_cli_pairs_the_shipped_orl_model_only_with_the_shipped_base(capsys):
    from orl.cli import main

    assert main(["demo", "--base", str(ROOT / "orl-tiny-base"), "--per-task", "1", "--spec-tokens", "0"]) == 0
    out = capsys.readouterr().out
    assert "(no ORL checkpoint given: showing the base model only)" in out and "ORL / base" not in out
    with pytest.raises(ValueError, match="trained on long7xp, .* and the base .* on split, keysort"):
        run_demo(ROOT / "orl-tiny-base", ROOT / "orl-tiny7-orl", per_task=1, out=io.StringIO())


@pytest.mark.parametrize("spec_tokens", [0, 1, 4])
def test_demo_of_a_length_varied_base_reports_in_range_and_beyond(length_varied_base, tmp_path, spec_tokens):
    from orl.demo import demo_budget, demo_samples

    out = io.StringIO()
    rows = run_demo(length_varied_base, tmp_path / "no-orl", per_task=1, spec_tokens=spec_tokens, out=out)
    text = out.getvalue()
    samples = demo_samples(["split", "long7xp"], 1)
    budget = demo_budget(samples, 160, 16)  # the shipped base's 160 positions leave 96 new tokens, not 112
    assert budget == 96 and f"at most {budget} new tokens" in text
    assert "3 held-out prompts of split, long7xp (1 per family, and 1 beyond the training range of long7xp)" in text
    assert "long7xph" not in text
    ok = rows["base"]["ok"]  # split in range; long7xp in range, beyond
    assert len(ok) == 3 and rows["base"]["acc"] == pytest.approx(sum(ok) / 3)
    line = next(ln for ln in text.splitlines() if ln.startswith("base   long7xp:"))
    assert line == f"base   long7xp: in range {100 * ok[1]:.1f}%, beyond the training range {100 * ok[2]:.1f}%"
    table = next(ln for ln in text.splitlines() if ln.startswith("base ") and ":" not in ln)
    assert table.split()[1] == ("off" if not spec_tokens else "unused")
    # the example is decoded as the table's prompts were, and judged
    assert ("round by round" in text) == bool(spec_tokens) and ("step by step" in text) == (not spec_tokens)
    assert ("\n  round 1: " in text) == bool(spec_tokens)  # the block engine's BlockEvents are no rounds
    assert re.search(r"\n  -> '.*'  \(\d+ tokens, \d+ forwards, TPF [\d.]+, (right|wrong)\)\n", text)
    if spec_tokens:  # scored by the fused decoder, not the threshold one
        assert f"fused self-speculative decoder ({spec_tokens} drafted token{'s' * (spec_tokens > 1)}," in text
        ref_ok, ref_tpf = fused_reference(length_varied_base, samples, spec_tokens, budget)
        assert ok == ref_ok and rows["base"]["tpf"] == pytest.approx(ref_tpf)


def test_a_drafter_is_refused_up_front_with_what_to_run_instead():
    """A draft-only drafter as --base or --orl: a clear error naming the commands that decode it, before any
    model is built."""
    from pathlib import Path

    drafter = str(Path(__file__).resolve().parent.parent / "checkpoints" / "orl-tiny7-draft")
    for base, orl in ((drafter, None), (str(Path(drafter).parent / "orl-tiny7-base"), drafter)):
        with pytest.raises(ValueError, match="draft-only drafter .* --spec-draft fused --spec-tokens 8"):
            run_demo(base, orl)


def test_a_threshold_beside_the_fused_decoder_is_refused_not_ignored():
    """`orl demo --threshold 2` ran the whole demo under the fused decoder (which has no threshold) without a word."""
    from pathlib import Path

    base = str(Path(__file__).resolve().parent.parent / "checkpoints" / "orl-tiny7-base")
    with pytest.raises(ValueError, match="--threshold 0.5 is the threshold decoder's.*add --spec-tokens 0"):
        run_demo(base, None, threshold=0.5, out=io.StringIO())


def test_the_shipped_drafter_is_shown_beside_the_base_with_its_outputs():
    """`orl demo`'s drafter row: the shipped orl-tiny7-draft under the fused decoder emits the base's outputs on every
    prompt in fewer forwards (measured on these 10 prompts: TPF 2.61 vs 2.24, x1.16; session 54's pair); under the threshold decoder
    there is no drafter row; a drafter for another verifier is refused by name."""
    base, drafter = ROOT / "orl-tiny7-base", ROOT / "orl-tiny7-draft"
    out = io.StringIO()
    rows = run_demo(base, None, per_task=1, drafter=drafter, out=out)
    assert rows["draft"]["token_ids"] == rows["base"]["token_ids"] and rows["draft"]["ok"] == rows["base"]["ok"]
    assert rows["draft"]["tpf"] > rows["base"]["tpf"]
    assert "identical outputs on 10 of 10 prompts" in out.getvalue()
    rows = run_demo(base, None, per_task=1, drafter=drafter, spec_tokens=0, out=io.StringIO())
    assert "draft" not in rows
    with pytest.raises(ValueError, match="drafts for checkpoints/orl-tiny7-ar, not for the base"):
        run_demo(base, None, per_task=1, drafter=ROOT / "orl-tiny7-ardraft", out=io.StringIO())
    with pytest.raises(ValueError, match="records no verifier"):
        run_demo(base, None, per_task=1, drafter=ROOT / "orl-tiny7-orl", out=io.StringIO())
