"""A verifiable task from the AR original itself (issue 22 item 4): "the next line of this code, as the AR
model writes it". Writes a data task (orl/eval/tasks/datafile.py) that `orl eval --tasks-file` and
`orl train --recipe orl --tasks-file` read.

    python benchmarks/distill_lines.py --ar ~/.cache/orl/gemma-3-270m --corpus ~/.cache/orl/corpus/<key> \
        --train 256 --heldout 64 --out lines.jsonl

Each prompt is a window of the corpus's code stream (train rows from code_train, held-out rows from
code_heldout: files a conversion trained on / never saw), decoded and cut after its last newline; the
answer is the AR original's greedy continuation up to its first newline (ARDecoder with the stop string
"\\n"), kept only when the AR decoder ended the line within --max-line tokens and the line is not blank.
The rows carry `"stop": "\\n"`, so a rollout or an eval of the converted model ends at its own newline
and is judged by exact match with the AR line: accuracy is agreement with the AR original on whole lines,
and TPF (ratio of sums) is what the converted model pays for it. The pretrained model's own greedy output
is the reference, as in the self-distillation stream of the conversion corpus.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from orl.checkpoint import load_checkpoint  # noqa: E402
from orl.engine.ar import ARConfig, ARDecoder  # noqa: E402
from orl.train.corpus import fixed_windows, read_corpus  # noqa: E402


def prompts_of(stream: torch.Tensor, n: int, length: int, tok) -> list[str]:
    """Up to n distinct prompts: evenly spaced windows, decoded, cut after their last newline. A window
    across a file boundary (an EOS or BOS in it) is skipped: its text would not re-encode to its tokens."""
    special = {t for t in (tok.eos_id, tok.pad_id, getattr(tok, "bos_id", None)) if t is not None}
    out = []
    for row in fixed_windows(stream, n, length).tolist():
        if special & set(row):
            continue
        text = tok.decode(row)
        cut = text.rfind("\n")
        if cut > 0 and text[: cut + 1].strip():
            out.append(text[: cut + 1])
    return list(dict.fromkeys(out))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ar", required=True, help="the AR original (e.g. ~/.cache/orl/gemma-3-270m)")
    ap.add_argument("--corpus", required=True, help="a finished conversion corpus directory")
    ap.add_argument("--train", type=int, default=256, help="windows drawn from code_train")
    ap.add_argument("--heldout", type=int, default=64, help="windows drawn from code_heldout")
    ap.add_argument("--context", type=int, default=48, help="tokens per window before the cut")
    ap.add_argument("--max-line", type=int, default=24, help="AR tokens allowed for the line")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--out", required=True)
    args = ap.parse_args(argv)
    out = Path(args.out)
    if out.exists():
        raise SystemExit(f"{out} exists; give a new --out (this script never overwrites)")
    model, tok, manifest = load_checkpoint(args.ar)
    dec = ARDecoder(model, tok, manifest=manifest)
    streams = read_corpus(Path(args.corpus))
    cfg = ARConfig(max_new_tokens=args.max_line, stop=("\n",))
    rows, dropped = [], 0
    for split, key, n in (("train", "code_train", args.train), ("heldout", "code_heldout", args.heldout)):
        prompts = prompts_of(streams[key], n, args.context, tok)
        for k in range(0, len(prompts), args.batch):
            part = prompts[k:k + args.batch]
            for p, g in zip(part, dec.generate(part, cfg)):
                line = g.text.rstrip()
                if g.stop == "\n" and line.strip():
                    rows.append({"prompt": p, "answer": line, "stop": "\n", "split": split})
                else:
                    dropped += 1
    with open(out, "x", encoding="utf-8") as f:
        f.writelines(json.dumps(r) + "\n" for r in rows)
    counts = {s: sum(r["split"] == s for r in rows) for s in ("train", "heldout")}
    print(f"{out}: {counts['train']} train + {counts['heldout']} heldout rows ({dropped} windows dropped: no "
          f"newline within {args.max_line} AR tokens, or a blank line)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
