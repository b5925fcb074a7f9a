"""A smaller vocabulary for the draft rows (`draft_vocab(model, ids)`), a transform of a self-drafting model.

Why: gemma-3-270m's head is 262,144 x 640, 168M of its 268M weights, and a fused self-speculative round
(orl.engine.self_draft) reads it out on every row: at k = 3, 4 verify rows and 21 draft rows. On the draft rows
only the draft's argmax and two probabilities are used, and almost every accepted draft is a frequent token,
so the draft rows score only the `ids` (the corpus's most frequent tokens, FR-Spec's frequency-ranked draft
head): a [n, D] copy of those head rows, the other logits -inf. The verify rows keep the whole head, so the
output tokens do not change; a draft outside `ids` is simply never proposed, which costs only TPF.

Which rows draft is the cut orl.model.row_split sets for one forward (`draft_rows_from`); a model without a
separate verifier gets a cut of its own here, so its own AR path's fused decode (`--spec-draft fused`) uses it
too. Outside a draft forward (prefill, plain AR steps) the head is the model's own.
"""
from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

import torch
from torch import Tensor, nn

from orl.model.draft_delta import DraftDelta
from orl.model.row_split import Cut, RowSplit


class DraftVocabHead(nn.Module):
    """head(h) on the rows before cut.at; on the rows from it, h's logits over `ids` only (-inf elsewhere)."""

    def __init__(self, head: nn.Module, ids: Tensor, cut: Cut):
        super().__init__()
        self.head, self.cut = head, cut
        self.register_buffer("ids", ids, persistent=False)                          # [n]
        # a copy, read once a forward: indexing the [V, D] weight each forward would read it
        self.register_buffer("sub", draft_rows_weight(head, ids), persistent=False)  # [n, D]
        self.vocab = head.weight.shape[0]

    @property
    def weight(self) -> Tensor:
        return self.head.weight

    def forward(self, h: Tensor) -> Tensor:                                         # h [B, T, D]
        c = self.cut.at
        if c is None or c >= h.shape[1]:
            return self.head(h)
        part = h[:, c:] @ self.sub.T                                                # [B, T - c, n]
        out = part.new_full((*part.shape[:2], self.vocab), float("-inf"))          # [B, T - c, V]
        out[..., self.ids] = part
        return out if c <= 0 else torch.cat([self.head(h[:, :c]), out], 1)


@torch.no_grad()
def draft_rows_weight(head: nn.Module, ids: Tensor) -> Tensor:
    """The head rows `ids` the draft rows use: the drafter's (a RowSplit's draft side; a DraftDelta's verifier
    weight plus its low-rank delta), else the head's own."""
    # indexing by `ids` copies: the buffer shares no storage with the head
    if isinstance(head, RowSplit):
        return head.draft.weight[ids]
    if isinstance(head, DraftDelta):
        return head.clean.weight[ids] + head.b[ids] @ head.a                      # [n, D]
    return head.weight[ids]


def draft_vocab(model: nn.Module, ids: Tensor) -> nn.Module:
    """In place: the model's head scores only `ids` on draft rows (module docstring); returned. Refused: a
    family with a final logit soft-cap (it would map the missing tokens' -inf to -cap, inside the softmax), ids
    out of range or repeated, a model it was already applied to."""
    if isinstance(model.lm_head, DraftVocabHead):
        raise ValueError("draft_vocab was already applied to this model")
    if model.args.final_logit_softcap:
        raise ValueError("draft_vocab: this family soft-caps its logits (final_logit_softcap), which turns the "
                         "excluded tokens' -inf into -cap; not supported")
    v = model.lm_head.weight.shape[0]
    ids = torch.as_tensor(ids, dtype=torch.long, device=model.lm_head.weight.device).flatten()
    if ids.numel() == 0 or int(ids.min()) < 0 or int(ids.max()) >= v:
        raise ValueError(f"draft vocabulary ids must be a non-empty set within 0..{v - 1}")
    if ids.unique().numel() != ids.numel():
        raise ValueError("draft vocabulary ids repeat")
    if getattr(model, "row_cut", None) is None:
        model.row_cut = Cut()  # no separate verifier: the model's own draft rows (orl.model.row_split)
    model.lm_head = DraftVocabHead(model.lm_head, ids, model.row_cut)
    return model


def frequent_ids(streams: Iterable[Iterable[int]], n: int, keep: Iterable[int] = ()) -> Tensor:
    """The n most frequent token ids of `streams` (ties: the smaller id), plus `keep` (EOS, stop tokens: a draft
    that ends an answer must stay proposable) within the n. Fewer when the streams hold fewer distinct ids."""
    if n < 1:
        raise ValueError(f"draft vocabulary size must be >= 1, got {n}")
    counts = Counter()
    for s in streams:
        counts.update(s.tolist() if isinstance(s, Tensor) else s)
    keep = list(dict.fromkeys(int(k) for k in keep))
    kept = set(keep)
    ranked = [t for t, _ in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])) if t not in kept]
    return torch.tensor(sorted(keep + ranked[: max(0, n - len(keep))]), dtype=torch.long)


