"""Records written before a decode knob existed pool with new records of the same decoder (records.LATER_KNOBS:
a knob at its historical value stays out of the config id "so an eval file written before it existed still
resumes and pools with new records"). separate_configs compared the raw decode dicts instead, so a missing knob
(None) differed from the same knob at its historical value: a seed-0 file from before `fused_commit` and seed-1/2
files from after it became two curves of one decoder, "[fused_commit=None stop=None]" and
"[fused_commit=False stop=[]]", each with fewer samples and seeds, and the headline compared each part alone."""
from orl.eval import metrics
from orl.eval.headline import compare
from orl.eval.records import config_id, group_value, separate_configs

OLD = {"rule": "threshold", "block_len": 4, "residual": "off", "temperature": 0.0, "threshold": 0.9}
# what a current DecodeConfig writes besides: later knobs at their historical values, a rule-only knob of another rule
NEW = {**OLD, "fused_commit": False, "layout": "prompt_block", "stop": [], "small_block_size": 8, "top_k": 0}


def rec(model: str, seed: int, i: int, ok: bool, decode: dict) -> dict:
    d = {**decode, "seed": seed}
    return {"prompt_id": f"x/heldout/{seed * 2 ** 32 + i}", "task": "x", "sample": 0, "verdict": ok, "n_tokens": 8,
            "finished": True, "forwards": {"prefill": 1, "step": 4, "commit": 0}, "block_steps": [2, 2],
            "timing": {"tokens_per_s": 10.0, "total_s": 0.8}, "batch_size": 1, "decode": d,
            "config_id": config_id(d, 1), "model": {"name": model, "id": model}}


def records() -> list[dict]:
    # A: seed 0 evaluated before the knobs existed, seeds 1 and 2 after; B: all after. A right on every prompt,
    # B right on none: b = 6 discordant pairs over 3 seeds x 2 prompts, c = 0
    a = [rec("A", s, i, True, OLD if s == 0 else NEW) for s in range(3) for i in range(2)]
    b = [rec("B", s, i, False, NEW) for s in range(3) for i in range(2)]
    return a + b


def test_old_and_new_records_of_one_decoder_are_one_curve():
    recs = separate_configs(records())
    assert {group_value(r, "decoder") for r in recs} == {"threshold L4"}
    (row,) = [r for r in metrics.summarize(recs, ("model", "decoder", "threshold"), group_value) if r["model"] == "A"]
    assert (row["n"], row["accuracy"]) == (6, 1.0)


def test_the_headline_pairs_every_seed_of_the_old_and_new_records():
    (blk,) = compare(separate_configs(records()))
    assert blk["seeds"] == [0, 1, 2] and blk["unpaired"] == 0
    pooled = blk["rows"][-1]
    assert (pooled["n"], pooled["only_a"], pooled["only_b"]) == (6, 6, 0)
    assert pooled["p"] == 2 / 2 ** 6  # exact McNemar: 2 * (1/2)^6


def test_a_knob_that_really_differs_still_gets_its_own_curve():
    recs = records() + [rec("A", 0, 0, True, {**NEW, "fused_commit": True})]
    labels = {group_value(r, "decoder") for r in separate_configs(recs) if r["model"]["name"] == "A"}
    assert labels == {"threshold L4 [fused_commit=False]", "threshold L4 [fused_commit=True]"}
