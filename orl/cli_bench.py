"""`orl bench`: speed and accuracy of the dLLMs, the baseline loops and the AR peers, as one table
(orl.eval.bench)."""
from __future__ import annotations

import argparse


def add_command(sub) -> None:
    s = sub.add_parser("bench", help="speed and accuracy of the dLLMs, baseline loops and AR peers: one table")
    s.add_argument("--base", required=True, help="base dLLM checkpoint: systems (a), (c), (d) and the ratios' reference")
    s.add_argument("--orl", help="dLLM after ORL (b); its manifest gives residual mode and block length")
    s.add_argument("--ar", help="autoregressive checkpoint: (e) orl's AR decoder, (f) transformers generate")
    s.add_argument("--tasks", default="trained", help="'trained' (default: the families the base records training "
                                                         "on), 'all' (the v6 suite) or comma-separated task names")
    s.add_argument("--split", default="heldout", help="train | heldout | beyond (tasks v7: sizes past the training range)")
    s.add_argument("--limit", type=int, default=20, help="samples per task")
    s.add_argument("--threshold", type=float, default=0.9, help="commit threshold tau of (a), (b), (d)")
    s.add_argument("--max-new-tokens", type=int, default=64)
    s.add_argument("--ref-steps", type=int, default=0, help="(c) steps over all blocks (0: one token per step)")
    s.add_argument("--chunk-steps", type=int, default=1, help="dlmrt: denoising steps between host checks")
    s.add_argument("--ar-chunk-steps", type=int, default=1, help="(e): decode steps between host EOS checks (8+ on GPU)")
    s.add_argument("--ar-spec-tokens", type=int, default=10,
                   help="(g), (h): prompt-lookup speculative decoding of the AR model, at most K drafted tokens per "
                        "verify forward (default 10; 0: no (g), (h))")
    s.add_argument("--ar-spec-ngram", type=int, default=2, help="(g), (h): the longest n-gram looked up (default 2)")
    s.add_argument("--self-spec-tokens", type=int, default=0,
                   help="(i), (j): the base decodes self-speculatively, its diffusion path drafting K tokens a round "
                        "for its AR path ((j): fused, one forward a round); needs a base trained with ar_aux "
                        "(default 0: off)")
    s.add_argument("--self-spec-groups", type=int, default=3,
                   help="(k): (j) with only this many draft groups a round, the likeliest by the draft's own "
                        "confidences (default 3; 0: no (k))")
    s.add_argument("--drafter", help="(l): a draft-only checkpoint (orl train --recipe draft --set draft_only=true) "
                                     "drafting for the verifier its recipe records, fused with --self-spec-groups")
    s.add_argument("--compile", action="store_true", help="torch.compile the steps of dlmrt and (e)")
    s.add_argument("--device", default="cpu")
    s.add_argument("--seed", type=int, default=0, help="sample selection")
    s.add_argument("--out", help="markdown file the table is appended to")
    s.set_defaults(func=cmd_bench)


def cmd_bench(args: argparse.Namespace) -> int:
    from orl.eval.bench import BenchSpec, run_bench

    spec = BenchSpec(base=args.base, orl=args.orl, ar=args.ar, tasks=args.tasks.split(","), split=args.split,
                     limit=args.limit, threshold=args.threshold, max_new_tokens=args.max_new_tokens,
                     ref_steps=args.ref_steps, chunk_steps=args.chunk_steps, ar_chunk_steps=args.ar_chunk_steps,
                     ar_spec_tokens=args.ar_spec_tokens, ar_spec_ngram=args.ar_spec_ngram,
                     self_spec_tokens=args.self_spec_tokens, self_spec_groups=args.self_spec_groups, drafter=args.drafter,
                     compile=args.compile, device=args.device, seed=args.seed, out=args.out)
    print(run_bench(spec)[1])
    return 0
