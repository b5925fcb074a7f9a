"""DiffusionGemma (issue 19 item 5) loads into the one model: the encoder pass (causal, writes the
cache) and the decoder pass (bidirectional over cache + canvas, self-conditioned, reads the cache)
give transformers' hidden states and logits within 1e-4 in fp32, over a prompt longer than the
sliding window and a second canvas encoded after the first; bad configs get one named error."""
from __future__ import annotations

import json

import pytest
import torch

from diffusion_gemma_fixture import CANVAS, VOCAB, write_diffusion_gemma
from orl.checkpoint import CheckpointError, load_checkpoint
from orl.model.families import diffusion_gemma
from orl.model.families.common import UnsupportedConfig

pytestmark = pytest.mark.usefixtures("one_thread")
transformers = pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    d = tmp_path_factory.mktemp("diffusion_gemma")
    hf = write_diffusion_gemma(d)
    model, tok, manifest = load_checkpoint(d)
    return d, hf, model, manifest


@pytest.fixture(scope="module")
def deep(tmp_path_factory):
    """12 layers in transformers' default pattern (5 local : 1 global, last forced global): its
    per_layer_config keys are zero-padded strings."""
    d = tmp_path_factory.mktemp("diffusion_gemma_deep")
    hf = write_diffusion_gemma(d, num_hidden_layers=12, layer_types=None)
    model, tok, manifest = load_checkpoint(d)
    return d, hf, model, manifest


def _cache_mask(q_slots: torch.Tensor, S: int, causal: bool, end: int) -> torch.Tensor:
    """[1, T, S]: causal (encoder) sees slots <= its own; the canvas (decoder) sees every slot < end."""
    k = torch.arange(S)
    return ((k[None, :] <= q_slots[:, None]) if causal else (k[None, :] < end).expand(len(q_slots), S))[None]


def _encode(model, cache, ids, start):
    T = ids.shape[1]
    slots = torch.arange(start, start + T)
    return model(ids, slots[None], _cache_mask(slots, cache.max_len, True, 0), cache=cache, slots=slots,
                 return_hidden=True)


def _decode(model, cache, canvas, start, self_cond=None):
    slots = torch.arange(start, start + canvas.shape[1])
    return model(canvas, slots[None], _cache_mask(slots, cache.max_len, False, start + canvas.shape[1]),
                 cache=cache, slots=slots, decoder=True, self_cond=self_cond)


def test_reads_the_config(written):
    _, _, model, manifest = written
    a = model.args
    assert (a.head_dim, a.n_kv_heads, a.global_head_dim, a.global_n_kv_heads) == (8, 2, 16, 1)
    assert a.global_rope_proportion == 0.25 and a.global_k_eq_v and a.final_logit_softcap == 30.0
    assert model.model.layers[2].self_attn.v_proj is None and model.model.layers[0].self_attn.v_proj is not None
    assert manifest["objective"] == "diffusion_gemma" and manifest["block_len"] == CANVAS
    assert manifest["mask_id"] is None and manifest["eos_ids"] == [257]


@pytest.mark.parametrize("which", ["written", "deep"])
@torch.no_grad()
def test_encoder_and_decoder_match_transformers(which, request):
    from transformers import DynamicCache

    _, hf, model, _ = request.getfixturevalue(which)
    g = torch.Generator().manual_seed(1)
    prompt = torch.randint(0, VOCAB, (1, 9), generator=g)   # longer than the window (6)
    canvas1 = torch.randint(0, VOCAB, (1, CANVAS), generator=g)
    canvas2 = torch.randint(0, VOCAB, (1, CANVAS), generator=g)
    prev = 3 * torch.randn(1, CANVAS, VOCAB, generator=g)    # the previous step's logits

    cache_hf = DynamicCache(config=hf.config.text_config)
    enc_hf = hf.model.encoder(input_ids=prompt, cache=cache_hf).last_hidden_state
    dec0_hf = hf(cache=cache_hf, decoder_input_ids=canvas1).logits
    dec1_hf = hf(cache=cache_hf, decoder_input_ids=canvas1, self_conditioning_logits=prev).logits
    enc2_hf = hf.model.encoder(input_ids=canvas1, cache=cache_hf).last_hidden_state  # the finished canvas
    dec2_hf = hf(cache=cache_hf, decoder_input_ids=canvas2, self_conditioning_logits=prev).logits

    cache = model.new_cache(1, 32)
    enc = _encode(model, cache, prompt, 0)
    dec0 = _decode(model, cache, canvas1, 9)
    dec1 = _decode(model, cache, canvas1, 9, prev)
    enc2 = _encode(model, cache, canvas1, 9)     # overwrites the canvas slots the decoder wrote
    dec2 = _decode(model, cache, canvas2, 13, prev)

    for ours, ref in ((enc, enc_hf), (enc2, enc2_hf), (dec0, dec0_hf), (dec1, dec1_hf), (dec2, dec2_hf)):
        torch.testing.assert_close(ours, ref, atol=1e-4, rtol=1e-4)
    assert (dec1 - dec0).abs().max() > 1e-2  # self-conditioning acts
    # the encoder's states read out through the tied, softcapped head
    torch.testing.assert_close(model.read_out(enc), 30 * torch.tanh(hf.lm_head(enc_hf) / 30), atol=1e-4, rtol=1e-4)


