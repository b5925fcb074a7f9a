"""A tokenizer.json rebuilt from a GGUF file's metadata (llama.cpp keeps no tokenizer.json).

Gemma's files hold a sentencepiece-style vocabulary (`tokenizer.ggml.model` = "llama") with token
types and no merges. The rebuild follows transformers' GGUF reader (integrations/gguf, gemma_tokenizer
+ GemmaTokenizer), so both sides cut text into the same ids:
  - tokens made of 2+ spaces are stored as spaces but looked up as "▁"s: respelled first;
  - merges are derived from the vocabulary, best first in file order (Gemma's scores do not follow
    its merge order);
  - BPE with byte fallback, " " -> "▁" normaliser, no prefix space;
  - CONTROL tokens (type 3) are special added tokens, USER_DEFINED ones (type 4, e.g. "\\n\\n") plain
    added tokens, so both are matched whole;
  - BOS is prepended when the file says add_bos_token (orl.tokenizer.HFTokenizer reads the flag).
"""
from __future__ import annotations

import json
from pathlib import Path

CONTROL, USER_DEFINED = 3, 4
SPECIAL_KEYS = {"bos_token": "bos_token_id", "eos_token": "eos_token_id", "unk_token": "unknown_token_id",
                "pad_token": "padding_token_id"}
MASK_TOKEN = "<mask>"


class GGUFTokenizerError(ValueError):
    pass


def generate_merges(vocab: dict[str, int], scores: dict[str, float]) -> list[tuple[str, str]]:
    """Every split of a token into two vocabulary pieces, ordered by the token's score (higher first),
    then by longer left and right pieces: transformers' generate_merges with vocab_scores."""
    merges = []
    for token, score in scores.items():
        local = [(token[:i], token[i:], score) for i in range(1, len(token))
                 if token[:i] in vocab and token[i:] in vocab]
        local.sort(key=lambda x: (vocab[x[0]], vocab[x[1]]))
        merges.extend(local)
    merges.sort(key=lambda m: (m[2], len(m[0]), len(m[1])), reverse=True)
    return [(left, right) for left, right, _ in merges]


def build_gemma_tokenizer(meta: dict):
    """meta: the file's tokenizer.ggml.* values (without the prefix) -> tokenizers.Tokenizer, config dict."""
    from tokenizers import AddedToken, Tokenizer, decoders, normalizers, pre_tokenizers, processors
    from tokenizers.models import BPE

    if meta.get("model") != "llama":
        raise GGUFTokenizerError(f"tokenizer.ggml.model {meta.get('model')!r} is not supported "
                                 "(only the sentencepiece-style 'llama' vocabulary of Gemma files)")
    tokens = ["\u2581" * len(t) if " " in t and not t.strip() else t for t in meta["tokens"]]
    types = list(meta.get("token_type") or [1] * len(tokens))
    if len(types) != len(tokens):  # zip would cut it short: the tail's control tokens would turn into text
        raise GGUFTokenizerError(f"tokenizer.ggml.token_type has {len(types)} entries for {len(tokens)} tokens")
    first: dict[str, int] = {}
    for i, t in enumerate(meta["tokens"]):  # a repeated string: one id would decode to nothing, the other take its text
        if first.setdefault(t, i) != i:
            raise GGUFTokenizerError(f"tokenizer.ggml.tokens repeats {t!r} (ids {first[t]} and {i})")
    vocab = {t: i for i, t in enumerate(tokens)}
    merges = generate_merges(vocab, {t: -i for i, t in enumerate(tokens)})
    specials = {}
    for name, key in SPECIAL_KEYS.items():
        tid = meta.get(key)
        if tid is not None:
            if not 0 <= tid < len(tokens):
                raise GGUFTokenizerError(f"tokenizer.ggml.{key}={tid} is outside the vocabulary ({len(tokens)})")
            specials[name] = meta["tokens"][tid]
    if "unk_token" not in specials:
        raise GGUFTokenizerError("the file names no unknown token (tokenizer.ggml.unknown_token_id)")
    if MASK_TOKEN in vocab:
        specials["mask_token"] = MASK_TOKEN

    tok = Tokenizer(BPE(vocab=vocab, merges=merges, fuse_unk=True, unk_token=specials["unk_token"], dropout=None,
                        byte_fallback=True))
    tok.normalizer = normalizers.Replace(" ", "\u2581")
    tok.pre_tokenizer = pre_tokenizers.Split(pattern=" ", behavior="merged_with_previous", invert=False)
    tok.decoder = decoders.Sequence([decoders.Replace("\u2581", " "), decoders.ByteFallback(), decoders.Fuse()])
    tok.add_special_tokens([AddedToken(t, normalized=False, special=True) for t in specials.values()])
    tok.add_special_tokens([AddedToken(t, normalized=False, special=True)
                            for t, ty in zip(meta["tokens"], types) if ty == CONTROL])
    tok.add_tokens([AddedToken(t, normalized=False, special=False)
                    for t, ty in zip(meta["tokens"], types) if ty == USER_DEFINED and t in vocab])
    add_bos = bool(meta.get("add_bos_token", True)) and "bos_token" in specials  # llama.cpp's default
    if add_bos:  # for consumers that call encode(add_special_tokens=True), e.g. transformers
        bos = specials["bos_token"]
        tok.post_processor = processors.TemplateProcessing(
            single=f"{bos} $A", pair=f"{bos} $A {bos} $B", special_tokens=[(bos, vocab[bos])])
    config = {**specials, "add_bos_token": add_bos, "add_eos_token": bool(meta.get("add_eos_token", False)),
              "tokenizer_class": "GemmaTokenizer", "padding_side": "left"}
    return tok, config


def write_tokenizer(meta: dict, directory: str | Path) -> None:
    tok, config = build_gemma_tokenizer(meta)
    d = Path(directory)
    tok.save(str(d / "tokenizer.json"))
    (d / "tokenizer_config.json").write_text(json.dumps(config, indent=1))
