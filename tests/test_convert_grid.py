"""The convert recipe's absolute-grid rows (ConvertConfig.layout) are the engine's absolute_grid decoding:
the training forward's logits at a noisy block equal the engine's logits for the same state (the same
prefix and the same canvas), also when the canvas opens with a prompt tail. The prompt_block rows give
other logits for the same state, so the check can fail. And an AR model converted without training
decodes a long prompt at block 1 exactly as the AR decoder on the grid, where prompt_block drifts."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch

from orl.engine import DecodeConfig, Engine
from orl.engine.decode import block_forward
from orl.model.args import ModelArgs
from orl.model.model import Transformer
from orl.model.vocab import special_ids
from orl.tokenizer import CharTokenizer
from orl.train.batches import diffusion_batch
from orl.train.convert import to_diffusion

pytestmark = pytest.mark.usefixtures("one_thread")

TOK = CharTokenizer()
B, C, A = 4, 8, 12  # block, context, answer tokens: grid blocks 0-1 are context, 2-4 answer


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    m = Transformer(ModelArgs(vocab_size=TOK.vocab_size, dim=32, n_layers=2, n_heads=2, n_kv_heads=1, head_dim=16,
                              ffn_dim=64, max_seq_len=128, tie_embeddings=False))
    with torch.no_grad():  # O(1) weights: attention patterns that differ show up in the logits
        for name, p in m.named_parameters():
            if p.dim() > 1:
                p.normal_(std=1.0 if "embed" in name else p.shape[1] ** -0.5)
    return to_diffusion(m).eval()


def training_logits(model, row: torch.Tensor, j: int, masked: torch.Tensor, grid: bool) -> torch.Tensor:
    """Logits [B, V] of answer block j's noisy state with exactly `masked` [B] masked, from one training
    forward over the whole staircase row (one noisy copy per block, as the convert recipe builds)."""
    ids = special_ids(TOK, model.args.vocab_size)
    b = diffusion_batch([(row[:C].tolist(), row[C:].tolist())], B, ids, torch.Generator().manual_seed(0), 1,
                        eos=False, grid=grid)
    lo = C + A + j * B  # noisy copies follow the clean sequence, one block each
    b.tokens[0, lo:lo + B] = torch.where(masked, ids.mask, row[C + j * B:C + (j + 1) * B])
    with torch.no_grad():
        logits = model(b.tokens, b.pos, b.mask, read_from=b.read_from)
    return logits[0, lo:lo + B]


def engine_logits(model, row: torch.Tensor, j: int, masked: torch.Tensor, tail: int) -> torch.Tensor:
    """The engine's logits [B, V] (absolute grid) for the same state: the text before answer block j,
    plus its first `tail` tokens, as the prompt (those open the canvas as fixed tokens), the canvas
    holding the block's tokens with `masked` masked."""
    eng = Engine(model, TOK, max_len=64)
    cfg = DecodeConfig(block_len=B, max_new_tokens=B - tail, layout="absolute_grid").validate()
    start = C + j * B
    with torch.no_grad():
        st, P = eng.setup([row[:start + tail].tolist()], cfg)
        eng.begin_block(st, cfg, P, 0, [True])
        assert P == start and bool(st.fixed[0, :tail].all()) and not bool(st.fixed[0, tail:].any())
        st.canvas.copy_(torch.where(masked, TOK.mask_id, row[start:start + B])[None])
        st.unresolved.copy_(masked[None])
        logits = block_forward(model, st, cfg, eng.ids)[0]
    return logits.masked_fill(st.banned, 0.0)


@pytest.mark.parametrize("j,tail,masked", [(0, 0, [1, 1, 1, 1]), (0, 0, [0, 1, 0, 1]), (2, 0, [1, 0, 1, 1]),
                                           (1, 2, [0, 0, 1, 1]), (2, 1, [0, 1, 0, 1])])
def test_grid_rows_equal_the_engines_absolute_grid_logits(model, j, tail, masked):
    row = torch.randint(3, TOK.vocab_size, (C + A,), generator=torch.Generator().manual_seed(j + 10 * tail))
    masked = torch.tensor(masked, dtype=torch.bool)
    ref = engine_logits(model, row, j, masked, tail)
    banned = special_ids(TOK, model.args.vocab_size).banned
    got = training_logits(model, row, j, masked, grid=True)
    got[:, list(banned)] = 0.0
    assert torch.allclose(got, ref, atol=1e-4, rtol=1e-4), (got - ref).abs().max()
    old = training_logits(model, row, j, masked, grid=False)  # the context as one bidirectional block
    old[:, list(banned)] = 0.0
    assert (old - ref).abs().max() > 1e-2


def test_grid_rows_need_whole_blocks_of_prompt():
    ids = special_ids(TOK, TOK.vocab_size)
    with pytest.raises(ValueError, match="whole blocks"):
        diffusion_batch([([5] * 6, [6] * 8)], B, ids, torch.Generator(), eos=False, grid=True)


def test_untrained_conversion_is_the_ar_decoder_on_the_grid_at_block_1(tmp_path):
    """On the grid at block 1 every block is one token: a causal prompt, so the shifted read-out of the AR
    weights is the AR model on any prompt; under prompt_block a 10-token prompt is bidirectional."""
    from orl.checkpoint import save_checkpoint

    spec = importlib.util.spec_from_file_location("convert_eval", Path(__file__).parents[1] / "benchmarks" / "convert_eval.py")
    ce = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ce)
    torch.manual_seed(0)
    m = Transformer(ModelArgs(vocab_size=TOK.vocab_size, dim=64, n_layers=2, n_heads=4, n_kv_heads=2, head_dim=16,
                              ffn_dim=128, max_seq_len=256, tie_embeddings=False))
    with torch.no_grad():  # large logits, so greedy picks vary and no special id is ever the argmax
        for name, p in m.named_parameters():
            if p.dim() > 1:
                p.normal_(std=1.0 if "embed" in name or "lm_head" in name else 3 * p.shape[1] ** -0.5)
        m.lm_head.weight[:3] = 0
    save_checkpoint(m.eval(), TOK, tmp_path / "ar", {"objective": "autoregressive"})
    save_checkpoint(to_diffusion(m).eval(), TOK, tmp_path / "dlm",
                    {"objective": "block_diffusion", "block_len": 1, "layout": "absolute_grid"})
    stream = torch.randint(3, TOK.vocab_size, (400,), generator=torch.Generator().manual_seed(1), dtype=torch.int32)
    res = ce.evaluate(str(tmp_path / "ar"), str(tmp_path / "dlm"), stream, windows=6, context=10, block=1,
                      threshold=0.9, free_tokens=8, free_prompts=3)  # layout from the manifest
    assert res["layout"] == "absolute_grid"
    assert res["next_block"]["dlm_block_agrees_with_ar"] == 1.0 and res["free_running"]["position_agreement"] == 1.0
    old = ce.evaluate(str(tmp_path / "ar"), str(tmp_path / "dlm"), stream, windows=6, context=10, block=1,
                      threshold=0.9, free_tokens=8, free_prompts=3, layout="prompt_block")
    assert old["free_running"]["position_agreement"] < 1.0
