"""Loading with a cast and with mixed stored dtypes (issue 18, orl.checkpoint).

- `load_checkpoint(dtype=...)` casts each tensor as it is read: a file-dtype tensor is dropped before the
  next one is read, so the whole file-dtype state never exists next to the cast model (peak RSS:
  benchmarks/load_rss.py, docs/BENCHMARKS.md).
- A checkpoint whose tensors are not all one dtype (LLaDA2's fp32 `expert_bias` in a bf16 file) loads:
  buffers keep the dtype they were stored in, parameters take the model dtype; a parameter stored in a
  dtype of its own is still refused by name."""
import json
import weakref

import pytest
import torch
from safetensors.torch import load_file, save_file

import orl.checkpoint
from family_fixtures import write_llada2_moe
from family_reference import llada2_forward
from orl.checkpoint import CheckpointError, load_checkpoint, save_checkpoint
from orl.tokenizer import CharTokenizer
from reference_decoder import random_model

pytestmark = pytest.mark.usefixtures("one_thread")
TOK = CharTokenizer()


def test_cast_happens_tensor_by_tensor(tmp_path, monkeypatch):
    model = random_model(1, vocab_size=TOK.vocab_size).to(torch.bfloat16)
    d = save_checkpoint(model, TOK, tmp_path / "m", {"block_len": 4}, max_shard_bytes=20_000)
    assert len(list(d.glob("*.safetensors"))) > 1  # sharded: the cast crosses files too
    read: list[weakref.ref] = []
    alive_at_read: list[int] = []
    real_open = orl.checkpoint.safe_open

    class Recording:
        def __init__(self, *a, **kw):
            self.f = real_open(*a, **kw)

        def __enter__(self):
            self.f.__enter__()
            return self

        def __exit__(self, *exc):
            return self.f.__exit__(*exc)

        def keys(self):
            return self.f.keys()

        def get_tensor(self, k):
            alive_at_read.append(sum(r() is not None for r in read))  # earlier bf16 tensors still held
            t = self.f.get_tensor(k)
            read.append(weakref.ref(t))
            return t

    monkeypatch.setattr(orl.checkpoint, "safe_open", Recording)
    loaded, _, _ = load_checkpoint(d, dtype=torch.float32)
    assert len(read) > 10 and max(alive_at_read) == 0  # before: every bf16 tensor alive until model.to
    assert {p.dtype for p in loaded.parameters()} == {torch.float32}
    with torch.no_grad():  # the values are the stored ones, widened
        for (n, p), q in zip(loaded.named_parameters(), model.parameters()):
            assert torch.equal(p, q.float()), n


def bf16_llada2(tmp_path):
    """The LLaDA2 fixture stored as the published checkpoints are: bf16, with the router's expert_bias
    kept in fp32."""
    d, (cfg, _) = write_llada2_moe(tmp_path / "llada2")
    tensors = load_file(d / "model.safetensors")
    stored = {k: v if k.endswith("expert_bias") else v.to(torch.bfloat16) for k, v in tensors.items()}
    save_file(stored, str(d / "model.safetensors"), metadata={"format": "pt"})
    (d / "config.json").write_text(json.dumps({**cfg, "torch_dtype": "bfloat16"}))
    return d, cfg, stored


def test_llada2_with_fp32_expert_bias_in_a_bf16_file_loads(tmp_path):
    d, cfg, stored = bf16_llada2(tmp_path)
    model, _, _ = load_checkpoint(d)  # before: "dtype mismatch ...expert_bias: checkpoint float32, config says bfloat16"
    gate = model.model.layers[1].mlp.gate
    assert gate.expert_bias.dtype == torch.float32
    assert torch.equal(gate.expert_bias, stored["model.layers.1.mlp.gate.expert_bias"])
    assert {p.dtype for p in model.parameters()} == {torch.bfloat16}
    # --dtype float32: parameters widened, the buffer as stored; logits = the published equations on the
    # stored values (the reference reads the bf16 weights widened to fp32, the bias in fp32)
    wide, _, _ = load_checkpoint(d, dtype=torch.float32)
    assert {p.dtype for p in wide.parameters()} == {torch.float32}
    assert wide.model.layers[1].mlp.gate.expert_bias.dtype == torch.float32
    tokens = torch.randint(0, 256, (7,), generator=torch.Generator().manual_seed(1))
    mask = torch.ones(7, 7, dtype=torch.bool)
    want = llada2_forward(cfg, {k: v.float() for k, v in stored.items()}, tokens, mask)
    with torch.no_grad():
        got = wide(tokens[None], torch.arange(7)[None], mask[None])[0]
    assert (got - want).abs().max().item() <= 1e-4
    # an orl copy of it keeps the buffer's dtype and loads again
    copy = save_checkpoint(model, load_checkpoint(d)[1], tmp_path / "copy", {"block_len": 32})
    assert json.loads((copy / "orl.json").read_text())["dtype"] == "bfloat16"
    again, _, _ = load_checkpoint(copy)
    assert again.model.layers[1].mlp.gate.expert_bias.dtype == torch.float32


def test_a_parameter_in_its_own_dtype_is_still_refused(tmp_path):
    d, cfg, stored = bf16_llada2(tmp_path)
    name = "model.layers.0.attention.dense.weight"
    save_file({**stored, name: stored[name].to(torch.float16)}, str(d / "model.safetensors"), metadata={"format": "pt"})
    with pytest.raises(CheckpointError, match=r"dtype mismatch model\.layers\.0\.self_attn\.o_proj\.weight: "
                                              r"checkpoint torch\.float16"):
        load_checkpoint(d)


def test_a_parameter_in_its_own_dtype_is_refused_also_when_it_is_the_cast_dtype(tmp_path):
    # the cast leaves tensors not in the file dtype as they are: a float16 parameter in a bf16 file
    # matched a float16 cast and loaded silently, though the file contradicts its config
    d, cfg, stored = bf16_llada2(tmp_path)
    name = "model.layers.0.attention.dense.weight"
    save_file({**stored, name: stored[name].to(torch.float16)}, str(d / "model.safetensors"), metadata={"format": "pt"})
    with pytest.raises(CheckpointError, match=r"dtype mismatch model\.layers\.0\.self_attn\.o_proj\.weight: "
                                              r"checkpoint torch\.float16, config says torch\.bfloat16"):
        load_checkpoint(d, dtype=torch.float16)
