"""A tiny Gemma 3 GGUF written with gguf's GGUFWriter the way llama.cpp's converter lays one out
(norm weights stored as 1 + w, quantized matrices, a sentencepiece-style vocabulary without merges)."""
from __future__ import annotations

from pathlib import Path

import numpy as np

# head_dim 256: transformers reads no query_pre_attn_scalar from a GGUF (default 256), llama.cpp uses
# head_dim; they agree only when head_dim is 256, as in the 270M model
DIM, HEADS, KV, HEAD_DIM, FFN, LAYERS, WINDOW, CTX = 64, 2, 1, 256, 128, 6, 4, 128
SPECIALS = ["<pad>", "<eos>", "<bos>", "<unk>", "<mask>", "<start_of_turn>", "<end_of_turn>"]
WORDS = ["the", "fib", "def", "return", "print", "if", "in", "on", "at", "er", "ing"]


def vocabulary() -> tuple[list[str], list[int]]:
    """(tokens, llama.cpp token types): CONTROL 3, USER_DEFINED 4, BYTE 6, NORMAL 1; merges derivable."""
    tokens, types = list(SPECIALS), [3] * len(SPECIALS)
    tokens += ["\n", "\n\n", "  "]
    types += [4, 4, 1]
    tokens += [f"<0x{b:02X}>" for b in range(256)]
    types += [6] * 256
    pieces = ["\u2581"] + [chr(c) for c in range(ord("a"), ord("z") + 1)] + list("(): =+-0123456789,.")
    for w in WORDS:  # every prefix of "▁word" and "word", so BPE can merge its way up to the word
        for s in ("\u2581" + w, w):
            pieces += [s[:i] for i in range(2, len(s) + 1)]
    for p in dict.fromkeys(pieces):
        if p not in tokens:
            tokens.append(p)
            types.append(1)
    while len(tokens) % 32:  # a round vocabulary, like real files
        tokens.append(f"<unused{len(tokens)}>")
        types.append(3)
    return tokens, types


def write_tiny_gguf(path: Path, arch: str = "gemma3", seed: int = 0, extra_tensor=None) -> Path:
    import gguf
    from gguf import GGMLQuantizationType as Q

    rng = np.random.default_rng(seed)
    tokens, types = vocabulary()
    V = len(tokens)
    w = gguf.GGUFWriter(str(path), arch)
    w.add_name("tiny gemma 3")
    w.add_context_length(CTX)
    w.add_embedding_length(DIM)
    w.add_block_count(LAYERS)
    w.add_feed_forward_length(FFN)
    w.add_head_count(HEADS)
    w.add_head_count_kv(KV)
    w.add_key_length(HEAD_DIM)
    w.add_value_length(HEAD_DIM)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_rope_freq_base(1e6)
    w.add_sliding_window(WINDOW)
    w.add_tokenizer_model("llama")
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    w.add_token_scores([0.0] * V)
    w.add_token_types(types)
    w.add_bos_token_id(2)
    w.add_eos_token_id(1)
    w.add_unk_token_id(3)
    w.add_pad_token_id(0)
    w.add_add_bos_token(True)

    def mat(name, rows, cols, qtype):
        x = (0.3 * rng.standard_normal((rows, cols))).astype(np.float32)
        if qtype == Q.F32:
            w.add_tensor(name, x)
        elif qtype == Q.F16:
            w.add_tensor(name, x.astype(np.float16))
        else:
            w.add_tensor(name, gguf.quants.quantize(x, qtype), raw_dtype=qtype)

    def norm(name, n):  # llama.cpp stores Gemma's scale 1 + w
        w.add_tensor(name, (1.0 + 0.3 * rng.standard_normal(n)).astype(np.float32))

    mat("token_embd.weight", V, DIM, Q.Q8_0)
    norm("output_norm.weight", DIM)
    for i in range(LAYERS):
        b = f"blk.{i}."
        mat(b + "attn_q.weight", HEADS * HEAD_DIM, DIM, Q.Q5_0)
        mat(b + "attn_k.weight", KV * HEAD_DIM, DIM, Q.Q4_0)
        mat(b + "attn_v.weight", KV * HEAD_DIM, DIM, Q.Q8_0)
        mat(b + "attn_output.weight", DIM, HEADS * HEAD_DIM, Q.F16)
        mat(b + "ffn_gate.weight", FFN, DIM, Q.Q5_1)
        mat(b + "ffn_up.weight", FFN, DIM, Q.Q4_1)
        mat(b + "ffn_down.weight", DIM, FFN, Q.F32)
        for n, size in (("attn_norm", DIM), ("post_attention_norm", DIM), ("ffn_norm", DIM),
                        ("post_ffw_norm", DIM), ("attn_q_norm", HEAD_DIM), ("attn_k_norm", HEAD_DIM)):
            norm(b + n + ".weight", size)
    if extra_tensor is not None:
        name, data, qtype = extra_tensor
        w.add_tensor(name, data, raw_dtype=qtype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path
