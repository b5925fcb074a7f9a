"""A task whose prompts the seed does not pick (HumanEval, a data file), decoded by a decoder that ignores its seed
(greedy), gives the same sample under every prompt seed. The headline's and length_table --paired's pairing counts
it once: once per seed, 3 seeds made a discordant prompt 3 discordant pairs and McNemar's p far too small
(b = 3, c = 0: p = 0.25 on the prompts, 2 / 2^9 counted 3 times)."""
import pytest

from orl.engine.ar_step import ARConfig
from orl.engine.canvas import CanvasConfig
from orl.engine.config import DecodeConfig
from orl.eval.headline import block_notes, compare, reads_seed
from orl.eval.records import config_id

GREEDY = {"rule": "threshold", "block_len": 4, "residual": "off", "temperature": 0.0, "threshold": 0.9}


def rec(model: str, seed: int, i: int, ok: bool, prompt: str, decode: dict = GREEDY) -> dict:
    d = {**decode, "seed": seed}
    return {"prompt_id": f"x/heldout/{i}", "task": "x", "sample": 0, "verdict": ok, "n_tokens": 8, "prompt": prompt,
            "finished": True, "forwards": {"prefill": 1, "step": 4, "commit": 0}, "block_steps": [2, 2],
            "timing": {"tokens_per_s": 10.0, "total_s": 0.8}, "batch_size": 1, "decode": d,
            "config_id": config_id(d, 1), "model": {"name": model, "id": model}}


def pair(prompt_of, decode=GREEDY):
    """A right and B wrong on 3 prompts, each under prompt seeds 0-2 -> the headline block."""
    recs = [rec(m, s, i, m == "A", prompt_of(s, i), decode) for m in "AB" for s in range(3) for i in range(3)]
    (blk,) = compare(recs)
    return blk


def test_a_fixed_prompt_under_three_seeds_counts_once():
    blk = pair(lambda s, i: f"fixed prompt {i}")
    row = blk["rows"][-1]
    assert (row["n"], row["only_a"], row["only_b"]) == (3, 3, 0)
    assert row["p"] == pytest.approx(0.25)
    assert blk["repeats"] == 12  # 2 x 9 records, 2 x 3 samples
    assert any("count once" in n for n in block_notes(blk))


def test_prompts_the_seed_picks_count_under_every_seed():
    blk = pair(lambda s, i: f"seed {s} prompt {i}")
    row = blk["rows"][-1]
    assert (row["n"], row["only_a"]) == (9, 9) and blk["repeats"] == 0
    assert blk["seeds"] == [0, 1, 2]


def test_a_sampling_decoder_keeps_each_seeds_draw():
    blk = pair(lambda s, i: f"fixed prompt {i}", {**GREEDY, "temperature": 0.7})
    assert blk["rows"][-1]["n"] == 9


@pytest.mark.parametrize("cfg", [
    DecodeConfig(), DecodeConfig(temperature=0.5), DecodeConfig(alg_temp=0.1), DecodeConfig(confidence="random"),
    ARConfig(), ARConfig(temperature=1.0), CanvasConfig()])
def test_reads_seed_agrees_with_the_configs_draws(cfg):
    assert reads_seed(cfg.to_dict()) == cfg.draws
