"""A tiny converted checkpoint shaped like gemma-3-270m's (issue 22 item 4): a byte-level HF tokenizer
with Gemma's special ids (<pad> 0, <eos> 1, <bos> 2 prepended to every prompt, <mask> 4), a model
vocabulary wider than the tokenizer (banned rows), Gemma 3 blocks with a sliding window of 6 (so a
wrong RoPE position changes which keys a local layer sees), then the convert recipe's smoke preset
through the CLI: shifted read-out, absolute-grid layout in orl.json, and a second EOS id there."""
from __future__ import annotations

import json
from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers

from orl.checkpoint import save_checkpoint
from orl.model.args import ModelArgs
from orl.model.model import Transformer
from orl.tokenizer import load_tokenizer

SPECIALS = ["<pad>", "<eos>", "<bos>", "<unk>", "<mask>"]  # Gemma's ids 0-4
VOCAB = 512  # 261 tokenizer ids, then padded rows the model may never output (test_convert's V)
EXTRA_EOS = 106  # the id of gemma-3's <end_of_turn>; here a byte token


def write_tokenizer(d: Path) -> None:
    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    vocab = {t: i for i, t in enumerate(SPECIALS + alphabet)}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens(SPECIALS)
    d.mkdir(parents=True, exist_ok=True)
    tok.save(str(d / "tokenizer.json"))
    (d / "tokenizer_config.json").write_text(json.dumps({
        "bos_token": "<bos>", "eos_token": "<eos>", "pad_token": "<pad>", "unk_token": "<unk>",
        "mask_token": "<mask>", "add_bos_token": True}))


def gemma_like_args() -> ModelArgs:
    return ModelArgs(vocab_size=VOCAB, dim=32, n_layers=2, n_heads=2, n_kv_heads=1, head_dim=16, ffn_dim=64,
                     max_seq_len=256, qk_norm=True, tie_embeddings=True, norm_unit_offset=True, sandwich_norm=True,
                     scale_embeddings=True, hidden_act="gelu_tanh", query_pre_attn_scalar=16.0,
                     layer_types=["sliding_attention", "full_attention"], sliding_window=6, rope_local_theta=10_000.0)


def write_sources(root: Path, n: int = 40) -> None:
    root.mkdir(parents=True, exist_ok=True)
    for i in range(n):
        body = "".join(f"def f{i}_{j}(x):\n    return x * {i + j} + {j}\n\n" for j in range(6))
        (root / f"m{i}.py").write_text(f"# module {i}\n{body}")


def converted_checkpoint(root: Path) -> Path:
    """root/base (the AR model), root/conv (its conversion by `orl train --recipe convert --preset
    smoke`); returns root/conv."""
    from orl.cli import main

    write_tokenizer(root / "tok")
    torch.manual_seed(0)
    save_checkpoint(Transformer(gemma_like_args()), load_tokenizer(root / "tok"), root / "base",
                    {"objective": "autoregressive"})
    write_sources(root / "src")
    argv = ["train", "--recipe", "convert", "--preset", "smoke", "--base", str(root / "base"), "--out",
            str(root / "conv"), "--set", f"data_dir={root / 'corpus'}", "--set", f"corpus.roots={root / 'src'}"]
    assert main(argv) == 0
    # a second EOS id recorded in orl.json, as a chat model's end-of-turn token is (orl.json is not among
    # the checksummed files): the engine stops at either, and ORL's output must keep it
    manifest = json.loads((root / "conv" / "orl.json").read_text())
    (root / "conv" / "orl.json").write_text(json.dumps({**manifest, "eos_ids": [1, EXTRA_EOS]}))
    return root / "conv"
