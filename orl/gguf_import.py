"""GGUF (llama.cpp) -> HF-layout orl checkpoint, through the `gguf` package (DESIGN section 8).

Every tensor is dequantized to fp32 (gguf.quants, the routine transformers' GGUF loader uses too),
renamed onto orl.model, cast to the target dtype and written by orl.checkpoint.save_checkpoint; the
tokenizer is rebuilt from the metadata (orl.gguf_tokenizer). Everything is checked before anything
is written: an unsupported architecture, unknown quantization types (all named at once), missing or
extra tensors, and a truncated file each give one GGUFError.

llama.cpp's converter stores Gemma's RMSNorm weights with the +1 folded in (it writes 1 + w, the
scale itself); orl.model, like transformers, stores the zero-centred w, so 1 is subtracted again from
every *norm.weight, in fp32, as transformers' Gemma2TensorProcessor does.
"""
from __future__ import annotations

import hashlib
import os
import re
import tempfile
from pathlib import Path

import numpy as np
import torch

from orl.model import ModelArgs, Transformer

ARCHITECTURES = ("gemma3",)
PLAIN_TYPES = ("F32", "F16", "BF16")
# llama.cpp's classic and k-quant types, which gguf.quants dequantizes
QUANT_TYPES = ("Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K")
LAYER_NAMES = {
    "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj", "attn_q_norm": "self_attn.q_norm", "attn_k_norm": "self_attn.k_norm",
    "attn_norm": "input_layernorm", "post_attention_norm": "post_attention_layernorm",
    "ffn_norm": "pre_feedforward_layernorm", "post_ffw_norm": "post_feedforward_layernorm",
    "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj", "ffn_down": "mlp.down_proj",
}
GLOBAL_NAMES = {"token_embd": "model.embed_tokens", "output_norm": "model.norm"}
_BLOCK = re.compile(r"^blk\.(\d+)\.(\w+)\.weight$")


class GGUFError(ValueError):
    pass


def _reader(path: Path):
    try:
        import gguf
    except ImportError as e:
        raise GGUFError("reading GGUF files needs the `gguf` package: pip install -e '.[gemma]'") from e
    if not path.is_file():
        raise GGUFError(f"{path}: no such file")
    try:
        reader = gguf.GGUFReader(path)
    except Exception as e:  # gguf raises ValueError/struct errors/enum errors on damaged headers
        raise GGUFError(f"{path}: not a readable GGUF file (truncated or corrupt): {e}") from e
    size = path.stat().st_size
    end = max((t.data_offset + t.n_bytes for t in reader.tensors), default=0)
    if end > size:
        raise GGUFError(f"{path}: truncated: its tensors need {end} bytes, the file has {size}")
    return reader


def _value(reader, key: str, default=None):
    field = reader.fields.get(key)
    return default if field is None else field.contents()


