"""Several EOS ids stop a row (tokenizer.eos_ids, resolved by orl.tokenizer.resolve_special_ids: eos
plus the config's eos_token_id list and the family's end-of-turn tokens), in the block engine (every
layout), the full-sequence loop and the AR decoder; the step stays free of host syncs."""
import copy

import pytest
import torch

from orl.engine import DecodeConfig, Engine
from orl.engine.ar import ARConfig, ARDecoder
from orl.engine.decode import run_chunk
from orl.model.vocab import is_eos, special_ids
from orl.tokenizer import CharTokenizer
from reference_decoder import random_model
from test_no_sync import NoHostSync

pytestmark = pytest.mark.usefixtures("one_thread")
PROMPTS = ["hi", "hello world"]


def tokenizer_with(extra: tuple[int, ...]) -> CharTokenizer:
    tok = CharTokenizer()
    tok.eos_ids = (tok.eos_id, *extra)
    return tok


def stop_token(token_ids: list[int], tok) -> int:
    """A token of the answer that is not EOS and first occurs past position 2: the stop to add."""
    for i, t in enumerate(token_ids[3:], 3):
        if t != tok.eos_id and t not in token_ids[:i]:
            return t
    pytest.skip("the answer has no suitable token")


@pytest.fixture(scope="module")
def model():
    return random_model(3, vocab_size=CharTokenizer().vocab_size, eos_bias=-4.0, adapter_dim=0)


@pytest.mark.parametrize("layout", ["prompt_block", "absolute_grid", "full_sequence"])
def test_a_second_eos_id_stops_the_row(model, layout):
    tok = CharTokenizer()
    cfg = DecodeConfig(block_len=4, max_new_tokens=16, threshold=0.5, layout=layout, eos_fill=False)
    base = Engine(model, tok).generate(PROMPTS, cfg)
    assert not any(g.finished for g in base)  # EOS is biased away: only the new stop can end a row
    stop = stop_token(base[0].token_ids, tok)
    got = Engine(model, tokenizer_with((stop,))).generate(PROMPTS, cfg)
    cut = base[0].token_ids.index(stop) + 1
    assert got[0].token_ids == base[0].token_ids[:cut] and got[0].finished
    for b, g in zip(base[1:], got[1:]):  # the other row: cut at its own first stop, if any
        want = b.token_ids[: b.token_ids.index(stop) + 1] if stop in b.token_ids else b.token_ids
        assert g.token_ids == want and g.finished == (stop in b.token_ids)


def test_eos_fill_honours_every_eos_id(model):
    """With eos_fill, what follows a committed end-of-turn token in its block resolves at once."""
    tok = CharTokenizer()
    cfg = DecodeConfig(block_len=8, max_new_tokens=16, threshold=0.5)
    base = Engine(model, tok).generate(PROMPTS[:1], cfg)[0]
    stop = stop_token(base.token_ids, tok)
    got = Engine(model, tokenizer_with((stop,))).generate(PROMPTS[:1], cfg)[0]
    assert got.finished and got.token_ids[-1] == stop and stop not in got.token_ids[:-1]


def test_is_eos_and_special_ids():
    ids = special_ids(tokenizer_with((7, 9)), 100)
    assert ids.eos_ids == (1, 7, 9)
    t = torch.tensor([[1, 7, 8, 9, 2]])
    assert is_eos(t, ids).tolist() == [[True, True, False, True, False]]
    assert special_ids(CharTokenizer(), 100).eos_ids == (1,)


def test_several_eos_ids_step_has_no_host_sync(model):
    engine = Engine(model, tokenizer_with((40, 41)))
    cfg = DecodeConfig(block_len=8, max_new_tokens=16, threshold=0.5, chunk_steps=3)
    st, P = engine.setup([engine.encode(p) for p in PROMPTS], cfg)
    engine.begin_block(st, cfg, P, 0, [True, True])
    before = copy.deepcopy(st.canvas)
    with torch.no_grad(), NoHostSync():
        run_chunk(engine.model, st, cfg, engine.ids)
    assert not torch.equal(before, st.canvas)


def test_ar_decoder_stops_on_every_eos_id(model):
    tok = CharTokenizer()
    cfg = ARConfig(max_new_tokens=12)
    base = ARDecoder(model, tok).generate(PROMPTS[:1], cfg)[0]
    stop = stop_token(base.token_ids, tok)
    got = ARDecoder(model, tokenizer_with((stop,))).generate(PROMPTS[:1], cfg)[0]
    assert got.token_ids == base.token_ids[: base.token_ids.index(stop) + 1] and got.finished
