"""The fused self-draft with fewer draft groups (ARConfig.spec_groups): TPF (ratio of sums) and CPU time per
token on the same prompts for G = 0 (all 2k + 1 groups) and a few G > 0. The tokens are the AR path's for every
G (tests/test_fused_self_draft.py), so accuracy is not measured here.

    python benchmarks/fused_groups.py --model ~/.cache/orl/runs/hint4g2 --limit 20 [--k 8] [--groups 0,1,2,3,4,6]

CPU time (time.process_time, one thread) rather than wall time, so a shared machine distorts it less; the first
prompt is decoded once untimed per G (warm-up).
"""
from __future__ import annotations

import argparse
import time

import torch

from orl.checkpoint import load_checkpoint
from orl.engine.ar import ARConfig, ARDecoder
from orl.eval.tasks import make_samples

CELLS = (("long7xp", "heldout"), ("long7xp", "beyond"), ("prog7xp", "heldout"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True, help="a block-diffusion checkpoint trained with ar_aux")
    ap.add_argument("--limit", type=int, default=20, help="prompts per cell")
    ap.add_argument("--k", type=int, default=8, help="spec_tokens")
    ap.add_argument("--groups", default="0,1,2,3,4,6", help="spec_groups values (0: all groups)")
    ap.add_argument("--max-new-tokens", type=int, default=104)
    ap.add_argument("--seed", type=int, default=0, help="prompt seed")
    args = ap.parse_args()
    torch.set_num_threads(1)
    model, tok, manifest = load_checkpoint(args.model)
    dec = ARDecoder(model, tok, manifest=manifest)
    print("| cell | G | positions a forward | TPF | CPU ms / token |\n|---|---:|---:|---:|---:|")
    for task, split in CELLS:
        samples = make_samples(task, split, args.limit, args.seed)
        for G in (int(g) for g in args.groups.split(",")):
            cfg = ARConfig(max_new_tokens=args.max_new_tokens, spec_tokens=args.k, spec_draft="fused",
                           spec_groups=G).validate()
            dec.generate([samples[0].prompt], cfg)  # warm-up
            tokens = forwards = 0
            cpu = 0.0
            for s in samples:
                start = time.process_time()
                g = dec.generate([s.prompt], cfg)[0]
                cpu += time.process_time() - start
                tokens, forwards = tokens + g.n_tokens, forwards + g.forwards
            width = (args.k + 1) + min(G or 2 * args.k + 1, 2 * args.k + 1) * args.k
            print(f"| {task} {split} | {G or 'all'} | {width} | {tokens / forwards:.2f} | {1000 * cpu / tokens:.2f} |",
                  flush=True)


if __name__ == "__main__":
    main()
