"""partial_rotary_factor in a Qwen3 config.json: transformers' Qwen3 (and so SDAR / TraDo, Qwen3 bodies) has no
partial RoPE. transformers 5 accepts the key and rotates whole heads anyway (Qwen3RotaryEmbedding's default
inverse frequencies span head_dim); orl rotated only the first fraction. Both directions must agree with
transformers: a Qwen3 directory with the key is refused by name on load, and an orl model with partial RoPE is
not exported as a plain Qwen3 directory that transformers would read as a different model."""
import pytest
import torch

from orl.checkpoint import CheckpointError, load_checkpoint
from orl.model import ModelArgs, Transformer, masks
from orl.tokenizer import CharTokenizer

transformers = pytest.importorskip("transformers")
pytestmark = pytest.mark.usefixtures("one_thread")

V = CharTokenizer().vocab_size


def test_transformers_qwen3_rotates_whole_heads_so_the_key_is_refused(tmp_path):
    cfg = transformers.Qwen3Config(vocab_size=V, hidden_size=32, intermediate_size=48, num_hidden_layers=1,
                                   num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                                   partial_rotary_factor=0.5)
    hf = transformers.Qwen3ForCausalLM(cfg).eval()
    assert hf.model.rotary_emb.inv_freq.numel() == 16 // 2  # the reference: every dim of the head turns
    hf.save_pretrained(tmp_path)
    CharTokenizer().save(tmp_path)
    with pytest.raises(CheckpointError, match="partial_rotary_factor"):
        load_checkpoint(tmp_path)


def test_partial_rotary_model_exports_with_its_own_code_and_equal_logits(tmp_path):
    from orl.export import export_hf, not_exportable

    torch.manual_seed(0)
    ours = Transformer(ModelArgs(vocab_size=V, dim=32, n_layers=2, n_heads=2, n_kv_heads=1, head_dim=16, ffn_dim=48,
                                 max_seq_len=64, rotary_fraction=0.5)).eval()
    with torch.no_grad():
        for p in ours.parameters():
            p.normal_(0, 0.3)
    assert "rotary_fraction=0.5" in (not_exportable(ours.args) or "")
    out = export_hf(ours, CharTokenizer(), tmp_path / "hf")
    theirs = transformers.AutoModelForCausalLM.from_pretrained(out, trust_remote_code=True).eval()
    ids = torch.tensor([CharTokenizer().encode("?+?=42 sort:a1")])
    T = ids.shape[1]
    with torch.no_grad():
        want = ours(ids, torch.arange(T)[None], masks.causal(T)[None])
        assert want.abs().max() > 1.0
        torch.testing.assert_close(theirs(ids).logits, want, atol=1e-5, rtol=0)
    back, _, _ = load_checkpoint(out)
    assert back.args == ours.args
