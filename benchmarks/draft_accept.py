"""Estimated draft acceptance of converted checkpoints on held-out text (orl.train.draft_eval.draft_agreement):
per checkpoint, how often each of its k fused-self-draft positions equals its own AR path's greedy token, the
mean accepted run per round and 1 + that (tokens per forward such rounds would give), teacher forced on the
corpus's held-out code windows. One forward per checkpoint: a cheap curve beside convert_eval.py --spec, which
decodes for real.

    python benchmarks/draft_accept.py --corpus ~/.cache/orl/corpus/<key> --dlm untrained runs/a runs/b \
        --ar ~/.cache/orl/gemma-3-270m --windows 32 --window 96 --context 32 --k 3 --stride 1
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch
from safetensors.torch import load_file

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from orl.checkpoint import load_checkpoint  # noqa: E402
from orl.model.vocab import special_ids  # noqa: E402
from orl.train.corpus import fixed_windows, with_bos  # noqa: E402
from orl.train.draft_eval import draft_agreement  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--corpus", required=True, help="corpus directory (tokens.safetensors: code_heldout)")
    ap.add_argument("--dlm", nargs="+", required=True, help="converted checkpoints; 'untrained' = --ar converted as is")
    ap.add_argument("--ar", help="the AR original (for 'untrained')")
    ap.add_argument("--windows", type=int, default=32)
    ap.add_argument("--window", type=int, default=96)
    ap.add_argument("--context", type=int, default=32)
    ap.add_argument("--k", type=int, default=3, help="drafts per round (the decoder's spec_tokens)")
    ap.add_argument("--stride", type=int, default=1)
    ap.add_argument("--batch", type=int, default=8, help="windows per forward")
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--verifier", help="score every drafter against this checkpoint's AR path instead of its own "
                    "(orl.model.row_split: the verifier's weights on the clean rows; a draft-only conversion's base)")
    ap.add_argument("--out", help="write the JSON rows here too")
    a = ap.parse_args(argv)
    if a.threads:
        torch.set_num_threads(a.threads)
    stream = load_file(Path(a.corpus) / "tokens.safetensors")["code_heldout"]
    out = []
    for name in a.dlm:
        if name == "untrained":
            if not a.ar:
                ap.error("'untrained' needs --ar")
            from orl.train.convert import to_diffusion

            ar, tok, _ = load_checkpoint(a.ar)
            model = to_diffusion(ar).eval()
        else:
            model, tok, _ = load_checkpoint(name)
        if a.verifier:
            from orl.model.row_split import verify_with

            model = verify_with(model, load_checkpoint(a.verifier)[0])
        elif getattr(model, "verifier_record", None):
            ap.error(f"{name} is a draft-only conversion: give its base as --verifier")
        ids = special_ids(tok, model.args.vocab_size)
        rows = with_bos(fixed_windows(stream, a.windows, a.window), getattr(tok, "bos_id", None))
        from orl.model.row_split import draft_rows_from

        with draft_rows_from(model, a.window):  # the clean window first, then the groups (a no-op without --verifier)
            parts = [draft_agreement(model, rows[i:i + a.batch], a.context, a.k, a.stride, ids.mask, ids.pad)
                     for i in range(0, len(rows), a.batch)]
        cuts = sum(p["cuts"] for p in parts)
        acc = sum(p["counts"]["run_sum"] for p in parts) / cuts
        agree = [sum(p["counts"]["hits"][j] for p in parts) / max(sum(p["counts"]["live"][j] for p in parts), 1)
                 for j in range(a.k)]
        row = {"dlm": name, "verifier": a.verifier, "windows": len(rows), "cuts": cuts, "k": a.k,
               "agree": [round(x, 4) for x in agree], "accepted": round(acc, 4), "tpf_estimate": round(1 + acc, 4)}
        out.append(row)
        print(json.dumps(row), flush=True)
        del model
    if a.out:
        Path(a.out).write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
