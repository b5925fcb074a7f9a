"""Published dLLM families (issue 18): a tiny random checkpoint in each family's own layout
(tests/family_fixtures.py) loads through orl.checkpoint, gives the reference's logits, carries the
family's decode defaults, and `orl generate` runs on it. References: transformers' Qwen2 (Dream, Fast-dLLM
v2), Qwen3 (SDAR), Qwen3-MoE (SDAR-MoE); the published equations (tests/family_reference.py) for
LLaDA and LLaDA2-MoE, under causal, bidirectional and block-causal masks."""
import pytest
import torch

from family_fixtures import WRITERS, special_id
from family_reference import llada2_forward, llada_forward
from orl.checkpoint import load_checkpoint
from orl.cli import main
from orl.model import masks

pytestmark = pytest.mark.usefixtures("one_thread")
transformers = pytest.importorskip("transformers")
T = 10
TOKENS = torch.randint(0, 256, (2, T), generator=torch.Generator().manual_seed(3))


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    """family -> (directory, reference), each written once for the module."""
    root = tmp_path_factory.mktemp("families")
    return {name: write(root / name) for name, write in WRITERS.items()}


def mask_kinds():
    blocks = torch.arange(T) // 4
    return {"causal": masks.causal(T), "bidirectional": masks.bidirectional(T),
            "block_causal": blocks[None, :] <= blocks[:, None]}


def ours(model, mask):
    pos = torch.arange(T).expand(2, T)
    with torch.no_grad():
        return model(TOKENS, pos, mask.expand(2, T, T))


def hf_logits(hf, mask):
    """transformers' logits under a custom 4D mask (0 where allowed, -inf elsewhere)."""
    bias = torch.zeros(T, T).masked_fill(~mask, float("-inf"))[None, None].expand(2, 1, T, T)
    with torch.no_grad():
        return hf(input_ids=TOKENS, position_ids=torch.arange(T).expand(2, T), attention_mask=bias).logits.float()


@pytest.mark.parametrize("family", ["dream", "fast_dllm_v2", "sdar", "sdar_moe"])
def test_qwen_bodies_match_transformers(written, family):
    d, hf = written[family]
    model, _, manifest = load_checkpoint(d)
    assert manifest["source"] == "config.json" and manifest["objective"] == "block_diffusion"
    assert model.num_params() == hf.num_parameters()
    for name, mask in mask_kinds().items():
        want = hf_logits(hf, mask)
        assert want.abs().max() > 1.0
        got = ours(model, mask)
        assert (got - want).abs().max().item() <= 1e-4, name


@pytest.mark.parametrize("family", ["dream", "fast_dllm_v2"])
def test_shifted_read_out_is_the_previous_position(written, family):
    d, hf = written[family]
    model, _, _ = load_checkpoint(d)
    assert model.args.shift_logits and model.args.qkv_bias and not model.args.qk_norm
    mask = masks.bidirectional(T)
    pos = torch.arange(T).expand(2, T)
    with torch.no_grad():
        h = model(TOKENS, pos, mask.expand(2, T, T), return_hidden=True)
        got = model.read_out(h, read_from=(torch.arange(T) - 1).clamp(min=0))
    want = hf_logits(hf, mask)
    torch.testing.assert_close(got[:, 1:], want[:, :-1], atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("family,forward", [("llada", llada_forward), ("llada2_moe", llada2_forward)])
def test_llada_families_match_published_equations(written, family, forward):
    d, (cfg, tensors) = written[family]
    model, _, _ = load_checkpoint(d)
    for name, mask in mask_kinds().items():
        got = ours(model, mask)
        for b in range(2):
            want = forward(cfg, tensors, TOKENS[b], mask)
            assert want.abs().max() > 1.0
            assert (got[b] - want).abs().max().item() <= 1e-4, (name, b)


def test_llada2_reads_its_moe_options(written):
    model, _, _ = load_checkpoint(written["llada2_moe"][0])
    a = model.args
    assert (a.router, a.router_bias, a.n_group, a.topk_group, a.routed_scaling) == ("sigmoid", True, 4, 2, 2.5)
    assert (a.first_dense_layers, a.shared_expert_ffn_dim, a.rotary_dim, a.qk_norm) == (1, 16, 8, True)
    assert [a.is_moe_layer(i) for i in range(2)] == [False, True]


DEFAULTS = {  # family -> (layout, block_len, shift, mask token, EOS tokens beyond the tokenizer's)
    "llada": ("full_sequence", 32, False, "<|mdm_mask|>", ["<|endoftext|>", "<|eot_id|>"]),
    "dream": ("full_sequence", None, True, "<|mask|>", ["<|endoftext|>"]),
    "sdar": ("absolute_grid", 4, False, "<|MASK|>", ["<|im_end|>", "<|endoftext|>"]),
    "sdar_moe": ("absolute_grid", 4, False, "<|MASK|>", ["<|im_end|>", "<|endoftext|>"]),
    "fast_dllm_v2": ("absolute_grid", 32, True, "|<MASK>|", ["<|im_end|>", "<|endoftext|>"]),
    "llada2_moe": ("absolute_grid", 32, False, "<|mask|>", ["<|endoftext|>"]),
}


@pytest.mark.parametrize("family", sorted(DEFAULTS))
def test_decode_defaults_and_special_ids(written, family):
    layout, block, shift, mask, eos = DEFAULTS[family]
    model, tok, manifest = load_checkpoint(written[family][0])
    assert (manifest["layout"], manifest["block_len"], model.args.shift_logits) == (layout, block, shift)
    spec = family.replace("sdar_moe", "sdar")
    assert tok.mask_id == manifest["mask_id"] == special_id(spec, mask)
    assert list(tok.eos_ids) == [special_id(spec, t) for t in eos]
    if family == "fast_dllm_v2":
        assert manifest["sub_block_len"] == 8


@pytest.mark.parametrize("family", sorted(WRITERS))
def test_orl_generate_runs(written, family, capsys):
    rc = main(["generate", "--model", str(written[family][0]), "def f(x):", "--max-new-tokens", "6"])
    out = capsys.readouterr()
    assert rc == 0, out.err
    assert "tokens:" in out.out and "autoregressive" not in out.err
