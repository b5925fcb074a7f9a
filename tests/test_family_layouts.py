"""The absolute-grid layout (SDAR, TraDo, LLaDA2, Fast-dLLM v2; orl.engine.layouts): block = position // L
from position 0, the prompt block-causal, the first canvas completing the prompt's partial block. The
engine (KV cache, static [B, L] canvas, rows padded by whole blocks, fused or separate commit forwards)
must give exactly the tokens of a reference that recomputes the whole window every step, as the
published generate() functions do (LLaDA2MoeModelLM.generate, SDAR's block_diffusion_generate)."""
import pytest
import torch

from orl.engine import DecodeConfig, Engine
from orl.engine.layouts import plan
from orl.model import masks
from orl.tokenizer import CharTokenizer
from reference_decoder import random_model

pytestmark = pytest.mark.usefixtures("one_thread")
TOK = CharTokenizer()
L, MAX_NEW, TAU = 4, 9, 0.3


def grid_reference(model, prompt: list[int], banned: list[int]) -> list[int]:
    """Greedy threshold decoding on the absolute grid, no cache: each step runs the model over every
    position up to the end of the current block (and of the answer) under the block-causal mask."""
    n, end = len(prompt), len(prompt) + MAX_NEW
    seq = list(prompt) + [TOK.mask_id] * MAX_NEW
    for k in range(n // L, -(-end // L)):
        lo, hi = k * L, min((k + 1) * L, end)
        while any(seq[i] == TOK.mask_id for i in range(max(lo, n), hi)):
            block = torch.arange(hi) // L
            mask = (block[None, :] <= block[:, None])[None]
            pos = torch.arange(hi)[None]
            with torch.no_grad():
                h = model(torch.tensor([seq[:hi]]), pos, mask, return_hidden=True)
                logits = model.read_out(h, read_from=(torch.arange(hi) - 1).clamp(min=0))[0, lo:hi]
            logits[:, banned] = float("-inf")
            conf, x = logits.log_softmax(-1).exp().max(-1)
            todo = [i for i in range(lo, hi) if i >= n and seq[i] == TOK.mask_id]
            commit = [i for i in todo if conf[i - lo] >= TAU] or [max(todo, key=lambda i: (conf[i - lo], -i))]
            for i in commit:
                seq[i] = int(x[i - lo])
            first_eos = next((i for i in range(max(lo, n), hi) if seq[i] == TOK.eos_id), None)
            if first_eos is not None:  # eos_fill: what follows a committed EOS in its block is EOS
                for i in range(first_eos + 1, hi):
                    if seq[i] == TOK.mask_id:
                        seq[i] = TOK.eos_id
        answer = seq[n:hi]
        if TOK.eos_id in answer:
            return answer[: answer.index(TOK.eos_id) + 1]
    return seq[n:end]


PROMPTS = ["hi", "abcd", "hello world", "x = 1 + 2", "12345678"]  # lengths 2, 4, 11, 9, 8: tails 2, 0, 3, 1, 0


@pytest.fixture(scope="module", params=[False, True], ids=["plain", "shifted"])
def engine(request):
    model = random_model(3, vocab_size=TOK.vocab_size, eos_bias=-2.0, learned_pos=False, adapter_dim=0,
                         shift_logits=request.param)
    return Engine(model, TOK)


@pytest.mark.parametrize("fused", [True, False])
def test_grid_engine_equals_full_recompute(engine, fused):
    banned = list(engine.ids.banned)
    cfg = DecodeConfig(block_len=L, max_new_tokens=MAX_NEW, threshold=TAU, layout="absolute_grid", fused_commit=fused)
    want = [grid_reference(engine.model, TOK.encode(p), banned) for p in PROMPTS]
    batched = engine.generate(PROMPTS, cfg)  # different tails in one batch: whole-block padding
    alone = [engine.generate([p], cfg)[0] for p in PROMPTS[:2]]
    assert [g.token_ids for g in batched] == want
    assert [g.token_ids for g in alone] == want[:2]
    assert any(len(w) > L for w in want)  # several blocks were decoded


def test_grid_differs_from_the_prompt_block_layout(engine):
    """The layouts are different models of the context (a prompt block vs. block-causal prompt blocks),
    so on a prompt longer than a block they decode differently: the switch is not a no-op."""
    grid = DecodeConfig(block_len=L, max_new_tokens=MAX_NEW, threshold=TAU, layout="absolute_grid")
    prompt_block = DecodeConfig(block_len=L, max_new_tokens=MAX_NEW, threshold=TAU)
    a = [g.token_ids for g in engine.generate(PROMPTS, grid)]
    b = [g.token_ids for g in engine.generate(PROMPTS, prompt_block)]
    assert a != b


def test_grid_plan():
    p = plan([TOK.encode(s) for s in PROMPTS], "absolute_grid", L, MAX_NEW)
    assert [len(t) for t in p.tails] == [2, 0, 3, 1, 0]
    assert p.P == 8 and p.pads() == [8, 4, 0, 0, 0]  # whole blocks of padding
    assert p.n_blocks == 3  # a 3-token tail + 9 answer tokens
    assert p.block_span(0, L, MAX_NEW) == [(2, 4), (0, 4), (3, 4), (1, 4), (0, 4)]
    assert plan([[5, 6]], "prompt_block", L, MAX_NEW).n_blocks == 3


def test_layout_comes_from_the_manifest():
    assert DecodeConfig.from_manifest({"layout": "absolute_grid", "block_len": 32}).layout == "absolute_grid"
    with pytest.raises(ValueError, match="layout"):
        DecodeConfig(layout="diagonal").validate()