def gemma3_args(reader, vocab: int) -> ModelArgs:
    a = "gemma3."

    def need(key):
        v = _value(reader, a + key)
        if v is None:
            raise GGUFError(f"metadata key {a + key} is missing")
        return v

    n_layers, dim, n_heads = need("block_count"), need("embedding_length"), need("attention.head_count")
    for key, v in (("block_count", n_layers), ("embedding_length", dim), ("attention.head_count", n_heads)):
        if type(v) is not int or v <= 0:
            raise GGUFError(f"metadata key {a + key} must be a positive integer, got {v!r}")
    # against the file before a list of n_layers layer types is built: a forged count must not allocate
    blocks = {int(m.group(1)) for t in reader.tensors if (m := _BLOCK.match(t.name))}
    if type(n_layers) is not int or len(blocks) != n_layers or blocks != set(range(n_layers)):
        raise GGUFError(f"block_count is {n_layers!r} but the file holds {len(blocks)} block(s) of tensors")
    head_dim = _value(reader, a + "attention.key_length", dim // n_heads)
    if _value(reader, a + "attention.value_length", head_dim) != head_dim:
        raise GGUFError("attention.value_length differs from key_length: not a Gemma 3 layout")
    # llama.cpp's gemma3 graph: every 6th layer global, the others sliding with RoPE base 10000;
    # attention scale 1/sqrt(head_dim), except the 62-layer 27B model, which uses 1/sqrt(dim / n_heads)
    pattern = 6
    scalar = dim // n_heads if n_layers == 62 else head_dim
    factor = 1.0
    if (kind := _value(reader, a + "rope.scaling.type")) not in (None, "none"):
        if kind != "linear":
            raise GGUFError(f"rope.scaling.type {kind!r} is not supported (only linear)")
        factor = float(need("rope.scaling.factor"))
    return ModelArgs(
        vocab_size=vocab, dim=dim, n_layers=n_layers, n_heads=n_heads,
        n_kv_heads=_value(reader, a + "attention.head_count_kv", n_heads), head_dim=head_dim,
        ffn_dim=need("feed_forward_length"), norm_eps=float(need("attention.layer_norm_rms_epsilon")),
        rope_theta=float(_value(reader, a + "rope.freq_base", 1e6)), qk_norm=True, tie_embeddings=True,
        max_seq_len=need("context_length"), norm_unit_offset=True, sandwich_norm=True, scale_embeddings=True,
        hidden_act="gelu_tanh", query_pre_attn_scalar=float(scalar), final_logit_softcap=None,
        rope_scaling_factor=factor, sliding_window=need("attention.sliding_window"), rope_local_theta=10000.0,
        layer_types=["sliding_attention" if (i + 1) % pattern else "full_attention" for i in range(n_layers)])


def _our_name(name: str) -> str | None:
    if m := _BLOCK.match(name):
        sub = LAYER_NAMES.get(m.group(2))
        return f"model.layers.{m.group(1)}.{sub}.weight" if sub else None
    base = name.removesuffix(".weight")
    return f"{GLOBAL_NAMES[base]}.weight" if base in GLOBAL_NAMES and name.endswith(".weight") else None


def dequantized_tensors(reader) -> dict[str, torch.Tensor]:
    """All tensors as fp32 under orl names; every unknown type or name is reported in one error."""
    from gguf import GGMLQuantizationType, dequantize

    known = {GGMLQuantizationType[n] for n in PLAIN_TYPES + QUANT_TYPES}
    bad_types = sorted({f"{t.tensor_type.name} ({t.name})" for t in reader.tensors if t.tensor_type not in known})
    bad_names = [t.name for t in reader.tensors if _our_name(t.name) is None]
    problems = []
    if bad_types:
        problems.append(f"unsupported quantization type(s): {', '.join(bad_types)}; "
                        f"supported: {', '.join(PLAIN_TYPES + QUANT_TYPES)}")
    if bad_names:
        problems.append(f"tensor(s) with no place in a Gemma 3 text model: {', '.join(bad_names)}")
    if problems:
        raise GGUFError("; ".join(problems))
    out = {}
    for t in reader.tensors:
        shape = tuple(int(n) for n in reversed(t.shape.tolist()))  # GGUF lists dims innermost first
        w = np.asarray(dequantize(t.data, t.tensor_type), dtype=np.float32).reshape(shape)
        if t.name.endswith("norm.weight"):
            w = w - np.float32(1.0)
        out[_our_name(t.name)] = torch.from_numpy(np.array(w, copy=not w.flags.writeable, order="C"))
    return out


def tokenizer_meta(reader) -> dict:
    meta = {}
    for key, field in reader.fields.items():
        if key.startswith("tokenizer.ggml."):
            meta[key.removeprefix("tokenizer.ggml.")] = field.contents()
    if "tokens" not in meta:
        raise GGUFError("the file has no tokenizer (tokenizer.ggml.tokens)")
    return meta


def load_gguf(path: str | os.PathLike, dtype: torch.dtype = torch.float32):
    """-> (Transformer in eval mode, tokenizer, source metadata), nothing written to disk but a temp dir."""
    from orl.gguf_tokenizer import GGUFTokenizerError, write_tokenizer
    from orl.tokenizer import HFTokenizer

    path = Path(path)
    reader = _reader(path)
    arch = _value(reader, "general.architecture")
    if arch not in ARCHITECTURES:
        raise GGUFError(f"{path}: architecture {arch!r} is not supported; supported: {', '.join(ARCHITECTURES)}")
    try:
        meta = tokenizer_meta(reader)
        args = gemma3_args(reader, len(meta["tokens"]))
        tensors = dequantized_tensors(reader)
    except (GGUFError, ValueError) as e:  # ValueError: ModelArgs refusing a metadata value
        raise GGUFError(f"{path}: {e}") from None
    if bad := [n for n, t in tensors.items() if not torch.isfinite(t).all()]:  # an import must load back
        raise GGUFError(f"{path}: non-finite values (NaN or inf) in {', '.join(bad[:5])}"
                        f"{f' and {len(bad) - 5} more' if len(bad) > 5 else ''}")
    with torch.device("meta"):
        model = Transformer(args)
    expected = {k for k in model.state_dict() if k != "lm_head.weight"}
    problems = [f"missing tensor {n}" for n in sorted(expected - tensors.keys())]
    problems += [f"shape mismatch {n}: file {list(t.shape)}, model expects {list(model.state_dict()[n].shape)}"
                 for n, t in tensors.items() if n in expected and t.shape != model.state_dict()[n].shape]
    if problems:
        raise GGUFError(f"{path}: the tensors do not match the metadata:\n  " + "\n  ".join(problems))
    model.load_state_dict({**tensors, "lm_head.weight": tensors["model.embed_tokens.weight"]}, strict=True, assign=True)
    model.lm_head.weight = model.model.embed_tokens.weight
    with tempfile.TemporaryDirectory() as tmp:
        try:
            write_tokenizer(meta, tmp)
        except GGUFTokenizerError as e:
            raise GGUFError(f"{path}: {e}") from None
        tokenizer = HFTokenizer(tmp)
    source = {"file": path.name, "sha256": _sha256(path), "architecture": arch, "name": _value(reader, "general.name"),
              "file_type": _value(reader, "general.file_type")}
    return model.to(dtype).eval(), tokenizer, source


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        while block := f.read(1 << 20):
            h.update(block)
    return h.hexdigest()


def import_gguf(path: str | os.PathLike, out: str | os.PathLike, dtype: torch.dtype = torch.bfloat16) -> Path:
    """Write the GGUF as an HF-layout orl checkpoint in `out` (atomically; nothing on any error)."""
    from orl.checkpoint import save_checkpoint

    model, tokenizer, source = load_gguf(path, dtype)
    return save_checkpoint(model, tokenizer, out, manifest={"objective": "autoregressive", "recipe": {"gguf": source}})
