"""A bf16 model under the engine, on the CPU here and on CUDA where there is one: tokens in range, banned ids never
emitted, the state's buffers (KV cache, residual) in the model's dtype, finite traces; on CUDA also a captured graph
of 4 unrolled steps giving the eager loop's tokens. (It lived in test_gpu.py, skipped on every CI machine, and went
stale there when Engine.state gained its cache length: the CPU case keeps it honest.)"""
import dataclasses

import pytest
import torch

from test_gpu import PROMPTS, TOK, V, cfg_of, first_mismatch

from orl.engine import Engine
from reference_decoder import random_model

DEVICES = ["cpu", pytest.param("cuda", marks=[pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(),
                                                                                 reason="needs a CUDA device")])]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("residual", ["off", "rcd", "adapter"])
def test_bf16_model_runs(residual, device):
    torch.manual_seed(0)
    m = random_model(vocab_size=V).to(device=device, dtype=torch.bfloat16)
    cfg = cfg_of("threshold", residual)
    eng = Engine(m, TOK)
    eager = eng.generate(PROMPTS, cfg)
    for g in eager:
        assert 0 < g.n_tokens <= cfg.max_new_tokens
        assert all(0 <= t < V for t in g.token_ids)
        assert not {TOK.mask_id, TOK.pad_id} & set(g.token_ids)  # banned ids never come out
        assert g.finished or g.n_tokens == cfg.max_new_tokens
    st = eng.state(len(PROMPTS), cfg.block_len, 64)  # any cache bucket: its buffers' dtypes are checked
    assert st.cache.k.dtype == torch.bfloat16 and st.z.dtype == torch.bfloat16
    traced = eng.generate(PROMPTS, cfg, trace=True)
    assert all(torch.isfinite(r.entropy).all() and torch.isfinite(r.confidence).all()
               for g in traced for r in g.trace)
    if device == "cuda":
        graphed = Engine(m, TOK).generate(PROMPTS, dataclasses.replace(cfg, cuda_graph=True, chunk_steps=4))
        assert not first_mismatch(eager, graphed), first_mismatch(eager, graphed)