def test_cache_holds_per_layer_shapes(written):
    _, _, model, _ = written
    cache = model.new_cache(2, 10)
    assert [tuple(t.shape) for t in cache.buffers_kv()] == [(2, 2, 2, 10, 8)] * 2 + [(1, 2, 1, 10, 16)] * 2
    assert cache.layer_kv(2)[0].shape == (2, 1, 10, 16) and cache.layer_kv(1)[0].shape == (2, 2, 10, 8)


def _config(written) -> dict:
    return json.loads((written[0] / "config.json").read_text())


def test_unsupported_options_named_together(written):
    cfg = _config(written)
    t = cfg["text_config"]
    t.update(attention_bias=True, use_bidirectional_attention="all", hidden_activation="silu")
    t["rope_parameters"]["sliding_attention"]["rope_type"] = "linear"
    with pytest.raises(UnsupportedConfig) as e:
        diffusion_gemma.args_from_config(cfg)
    for name in ("attention_bias", "use_bidirectional_attention", "hidden_activation", "sliding_attention RoPE"):
        assert name in str(e.value)


def test_untied_encoder_that_differs_is_refused(written, tmp_path):
    from safetensors.torch import load_file, save_file

    d = written[0]
    tensors = load_file(d / "model.safetensors")
    tensors["model.encoder.language_model.layers.1.layer_scalar"] = torch.tensor([9.0])
    for f in ("config.json", "tokenizer.json", "tokenizer_config.json"):
        (tmp_path / f).write_text((d / f).read_text())
    save_file(tensors, tmp_path / "model.safetensors")
    with pytest.raises((CheckpointError, UnsupportedConfig), match="layers.1.layer_scalar differs"):
        load_checkpoint(tmp_path)


def test_published_defaults_read_without_weights():
    """transformers' DiffusionGemmaConfig defaults (the 26B-A4B shapes: 30 layers, 5 local : 1 global,
    global head_dim 512, proportional RoPE over a quarter) as its to_dict() writes them."""
    from transformers import DiffusionGemmaConfig

    text = dict(num_experts=128, top_k_experts=8, moe_intermediate_size=704, num_global_key_value_heads=2)
    cfg = DiffusionGemmaConfig(text_config=text, vision_config={"model_type": "gemma4_vision"}).to_dict()
    a = diffusion_gemma.args_from_config(cfg)
    assert (a.n_layers, a.head_dim, a.global_head_dim, a.global_n_kv_heads, a.n_kv_heads) == (30, 256, 512, 2, 4)
    assert [a.is_sliding(i) for i in range(6)] == [True] * 5 + [False] and not a.is_sliding(29)
    assert (a.rope_theta, a.rope_local_theta, a.global_rope_proportion, a.sliding_window) == (1e6, 1e4, 0.25, 512)
    assert diffusion_gemma.manifest_from_config(cfg)["block_len"] == 256


def test_proportional_rope_by_hand():
    """head 16, proportion 0.25: int(0.25 * 16 / 2) = 2 turning pairs with inv_freq theta^(-0/16),
    theta^(-2/16); the other 6 pairs have frequency 0 (cos 1, sin 0)."""
    from orl.model.model import rope_cos_sin

    cos, sin = rope_cos_sin(torch.tensor([[3]]), 16, 10_000.0, torch.float32, proportion=0.25)
    angles = torch.tensor([3.0, 3.0 * 10_000.0 ** (-2 / 16)] + [0.0] * 6)
    torch.testing.assert_close(cos[0, 0, 0], torch.cat([angles, angles]).cos())
    torch.testing.assert_close(sin[0, 0, 0], torch.cat([angles, angles]).sin())


def test_deep_config_layer_pattern(deep):
    d, _, model, _ = deep
    cfg = json.loads((d / "config.json").read_text())["text_config"]
    assert sorted(cfg["per_layer_config"]) == ["05", "11"]  # the zero-padded keys the reader must parse
    assert [i for i in range(12) if not model.args.is_sliding(i)] == [5, 11]
    assert model.model.layers[5].self_attn.head_dim == 16 and model.model.layers[4].self_attn.head_dim == 8
