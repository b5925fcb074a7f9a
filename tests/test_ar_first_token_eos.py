"""Fast-dLLM v2's AR first token: when it is EOS (eos_fill), the rest of the block is EOS and the block takes no
denoising step (a review found the mask of rows to fill read after it was cleared, so the fill never ran and
each such block cost a step: one forward too many in TPF and in the ORL trace)."""
import pytest

from orl.engine import DecodeConfig, Engine
from orl.tokenizer import CharTokenizer
from reference_decoder import random_model

TOK = CharTokenizer()
pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.mark.parametrize("eos_fill", [True, False])
def test_an_eos_first_token_ends_the_block_without_a_step(eos_fill):
    eng = Engine(random_model(vocab_size=TOK.vocab_size, eos_bias=1e4, shift_logits=True), TOK)
    cfg = DecodeConfig(block_len=8, max_new_tokens=16, rule="fast_dllm_v2", small_block_size=4, eos_fill=eos_fill)
    g = eng.generate("abc", cfg, trace=True)[0]
    assert g.token_ids[0] == TOK.eos_id and g.finished
    # with the fill: the AR token alone resolved the block, no step; without it the other 7 masks need steps
    assert (g.step_forwards == 0) == eos_fill
    assert (g.trace == []) == eos_fill
