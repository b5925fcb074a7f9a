"""The bench's plain decoders (orl.eval.peers) compute what the engine computes: with the same commit
rule they produce the engine's tokens, for the plain and the shifted read-out."""
import pytest

from orl.engine import DecodeConfig, Engine
from orl.eval.peers import llada_reference, prefix_cache
from orl.tokenizer import CharTokenizer
from reference_decoder import random_model

TOK = CharTokenizer()
V = TOK.vocab_size
PROMPTS = ["hello", "sort:3,1,2=", "a"]

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module", params=[False, True], ids=["plain", "shifted"])
def engine(request):
    return Engine(random_model(vocab_size=V, adapter_dim=0, eos_bias=3.0, shift_logits=request.param), TOK)


def test_prefix_cache_equals_engine_threshold(engine):
    cfg = DecodeConfig(block_len=4, max_new_tokens=12, rule="threshold", threshold=0.3, eos_fill=False)
    multi = 0
    for p in PROMPTS:
        g = engine.generate(p, cfg)[0]
        b = prefix_cache(engine.model, TOK.encode(p), gen_len=12, block_len=4, threshold=0.3, mask_id=TOK.mask_id,
                         eos_id=TOK.eos_id, banned=engine.ids.banned)
        assert b.token_ids == g.token_ids, p
        multi += sum(s > 1 for s in g.block_steps)
    assert multi > 0  # some blocks took several steps: the comparison covers the step loop


def test_llada_reference_one_per_step_equals_engine_topk(engine):
    cfg = DecodeConfig(block_len=4, max_new_tokens=12, rule="topk", steps_per_block=0, eos_fill=False)
    for p in PROMPTS:
        g = engine.generate(p, cfg)[0]
        b = llada_reference(engine.model, TOK.encode(p), gen_len=12, block_len=4, steps=12, mask_id=TOK.mask_id,
                            eos_id=TOK.eos_id, banned=engine.ids.banned)
        assert b.token_ids == g.token_ids, p
