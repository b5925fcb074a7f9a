"""`orl eval --n-samples N` draws N answers per prompt for pass@k. A greedy decoder ignores the seed, so its N
draws are one answer N times: the run costs N times as much and its "pass@k" columns are pass@1 under another
name. Refused up front, naming the fix, instead of writing N identical records per prompt."""
import pytest

from orl.eval.runner import EvalSpec, run_eval

pytestmark = pytest.mark.usefixtures("one_thread")


def test_several_draws_of_a_greedy_decoder_are_refused(tmp_path):
    out = tmp_path / "r.jsonl"
    spec = EvalSpec(model="checkpoints/orl-tiny-base", out=str(out), tasks=["split"], limit=2, n_samples=3,
                    progress=False)
    with pytest.raises(ValueError, match="n_samples.*temperature"):
        run_eval(spec)
    assert not out.exists()


def test_several_draws_of_a_sampling_decoder_run(tmp_path):
    out = tmp_path / "r.jsonl"
    spec = EvalSpec(model="checkpoints/orl-tiny-base", out=str(out), tasks=["split"], limit=2, n_samples=2,
                    batch_size=4, decode={"temperature": 1.0}, progress=False)
    recs = run_eval(spec)
    assert sorted((r["prompt_id"], r["sample"]) for r in recs) == [
        ("split/heldout/0", 0), ("split/heldout/0", 1), ("split/heldout/1", 0), ("split/heldout/1", 1)]


def test_block_decoder_settings_on_an_ar_checkpoint_are_refused_not_dropped(tmp_path):
    """`orl generate` refuses --rule / --block-len / --threshold on an AR checkpoint; `orl eval` ran plain AR
    decoding and dropped them without a word (thresholds excepted: a sweep's one AR point). Its speed settings (chunk_steps) are the AR decoder's own."""
    common = dict(model="checkpoints/orl-tiny7-ar", out=str(tmp_path / "r.jsonl"), tasks=["keysort7x"], limit=1,
                  batch_size=1, progress=False)
    with pytest.raises(ValueError, match="block_len, rule: not used by the autoregressive decoder"):
        run_eval(EvalSpec(**common, thresholds=[0.5], decode={"rule": "topk", "block_len": 4}))
    # a sweep's thresholds may name the AR peer beside block models: one point, threshold None in its records
    (rec,) = run_eval(EvalSpec(**{**common, "out": str(tmp_path / "s.jsonl")}, thresholds=[0.5, 0.9],
                               decode={"max_new_tokens": 16}))
    assert rec["decode"]["threshold"] is None
    recs = run_eval(EvalSpec(**common, decode={"chunk_steps": 3, "max_new_tokens": 16}))
    assert recs[0]["decode"]["chunk_steps"] == 3 and recs[0]["decode"]["rule"] == "ar"
