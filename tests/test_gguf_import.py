"""GGUF import (orl.gguf_import) against transformers' own GGUF loader on a tiny Gemma 3 file written
with gguf's GGUFWriter: same weights, logits, tokenizer and greedy generation; bad files get one
named error and nothing is written (DESIGN section 8)."""
import re

import numpy as np
import pytest
import torch

from orl.checkpoint import load_checkpoint
from orl.engine.ar import ARConfig, ARDecoder
from orl.model import masks
from gguf_tiny import WINDOW, write_tiny_gguf

gguf = pytest.importorskip("gguf")
transformers = pytest.importorskip("transformers")
from orl.gguf_import import GGUFError, import_gguf  # noqa: E402

TEXTS = ["def fib(n):\n    return n", "the  theater\n\nprinting", "<start_of_turn>user hi<end_of_turn>", "Zürich ☃ x"]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    d = tmp_path_factory.mktemp("gguf")
    path = write_tiny_gguf(d / "tiny.gguf")
    out = import_gguf(path, d / "orl", dtype=torch.float32)
    hf = transformers.AutoModelForCausalLM.from_pretrained(d, gguf_file="tiny.gguf", dtype=torch.float32).eval()
    hf_tok = transformers.AutoTokenizer.from_pretrained(d, gguf_file="tiny.gguf")
    return out, hf, hf_tok