def training_streams(streams: dict[str, Tensor]) -> dict[str, Tensor]:
    """A conversion corpus's streams without its held-out split (which measures the drafts, so never chooses them)."""
    return {k: v for k, v in streams.items() if "heldout" not in k}


def corpus_draft_ids(streams: dict[str, Tensor], tok, n: int) -> Tensor:
    """The draft vocabulary of a conversion corpus: the n most frequent tokens of its training streams, every end
    token kept (a chat model's end-of-turn too), the mask dropped (a draft never proposes it)."""
    ids = frequent_ids(training_streams(streams).values(), n, keep=[tok.eos_id, *getattr(tok, "eos_ids", ())])
    return ids[ids != (tok.mask_id if getattr(tok, "mask_id", None) is not None else -1)]


FORMAT = "orl.draft_vocab"


def tokenizer_digest(directory) -> str | None:
    """sha256 of a checkpoint's tokenizer.json (None without one): ties a draft vocabulary to its tokenizer."""
    import hashlib
    from pathlib import Path

    f = Path(directory) / "tokenizer.json"
    return hashlib.sha256(f.read_bytes()).hexdigest() if f.is_file() else None
MAX_FILE_BYTES = 16 << 20  # 262,144 ids as JSON are ~2 MB; a larger file is not one of ours


def write_ids(path, ids: Tensor, vocab_size: int, source: dict) -> None:
    """ids as JSON ({"format", "vocab_size", "ids", "source"}), written whole or not at all (a temporary file of a
    fresh name beside it, renamed); refuses to replace a file that is not a draft vocabulary (it was not written
    here) and ids outside the vocabulary."""
    import json
    import os
    import tempfile
    from pathlib import Path

    ids = [int(i) for i in ids]
    if not ids or min(ids) < 0 or max(ids) >= vocab_size:
        raise ValueError(f"draft vocabulary ids must be a non-empty set within 0..{vocab_size - 1} (a corpus of "
                         "another tokenizer?)")
    path = Path(path)
    if path.exists():
        try:
            ours = path.stat().st_size <= MAX_FILE_BYTES and json.loads(path.read_text()).get("format") == FORMAT
        except (ValueError, UnicodeDecodeError, AttributeError):
            ours = False
        if not ours:
            raise ValueError(f"{path} exists and is not a draft vocabulary: not replaced")
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(json.dumps({"format": FORMAT, "vocab_size": vocab_size, "ids": ids, "source": source}) + "\n")
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def read_ids(path, vocab_size: int, tokenizer_sha256: str | None = None) -> Tensor:
    """The ids of a draft vocabulary file, checked (size before reading, format, the model's vocabulary size, ids
    in range and distinct; the tokenizer's digest when both sides know it) so a wrong file is named instead of
    drafting garbage."""
    import json
    from pathlib import Path

    path = Path(path)
    if not path.is_file():
        raise ValueError(f"draft vocabulary {path}: no such file")
    if path.stat().st_size > MAX_FILE_BYTES:
        raise ValueError(f"draft vocabulary {path}: {path.stat().st_size} bytes, more than any draft vocabulary")
    try:
        data = json.loads(path.read_text())
    except (ValueError, UnicodeDecodeError) as e:
        raise ValueError(f"draft vocabulary {path}: not JSON ({e})") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise ValueError(f"draft vocabulary {path}: not a draft vocabulary file (format {FORMAT!r}; "
                         "`orl draft-vocab` writes one)")
    if data.get("vocab_size") != vocab_size:
        raise ValueError(f"draft vocabulary {path} is for a vocabulary of {data.get('vocab_size')} tokens, the model's "
                         f"has {vocab_size}")
    theirs = (data.get("source") or {}).get("tokenizer_sha256") if isinstance(data.get("source"), dict) else None
    if tokenizer_sha256 and theirs and theirs != tokenizer_sha256:
        raise ValueError(f"draft vocabulary {path} was written for another tokenizer (tokenizer.json digest differs)")
    ids = data.get("ids")
    if not isinstance(ids, list) or not ids or not all(type(i) is int and 0 <= i < vocab_size for i in ids):
        raise ValueError(f"draft vocabulary {path}: ids must be a non-empty list of token ids below {vocab_size}")
    if len(set(ids)) != len(ids):
        raise ValueError(f"draft vocabulary {path}: ids repeat")
    return torch.tensor(ids, dtype=torch.long)
