"""The fused round's draft rows read out compactly (orl.model.draft_vocab.draft_read_out) against the full
-inf-filled [rows, V] logits the round used before, in one process, decode by decode in turn (A B A B): tokens,
forwards and seconds of each, and the per-pair time ratio's median. Both must give the same tokens and the same
forwards (the same drafts); only the time may differ. Session 38's trial, not kept: run it on main with
compact-draft-read-out.patch applied (`git apply docs/results-gemma/drafts-s38/compact-draft-read-out.patch`).

    python docs/results-gemma/drafts-s38/draft_read_out.py --model ~/.cache/orl/runs/gdonly450 --draft-vocab dv32k.json \\
        --corpus ~/.cache/orl/corpus/b1a208dc9de66062 --prompts 6 --context 64 --tokens 32 --repeats 3

--model: a draft-only conversion (its recorded verifier is attached, as `orl generate --spec-verifier` does) or
any self-drafting checkpoint; prompts are windows of the corpus's held-out code.
"""
from __future__ import annotations

import argparse
import copy
import statistics
import time
from pathlib import Path

import torch
from safetensors.torch import load_file
from torch import nn

from orl.checkpoint import load_checkpoint
from orl.engine.ar import ARConfig, ARDecoder
from orl.verifier import attach_self_draft


class FullReadOut(nn.Module):
    """The head behind a wrapper draft_read_out does not recognise: the round then takes the draft rows' logits
    from DraftVocabHead.forward, a [rows, V] tensor of -inf outside the ids (the path before draft_read_out)."""

    def __init__(self, head: nn.Module):
        super().__init__()
        self.head = head

    @property
    def weight(self):
        return self.head.weight

    def forward(self, h):
        return self.head(h)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--spec-verifier", help="as `orl generate --spec-verifier` (default: the conversion's "
                    "recorded base, if any)")
    ap.add_argument("--draft-vocab", required=True)
    ap.add_argument("--corpus", required=True)
    ap.add_argument("--prompts", type=int, default=6)
    ap.add_argument("--context", type=int, default=64)
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--spec-tokens", type=int, default=3)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    model, tok, manifest = load_checkpoint(args.model)
    compact = attach_self_draft(model, manifest, args.model, tok, args.spec_verifier, args.draft_vocab, "fused")
    full = copy.copy(compact)  # shares every module but the head wrapper
    full.lm_head = FullReadOut(compact.lm_head)
    stream = load_file(Path(args.corpus) / "tokens.safetensors")["code_heldout"]
    step = (len(stream) - args.context) // args.prompts
    prompts = [tok.decode(stream[i * step: i * step + args.context].tolist()) for i in range(args.prompts)]
    cfg = ARConfig(max_new_tokens=args.tokens, spec_tokens=args.spec_tokens, spec_draft="fused")
    decs = {name: ARDecoder(m, tok, manifest=manifest) for name, m in (("compact", compact), ("full", full))}
    decs["compact"].generate(prompts[:1], cfg)  # warm-up, not counted
    decs["full"].generate(prompts[:1], cfg)
    secs = {"compact": [], "full": []}
    ratios, tokens, forwards = [], 0, 0
    for _ in range(args.repeats):
        for p in prompts:
            out = {}
            for name in ("compact", "full"):
                t = time.perf_counter()
                out[name] = decs[name].generate([p], cfg)[0]
                secs[name].append(time.perf_counter() - t)
            a, b = out["compact"], out["full"]
            if a.token_ids != b.token_ids or a.step_forwards != b.step_forwards:
                raise SystemExit(f"the two read-outs disagree on prompt {prompts.index(p)}: not the same drafts")
            ratios.append(secs["compact"][-1] / secs["full"][-1])
            tokens, forwards = tokens + len(a.token_ids), forwards + a.step_forwards
    print(f"{args.prompts} prompts x {args.repeats} repeats, {args.tokens} new tokens, k = {args.spec_tokens}, "
          f"{args.threads} thread(s); TPF {tokens / forwards:.3f} (both)")
    print("| draft rows read out | median s / decode | tokens / s (sum / sum) |\n|---|---:|---:|")
    for name in ("full", "compact"):
        print(f"| {name} | {statistics.median(secs[name]):.2f} | {tokens / sum(secs[name]):.2f} |")
    print(f"compact / full time, median of {len(ratios)} pairs: {statistics.median(ratios):.3f} "
          f"(min {min(ratios):.3f}, max {max(ratios):.3f})")


if __name__ == "__main__":
    main()
