"""orl export (issue 23 item 3): every orl model becomes a Hugging Face repo that transformers loads
with equal logits (plain Qwen3 where it fits, orl's own code as modeling_orl.py otherwise) and a
tokenizer AutoTokenizer loads with equal ids; orl loads the export back unchanged."""
import json
from pathlib import Path

import pytest
import torch

transformers = pytest.importorskip("transformers")

from orl import cli  # noqa: E402
from orl.checkpoint import load_checkpoint, save_checkpoint  # noqa: E402
from orl.export import ExportError, export_hf  # noqa: E402
from orl.model import ModelArgs, Transformer, masks  # noqa: E402
from orl.tokenizer import CharTokenizer  # noqa: E402

TOK = CharTokenizer()
ROOT = Path(__file__).resolve().parents[1]
TEXT = "cumsum:3141=3,4,8,9\n?+?=42 sort:a1,b2= ~!{}"


def dllm(**kw) -> Transformer:
    torch.manual_seed(0)
    args = dict(vocab_size=128, dim=32, n_layers=2, n_heads=2, n_kv_heads=1, head_dim=16, ffn_dim=48, max_seq_len=64,
                learned_pos=True, shift_logits=True, adapter_dim=8)
    m = Transformer(ModelArgs(**{**args, **kw})).eval()
    with torch.no_grad():
        for p in m.parameters():
            p.normal_(0, 0.2)  # the adapter's zero-initialised projection must carry signal too
    return m


def hf_load(d: Path, **kw):
    return transformers.AutoModelForCausalLM.from_pretrained(d, **kw).eval()


def test_a_dllm_exports_with_its_own_code_and_equal_logits(tmp_path):
    ours = dllm()
    out = export_hf(ours, TOK, tmp_path / "hf", {"block_len": 4, "residual_mode": "adapter"})
    assert (out / "modeling_orl.py").exists()
    with pytest.raises(ValueError):  # without trust_remote_code transformers must not guess a class
        hf_load(out)
    theirs = hf_load(out, trust_remote_code=True)
    ids = torch.tensor([TOK.encode("cumsum:314=3,4")])
    T = ids.shape[1]
    pos = torch.arange(T)[None]
    with torch.no_grad():
        causal = ours(ids, pos, masks.causal(T)[None])
        assert torch.equal(theirs(ids).logits, causal)
        block = masks.block_causal(7, T - 7, 4)[None]
        want = ours(ids, pos, block, read_from=(torch.arange(T) - 1).clamp(min=0))
        assert torch.equal(theirs(ids, orl_mask=block).logits, want)
    back, _, manifest = load_checkpoint(out)
    assert back.args == ours.args and manifest["block_len"] == 4 and manifest["residual_mode"] == "adapter"


def test_a_remote_code_export_generates_what_causal_argmax_gives(tmp_path):
    """transformers' generate on modeling_orl.py (it has no KV cache: each step reruns the sequence) == a greedy loop
    over orl's causal logits."""
    ours = dllm(adapter_dim=0)
    theirs = hf_load(export_hf(ours, TOK, tmp_path / "hf"), trust_remote_code=True)
    ids = torch.tensor([TOK.encode("cumsum:314=")])
    want = ids
    with torch.no_grad():
        for _ in range(6):
            T = want.shape[1]
            nxt = ours(want, torch.arange(T)[None], masks.causal(T)[None])[:, -1].argmax(-1)
            want = torch.cat([want, nxt[:, None]], 1)
        got = theirs.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=6, do_sample=False,
                              eos_token_id=None)
    assert torch.equal(got, want)


def test_a_left_padded_batch_generates_what_each_prompt_does_alone(tmp_path):
    """Batched generate on a learned-position export: a left-padded row gets its own positions, not the padded ones."""
    theirs = hf_load(export_hf(dllm(adapter_dim=0), TOK, tmp_path / "hf"), trust_remote_code=True)
    prompts = [TOK.encode("cumsum:314="), TOK.encode("?+?=42")]
    width = max(map(len, prompts))
    ids = torch.tensor([[TOK.pad_id] * (width - len(p)) + p for p in prompts])
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
    with torch.no_grad():
        batch = theirs.generate(ids, attention_mask=mask, max_new_tokens=5, do_sample=False, eos_token_id=None,
                                pad_token_id=TOK.pad_id)
        for row, p in zip(batch, prompts):
            alone = theirs.generate(torch.tensor([p]), attention_mask=torch.ones(1, len(p), dtype=torch.long),
                                    max_new_tokens=5, do_sample=False, eos_token_id=None)
            assert row[width:].tolist() == alone[0, len(p):].tolist()


