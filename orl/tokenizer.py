"""Tokenizers with one interface: encode, decode, special ids (mask / eos / pad), chat template.

CharTokenizer serves the tiny synthetic tasks (one token per printable ASCII character, saved with
the checkpoint as orl_tokenizer.json); HFTokenizer wraps a Hugging Face tokenizer.json.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

CHAR_FILE = "orl_tokenizer.json"
SPECIALS = ("<pad>", "<eos>", "<mask>")
PRINTABLE = "\n" + "".join(chr(c) for c in range(32, 127))


class TokenizerError(ValueError):
    pass


class CharTokenizer:
    """Specials first (pad 0, eos 1, mask 2), then one id per character."""

    kind = "char"

    def __init__(self, chars: str = PRINTABLE):
        if len(set(chars)) != len(chars):
            raise TokenizerError("character vocabulary has duplicates")
        self.chars = chars
        self.itos = list(SPECIALS) + list(chars)
        self.stoi = {c: i + len(SPECIALS) for i, c in enumerate(chars)}
        self.pad_id, self.eos_id, self.mask_id = 0, 1, 2

    @property
    def vocab_size(self) -> int:
        return len(self.itos)

    @property
    def id_bound(self) -> int:
        """One past the largest id encode can return."""
        return len(self.itos)

    def encode(self, text: str) -> list[int]:
        ids = []
        for i, c in enumerate(text):
            if c not in self.stoi:
                raise TokenizerError(f"character {c!r} at position {i} is not in the tokenizer's vocabulary")
            ids.append(self.stoi[c])
        return ids

    def decode(self, ids, skip_special: bool = True) -> str:
        out = []
        for i in ids:
            i = int(i)
            if not 0 <= i < len(self.itos):
                raise TokenizerError(f"token id {i} out of range [0, {len(self.itos)})")
            if i < len(SPECIALS):
                if not skip_special:
                    out.append(self.itos[i])
                continue
            out.append(self.itos[i])
        return "".join(out)

    def token_str(self, i: int) -> str:
        return self.itos[int(i)]

    def apply_chat_template(self, messages: list[dict]) -> str:
        """The tiny models are prompted with the task text itself: user turns joined by newlines."""
        return "\n".join(m["content"] for m in messages if m.get("role") == "user")

    def save(self, directory: str | os.PathLike) -> None:
        data = {"type": "char", "chars": self.chars, "specials": list(SPECIALS)}
        Path(directory, CHAR_FILE).write_text(json.dumps(data, indent=1))

    @classmethod
    def load(cls, directory: str | os.PathLike) -> "CharTokenizer":
        path = Path(directory, CHAR_FILE)
        try:
            data = json.loads(path.read_text())
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
            raise TokenizerError(f"cannot read char tokenizer {path}: {e}") from e
        if not isinstance(data, dict) or data.get("type") != "char" or tuple(data.get("specials", ())) != SPECIALS \
                or not isinstance(data.get("chars"), str):
            raise TokenizerError(f"{path} is not an orl char tokenizer (expected an object with type 'char', "
                                 "its specials and a chars string)")
        return cls(data["chars"])


class HFTokenizer:
    """A tokenizer.json (tokenizers library) plus the special tokens of tokenizer_config.json."""

    kind = "hf"

    def __init__(self, directory: str | os.PathLike, mask_token: str | None = None):
        from tokenizers import Tokenizer

        d = Path(directory)
        try:
            self.tok = Tokenizer.from_file(str(d / "tokenizer.json"))
        except Exception as e:  # tokenizers raises a bare Exception on bad files
            raise TokenizerError(f"cannot read {d / 'tokenizer.json'}: {e}") from e
        cfg_path = d / "tokenizer_config.json"
        try:
            self.config = json.loads(cfg_path.read_text()) if cfg_path.exists() else {}
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
            raise TokenizerError(f"cannot read {cfg_path}: {e}") from e
        if not isinstance(self.config, dict):
            raise TokenizerError(f"{cfg_path} must hold a JSON object")
        # transformers 5 saves the template as chat_template.jinja, and prefers that file when both exist
        jinja = d / "chat_template.jinja"
        self.chat_template = jinja.read_text() if jinja.is_file() else self.config.get("chat_template")

        def special(name: str, override: str | None = None) -> int | None:
            tok = override or self.config.get(name)
            if isinstance(tok, dict):
                tok = tok.get("content")
            if tok is not None and not isinstance(tok, str):
                raise TokenizerError(f"{cfg_path}: {name} must be a token string, got {tok!r}")
            tid = self.tok.token_to_id(tok) if tok else None
            # a configured EOS or mask the vocabulary lacks would silently never stop or never mask
            if tid is None and tok and not override and name in ("eos_token", "mask_token"):
                raise TokenizerError(f"{cfg_path}: {name} {tok!r} is not in the vocabulary of {d / 'tokenizer.json'}")
            return tid

        self.eos_id = special("eos_token")
        self.pad_id = special("pad_token")
        # Gemma-style vocabularies expect BOS first (tokenizer_config add_bos_token, as transformers reads it)
        self.bos_id = special("bos_token") if self.config.get("add_bos_token") else None
        self.mask_id = special("mask_token", mask_token)
        if self.pad_id is None:
            self.pad_id = self.eos_id

    @property
    def vocab_size(self) -> int:
        return self.tok.get_vocab_size()

    @property
    def id_bound(self) -> int:
        """One past the largest id encode can return (a vocabulary's ids may have gaps: more than vocab_size)."""
        return max(self.tok.get_vocab(with_added_tokens=True).values(), default=-1) + 1

    def encode(self, text: str) -> list[int]:
        ids = self.tok.encode(text, add_special_tokens=False).ids
        return [self.bos_id] + ids if self.bos_id is not None else ids

    def decode(self, ids, skip_special: bool = True) -> str:
        return self.tok.decode([int(i) for i in ids], skip_special_tokens=skip_special)

    def token_id(self, token: str) -> int | None:
        return self.tok.token_to_id(token)

    def token_str(self, i: int) -> str:
        return self.tok.id_to_token(int(i)) or ""

    def add_mask_token(self, token: str) -> tuple[int, bool]:
        """Make `token` the mask token (recorded in tokenizer_config.json when saved): an existing
        added token of that string (a reserved one such as Qwen's <|vision_pad|>) is reused, a new
        special token is added at the next id, as SDAR adds <|MASK|> to Qwen3's vocabulary. (id,
        added). A token of the base vocabulary is refused: ordinary text encodes to it."""
        from tokenizers import AddedToken

        tid = self.tok.token_to_id(token)
        reserved = {t.content for t in self.tok.get_added_tokens_decoder().values()}
        if tid is not None and token not in reserved:
            raise TokenizerError(f"{token!r} is an ordinary token of the vocabulary (id {tid}): text encodes to it, "
                                 "so it cannot be the mask; choose an added (special) token or a new string")
        # token_to_id misses what the vocabulary stores in another spelling (byte-level BPE's 'Ġhello')
        spelled = self.tok.encode(token, add_special_tokens=False).ids
        if tid is None and len(spelled) == 1:
            raise TokenizerError(f"{token!r} is an ordinary token of the vocabulary (id {spelled[0]}, as "
                                 f"{self.token_str(spelled[0])!r}): text encodes to it, so it cannot be the mask")
        added = tid is None
        if added:
            self.tok.add_special_tokens([AddedToken(token, special=True, normalized=False)])
            tid = self.tok.token_to_id(token)
        self.config = {**self.config, "mask_token": token}
        self.mask_id = tid
        return tid, added

    def apply_chat_template(self, messages: list[dict], add_generation_prompt: bool = True, **template_kwargs) -> str:
        """The prompt text transformers' apply_chat_template(tokenize=False) renders (orl.chat_template);
        template_kwargs reach the template as variables (e.g. enable_thinking=False)."""
        if not self.chat_template:
            raise TokenizerError("this tokenizer has no chat_template in tokenizer_config.json")
        from orl.chat_template import named_tokens, render

        return render(self.chat_template, messages, named_tokens(self.config),
                      add_generation_prompt=add_generation_prompt, **template_kwargs)

    def save(self, directory: str | os.PathLike) -> None:
        self.tok.save(str(Path(directory, "tokenizer.json")))
        if self.config:
            Path(directory, "tokenizer_config.json").write_text(json.dumps(self.config, indent=1))
        if self.chat_template and self.chat_template != self.config.get("chat_template"):
            # read from chat_template.jinja (transformers 5): the config does not carry it
            Path(directory, "chat_template.jinja").write_text(self.chat_template)


def resolve_special_ids(tok, manifest: dict) -> None:
    """The one place special ids are decided (DESIGN section 2: from the tokenizer / config, never
    literals). mask: the tokenizer's own mask token, else the manifest's mask_id (orl.json, or a
    published config's mask_token_id), else the family's published mask token string if the
    vocabulary has it. EOS: the tokenizer's eos first, then the config's eos_token_id(s) and the
    family's end-of-turn tokens (tok.eos_ids; tok.eos_id stays the first)."""
    lookup = getattr(tok, "token_id", None)
    if (mask := manifest.get("mask_id")) is not None and not _is_id(mask):
        raise TypeError(f"mask_id must be an integer, got {mask!r}")
    if (eos := manifest.get("eos_ids")) is not None and not (isinstance(eos, list) and all(map(_is_id, eos))):
        raise TypeError(f"eos_ids must be a list of integers, got {eos!r}")
    if tok.mask_id is None:
        if manifest.get("mask_id") is not None:
            tok.mask_id = manifest["mask_id"]
        elif manifest.get("mask_token") and lookup is not None:
            tok.mask_id = lookup(manifest["mask_token"])
    named = [lookup(t) for t in manifest.get("eos_tokens") or ()] if lookup is not None else []
    eos = [tok.eos_id, *(manifest.get("eos_ids") or ()), *named]
    tok.eos_ids = tuple(dict.fromkeys(int(i) for i in eos if i is not None))
    if tok.eos_id is None and tok.eos_ids:
        tok.eos_id = tok.eos_ids[0]
        if getattr(tok, "pad_id", 0) is None:
            tok.pad_id = tok.eos_id


def _is_id(i) -> bool:
    return type(i) is int  # not True (== 1), not 5.7, not "12" (which a loop would read as 1 and 2)


def load_tokenizer(directory: str | os.PathLike, mask_token: str | None = None):
    d = Path(directory)
    if (d / CHAR_FILE).exists():
        return CharTokenizer.load(d)
    if (d / "tokenizer.json").exists():
        return HFTokenizer(d, mask_token)
    raise TokenizerError(f"no tokenizer in {d}: expected {CHAR_FILE} or tokenizer.json")
