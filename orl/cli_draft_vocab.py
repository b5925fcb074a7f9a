"""`orl draft-vocab`: the most frequent tokens of a conversion corpus's training streams, written as a draft
vocabulary file for `--draft-vocab` (orl.model.draft_vocab)."""
from __future__ import annotations

import argparse


def cmd_draft_vocab(args: argparse.Namespace) -> int:
    import hashlib
    from pathlib import Path

    import torch

    from orl.checkpoint import read_model_args, read_tokenizer
    from orl.model.draft_vocab import corpus_draft_ids, tokenizer_digest, training_streams, write_ids
    from orl.train.corpus import read_corpus

    tok = read_tokenizer(args.model)
    streams = read_corpus(Path(args.corpus))
    ids = corpus_draft_ids(streams, tok, args.size)
    train = training_streams(streams)  # what it counted, for the coverage line
    raw = (Path(args.corpus) / "corpus.json").read_bytes()
    covered = sum(int(v.numel()) for v in train.values())
    hits = sum(int(torch.isin(v.long(), ids).sum()) for v in train.values())
    source = {"corpus": str(Path(args.corpus).resolve()), "corpus_json_sha256": hashlib.sha256(raw).hexdigest(),
              "streams": sorted(train), "size_asked": args.size, "tokenizer_sha256": tokenizer_digest(args.model)}
    write_ids(args.out, ids, read_model_args(args.model).vocab_size, source)
    print(f"wrote {args.out}: {ids.numel()} ids covering {hits / max(covered, 1):.2%} of {covered:,} training tokens "
          f"({', '.join(sorted(train))})")
    return 0


def add_commands(sub) -> None:
    s = sub.add_parser("draft-vocab", help="write the N most frequent tokens of a conversion corpus as a draft "
                                           "vocabulary (--draft-vocab FILE: cheaper drafts, the same tokens)")
    s.add_argument("--corpus", required=True, help="a conversion corpus directory (tokens.safetensors + corpus.json)")
    s.add_argument("--model", required=True,
                   help="the checkpoint the file is for (its tokenizer: end tokens, vocabulary size, digest)")
    s.add_argument("--size", type=int, default=32_768, help="ids to keep (default 32768)")
    s.add_argument("--out", required=True, help="the JSON file to write (a file that is not a draft vocabulary is "
                                                "never replaced)")
    s.set_defaults(func=cmd_draft_vocab)
