"""A config.json key a checkpoint leaves out means what the family's published config class defaults it to,
not what orl would have liked: LLaDA's ModelConfig (weight_tying true, layer_norm_type "default" =
LayerNorm, activation "swiglu", block "sequential", rope false) and LLaDA2MoeConfig (rms_norm_eps 1e-5,
partial_rotary_factor 0.5, n_group 8, topk_group 4, routed_scaling_factor 2.5, use_qk_norm true,
use_bias true). Either orl computes the published default or it names the key; it never runs a
different model silently."""
import json

import pytest
import torch
from safetensors.torch import load_file, save_file

from family_fixtures import write_llada, write_llada2_moe
from family_reference import llada2_forward, llada_forward
from orl.checkpoint import CheckpointError, load_checkpoint
from orl.model import masks

pytestmark = pytest.mark.usefixtures("one_thread")
T = 10
TOKENS = torch.randint(0, 256, (2, T), generator=torch.Generator().manual_seed(3))


def drop_keys(d, *keys):
    cfg = json.loads((d / "config.json").read_text())
    for k in keys:
        del cfg[k]
    (d / "config.json").write_text(json.dumps(cfg))


def logits(model):
    mask = masks.bidirectional(T)
    with torch.no_grad():
        return model(TOKENS, torch.arange(T).expand(2, T), mask.expand(2, T, T)), mask


def assert_matches(model, forward, ref_cfg, tensors):
    got, mask = logits(model)
    for b in range(2):
        want = forward(ref_cfg, tensors, TOKENS[b], mask)
        assert want.abs().max() > 1.0
        assert (got[b] - want).abs().max().item() <= 1e-4, b


# ---------------------------------------------------------------- LLaDA2 (LLaDA2MoeConfig defaults)

LLADA2_DEFAULTS = {"rms_norm_eps": 1e-5, "partial_rotary_factor": 0.5, "n_group": 8, "topk_group": 4,
                   "routed_scaling_factor": 2.5}


def test_llada2_absent_keys_take_the_published_defaults(tmp_path):
    # 16 experts: the default 8 groups need two experts each (a group scores by its best two)
    d, (cfg, tensors) = write_llada2_moe(tmp_path / "m", num_experts=16, rms_norm_eps=1e-6,
                                         partial_rotary_factor=1.0, n_group=1, topk_group=1,
                                         routed_scaling_factor=1.0)
    drop_keys(d, *LLADA2_DEFAULTS, "rotary_dim")
    model, _, _ = load_checkpoint(d)
    a = model.args
    assert (a.norm_eps, a.rotary_dim, a.n_group, a.topk_group, a.routed_scaling) == (1e-5, 8, 8, 4, 2.5)
    assert_matches(model, llada2_forward, {**cfg, **LLADA2_DEFAULTS}, tensors)


def test_llada2_absent_use_qk_norm_means_qk_norm(tmp_path):
    d, (cfg, tensors) = write_llada2_moe(tmp_path / "m")  # the file holds query/key_layernorm weights
    drop_keys(d, "use_qk_norm")
    model, _, _ = load_checkpoint(d)
    assert model.args.qk_norm
    assert_matches(model, llada2_forward, cfg, tensors)


def test_llada2_absent_use_bias_is_named(tmp_path):
    d, _ = write_llada2_moe(tmp_path / "m")
    drop_keys(d, "use_bias")  # published default: biases on dense and the MLPs, which orl does not have
    with pytest.raises(CheckpointError, match="use_bias"):
        load_checkpoint(d)


# ---------------------------------------------------------------- LLaDA (ModelConfig defaults)

def test_llada_absent_weight_tying_ties_the_head(tmp_path):
    d, (cfg, tensors) = write_llada(tmp_path / "m")
    drop_keys(d, "weight_tying")
    # the published model ties: it has no ff_out head, so a file written by it has none either
    stored = load_file(str(d / "model.safetensors"))
    del stored["model.transformer.ff_out.weight"]
    save_file(stored, str(d / "model.safetensors"), metadata={"format": "pt"})
    model, _, _ = load_checkpoint(d)
    assert model.args.tie_embeddings
    tied = {**tensors, "model.transformer.ff_out.weight": tensors["model.transformer.wte.weight"]}
    assert_matches(model, llada_forward, cfg, tied)


def test_llada_absent_weight_tying_with_a_stored_head_is_refused(tmp_path):
    """The published model ties when the key is absent and never reads a stored ff_out: orl must not
    silently use that head instead."""
    d, _ = write_llada(tmp_path / "m")
    drop_keys(d, "weight_tying")
    with pytest.raises(CheckpointError, match="lm_head.weight"):
        load_checkpoint(d)


@pytest.mark.parametrize("key,needle", [("layer_norm_type", "layer_norm_type"), ("activation_type", "activation_type"),
                                        ("block_type", "block_type"), ("rope", "rope")])
def test_llada_absent_keys_with_other_published_defaults_are_named(tmp_path, key, needle):
    d, _ = write_llada(tmp_path / "m")
    drop_keys(d, key)
    with pytest.raises(CheckpointError, match="unsupported LLaDA") as e:
        load_checkpoint(d)
    assert needle in str(e.value)