def test_weights_logits_and_generation_match_transformers(tiny):
    out, hf, _ = tiny
    ours, tok, manifest = load_checkpoint(out)
    assert manifest["family"] == "gemma3_text" and manifest["objective"] == "autoregressive"
    assert manifest["recipe"]["gguf"]["architecture"] == "gemma3"
    hf_state = hf.state_dict()
    for name, t in ours.state_dict().items():  # the +1 of llama.cpp's norms is gone again, bit for bit
        assert torch.equal(t, hf_state[name]), name
    T = 3 * WINDOW
    ids = torch.randint(0, ours.args.vocab_size, (2, T), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        want = hf(input_ids=ids).logits
        got = ours(ids, torch.arange(T).expand(2, T), masks.causal(T).expand(2, T, T))
    assert want.abs().max() > 1.0 and (got - want).abs().max() <= 1e-4
    prompt = tok.encode("def fib(n):")
    gen = ARDecoder(ours, tok, max_len=64).generate_ids([prompt], ARConfig(max_new_tokens=16))[0]
    with torch.no_grad():
        ref = hf.generate(torch.tensor([prompt]), max_new_tokens=16, do_sample=False)[0, len(prompt):].tolist()
    if tok.eos_id in ref:
        ref = ref[: ref.index(tok.eos_id) + 1]
    assert gen.token_ids == ref


def test_tokenizer_matches_transformers(tiny):
    out, _, hf_tok = tiny
    _, tok, manifest = load_checkpoint(out)
    assert (tok.bos_id, tok.eos_id, tok.pad_id, tok.mask_id, manifest["mask_id"]) == (2, 1, 0, 4, 4)
    for text in TEXTS:
        ids = tok.encode(text)
        assert ids == hf_tok(text)["input_ids"], text
        assert ids[0] == 2  # BOS first, as the file's add_bos_token says
        assert tok.decode(ids) == hf_tok.decode(ids, skip_special_tokens=True)
    assert len(tok.encode("the")) == 2  # merges rebuilt from the vocabulary: "the" is one token after BOS


def test_bfloat16_is_the_default(tmp_path):
    out = import_gguf(write_tiny_gguf(tmp_path / "t.gguf"), tmp_path / "orl")
    model, _, manifest = load_checkpoint(out)
    assert manifest["dtype"] == "bfloat16" and model.lm_head.weight.dtype == torch.bfloat16


def _assert_refused(src, tmp_path, *needles):
    out = tmp_path / "out"
    with pytest.raises(GGUFError) as e:
        import_gguf(src, out)
    for n in needles:
        assert n in str(e.value)
    assert not out.exists() and not [p for p in tmp_path.iterdir() if p.name.startswith(".out")]


def test_truncated_file_is_refused(tmp_path):
    src = write_tiny_gguf(tmp_path / "t.gguf")
    data = src.read_bytes()
    src.write_bytes(data[: len(data) * 2 // 3])
    _assert_refused(src, tmp_path, "truncated")
    src.write_bytes(data[:100])  # cut inside the header
    _assert_refused(src, tmp_path, "t.gguf")


def test_unsupported_architecture_is_refused(tmp_path):
    _assert_refused(write_tiny_gguf(tmp_path / "l.gguf", arch="llama"), tmp_path, "'llama'", "gemma3")


def test_unknown_quantization_type_is_refused(tmp_path):
    from gguf import GGMLQuantizationType as Q

    block = np.zeros((4, 18), dtype=np.uint8)  # 4 rows of one IQ4_NL block (32 values) each
    src = write_tiny_gguf(tmp_path / "q.gguf", extra_tensor=("blk.0.attn_extra.weight", block, Q.IQ4_NL))
    _assert_refused(src, tmp_path, "IQ4_NL (blk.0.attn_extra.weight)", "Q4_K", "blk.0.attn_extra.weight")


def test_cli_import_then_generate_continues_like_transformers(tiny, tmp_path, capsys):
    from orl.cli import main

    _, hf, hf_tok = tiny
    src = write_tiny_gguf(tmp_path / "c.gguf")
    out = tmp_path / "ckpt"
    assert main(["import-gguf", str(src), "--out", str(out), "--dtype", "float32"]) == 0
    capsys.readouterr()
    prompt = "def fib(n):"
    assert main(["generate", "--model", str(out), prompt, "--max-new-tokens", "12"]) == 0
    printed = capsys.readouterr().out.splitlines()
    ids = hf_tok(prompt, return_tensors="pt")["input_ids"]
    with torch.no_grad():
        ref = hf.generate(ids, max_new_tokens=12, do_sample=False)[0]
    want = prompt + hf_tok.decode(ref[ids.shape[1]:], skip_special_tokens=True)
    assert "\n".join(printed[:-1]) == want and "[autoregressive]" in printed[-1]
    assert main(["import-gguf", str(tmp_path / "missing.gguf"), "--out", str(tmp_path / "x")]) == 2


def test_a_damaged_vocabulary_is_refused(tmp_path):
    """Before: a repeated token string silently moved ids (one decoded to '', the other took its text), and a short
    token_type list was cut by zip, so <end_of_turn> became plain text encoded as many pieces."""
    from orl.gguf_import import _reader, tokenizer_meta
    from orl.gguf_tokenizer import GGUFTokenizerError, build_gemma_tokenizer

    meta = tokenizer_meta(_reader(write_tiny_gguf(tmp_path / "t.gguf")))
    build_gemma_tokenizer(meta)  # the undamaged one builds
    tokens = list(meta["tokens"])
    with pytest.raises(GGUFTokenizerError, match=re.escape(f"repeats {tokens[20]!r} (ids 20 and 40)")):
        build_gemma_tokenizer({**meta, "tokens": tokens[:40] + [tokens[20]] + tokens[41:]})
    with pytest.raises(GGUFTokenizerError, match=f"token_type has {len(tokens) - 3} entries for {len(tokens)} tokens"):
        build_gemma_tokenizer({**meta, "token_type": list(meta["token_type"])[:-3]})


def test_non_finite_weights_are_refused_at_import(tmp_path, monkeypatch):
    """Before: the import wrote the checkpoint (exit 0), and load_checkpoint then refused it."""
    import orl.gguf_import as gi

    real = gi.dequantized_tensors

    def with_nan(reader):
        tensors = real(reader)
        tensors["model.layers.0.mlp.down_proj.weight"][0, 0] = float("nan")
        return tensors

    monkeypatch.setattr(gi, "dequantized_tensors", with_nan)
    path = write_tiny_gguf(tmp_path / "t.gguf")
    with pytest.raises(GGUFError, match=r"non-finite values \(NaN or inf\) in model.layers.0.mlp.down_proj.weight"):
        import_gguf(path, tmp_path / "out")
    assert not (tmp_path / "out").exists()