def test_plain_qwen3_export_loads_without_remote_code(tmp_path):
    ours = dllm(learned_pos=False, shift_logits=False, adapter_dim=0)
    out = export_hf(ours, TOK, tmp_path / "hf")
    assert not (out / "modeling_orl.py").exists()
    theirs = hf_load(out)
    assert type(theirs).__name__ == "Qwen3ForCausalLM"
    ids = torch.tensor([TOK.encode("?+?=42")])
    with torch.no_grad():
        assert torch.allclose(theirs(ids).logits, ours(ids, torch.arange(6)[None], masks.causal(6)[None]), atol=1e-5)


def test_auto_tokenizer_gives_orl_ids(tmp_path):
    out = export_hf(dllm(), TOK, tmp_path / "hf")
    hf_tok = transformers.AutoTokenizer.from_pretrained(out)
    ids = hf_tok(TEXT, add_special_tokens=False).input_ids
    assert ids == TOK.encode(TEXT)
    assert hf_tok.decode(ids) == TEXT
    assert (hf_tok.eos_token_id, hf_tok.pad_token_id, hf_tok.mask_token_id) == (TOK.eos_id, TOK.pad_id, TOK.mask_id)


def test_plain_is_refused_for_a_dllm_and_the_cli_exports_the_shipped_orl_model(tmp_path, capsys):
    with pytest.raises(ExportError, match="learned_pos"):
        export_hf(dllm(), TOK, tmp_path / "x", remote_code=False)
    assert cli.main(["export", "--model", str(ROOT / "checkpoints" / "orl-tiny-orl"), "--out", str(tmp_path / "o")]) == 0
    assert "trust_remote_code=True" in capsys.readouterr().out
    cfg = json.loads((tmp_path / "o" / "config.json").read_text())
    assert cfg["auto_map"]["AutoModelForCausalLM"] == "modeling_orl.OrlForCausalLM" and cfg["block_len"] == 16
    hf_load(tmp_path / "o", trust_remote_code=True)


def test_generate_decodes_a_plain_causal_checkpoint_autoregressively(tmp_path, capsys):
    """issue 23 item 5: a transformers directory without orl.json is a causal LM, said and decoded as one."""
    out = export_hf(dllm(learned_pos=False, shift_logits=False, adapter_dim=0), TOK, tmp_path / "hf")
    (out / "orl.json").unlink()
    assert cli.main(["generate", "--model", str(out), "ab", "--max-new-tokens", "4"]) == 0
    captured = capsys.readouterr()
    assert "not a diffusion model" in captured.err and "[autoregressive]" in captured.out


def test_generate_runs_the_shipped_ar_peer(capsys):
    assert cli.main(["generate", "--model", str(ROOT / "checkpoints" / "orl-tiny-ar"), "cumsum:123=",
                     "--max-new-tokens", "8"]) == 0
    assert "[autoregressive]" in capsys.readouterr().out


def test_a_quantized_model_is_refused(tmp_path):
    from orl.quant import quantize

    with pytest.raises(ExportError, match="quantized"):
        export_hf(quantize(dllm(), "int8"), TOK, tmp_path / "q")
    assert not (tmp_path / "q").exists()


@pytest.mark.parametrize("gemma", [False, True])
def test_scalable_softmax_has_no_plain_transformers_equivalent(gemma):
    # transformers would drop logn_scale and load different logits: both families must say so
    from orl.export import not_exportable
    from orl.model import ModelArgs
    kw = dict(norm_unit_offset=True, sandwich_norm=True, scale_embeddings=True, hidden_act="gelu_tanh") if gemma else {}
    assert not_exportable(ModelArgs(**kw)) is None
    assert "attn_logn=True" in not_exportable(ModelArgs(attn_logn=True, **kw))


def test_the_export_keeps_every_decode_setting(tmp_path):
    """Before: only block_len, residual_mode, objective and recipe travelled; an absolute_grid model's export
    decoded with the default layout (other answers) and lost its end-of-turn EOS."""
    from orl.checkpoint import read_manifest

    src = save_checkpoint(Transformer(ModelArgs(vocab_size=99, dim=32, n_layers=1, n_heads=2, n_kv_heads=1,
                                                head_dim=16, ffn_dim=64, max_seq_len=64)), CharTokenizer(),
                          tmp_path / "src", {"block_len": 4, "layout": "absolute_grid", "objective": "block_diffusion",
                                             "eos_ids": [1, 5], "sub_block_len": 2})
    model, tok, manifest = load_checkpoint(src)
    out = export_hf(model, tok, tmp_path / "out", manifest)
    back = read_manifest(out)
    for key in ("block_len", "layout", "objective", "eos_ids", "sub_block_len"):
        assert back[key] == manifest[key], key
    assert json.loads((out / "generation_config.json").read_text())["eos_token_id"] == [1, 5]
