"""Fast-dLLM v2 reads a block's first token off the forward before the block (the prefill, for block 0), so an
answer of one token (max_new_tokens 1, or a first token that is EOS) costs no denoising or commit forward: TPF of
that sample alone is undefined, but a set's TPF is a ratio of sums (DESIGN section 5) and stays defined. `orl eval`
must record such a sample instead of failing with "TPF needs at least one ... forward"."""
import json

import pytest

from orl.engine import DecodeConfig, Engine
from orl.eval import metrics
from orl.eval.runner import EvalSpec, run_eval
from orl.tokenizer import CharTokenizer
from reference_decoder import random_model

TOK = CharTokenizer()
pytestmark = pytest.mark.usefixtures("one_thread")


def test_fast_dllm_v2_one_token_answer_costs_no_forward():
    eng = Engine(random_model(vocab_size=TOK.vocab_size, eos_bias=-1e4, shift_logits=True), TOK)
    g = eng.generate("abc", DecodeConfig(block_len=4, max_new_tokens=1, rule="fast_dllm_v2", small_block_size=2))[0]
    assert (g.n_tokens, g.step_forwards, g.commit_forwards) == (1, 0, 0)


def _rec(tokens, step, commit, finished=True):
    return {"n_tokens": tokens, "finished": finished, "forwards": {"step": step, "commit": commit}}


def test_pooled_tpf_is_a_ratio_of_sums_with_a_zero_forward_sample():
    # 1 token (EOS) in 0 forwards + 4 tokens (EOS included) in 2 forwards: 5 / 2 over the set, 3 / 2 without EOS
    t = metrics.pooled_tpf([_rec(1, 0, 0), _rec(4, 1, 1)])
    assert t["tpf"] == pytest.approx(5 / 2)
    assert t["tpf_no_eos"] == pytest.approx(3 / 2)
    assert t["tpf_sample_mean"] == pytest.approx(2.0)  # the only sample with a per-sample TPF
    with pytest.raises(ValueError, match="forward"):
        metrics.pooled_tpf([_rec(1, 0, 0)])  # no forward at all: no TPF


def test_eval_records_a_fast_dllm_v2_sample_of_one_token(tmp_path):
    out = tmp_path / "r.jsonl"
    spec = EvalSpec(model="checkpoints/orl-tiny-base", out=str(out), tasks=["split"], limit=2, batch_size=2,
                    decode={"rule": "fast_dllm_v2", "max_new_tokens": 1}, progress=False)
    recs = run_eval(spec)
    assert len(recs) == 2 and len(out.read_text().splitlines()) == 2
    for r in recs:
        assert r["n_tokens"] == 1 and r["forwards"]["step"] + r["forwards"]["commit"] == 0
        assert r["tpf"] is None  # no per-sample TPF of 1 token / 0 forwards
    assert json.loads(out.read_text().splitlines()[0])["tpf"] is None
