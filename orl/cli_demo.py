"""`orl demo`: base vs ORL on held-out prompts of the base's own families, side by side (orl.demo)."""
from __future__ import annotations

import argparse
from pathlib import Path

SHIPPED = Path(__file__).resolve().parent.parent / "checkpoints"


def cmd_demo(args: argparse.Namespace) -> int:
    from orl.cli_tasks import load_task_flags
    from orl.demo import run_demo

    load_task_flags(args)  # a base trained on tasks of the user's own needs them registered
    # the shipped ORL model goes with the shipped base only: a base of the user's own is shown alone or with --orl
    orl = args.orl if args.orl is not None else (str(SHIPPED / "orl-tiny7-orl") if args.base is None else None)
    # the shipped drafter likewise (it drafts for the shipped base; skipped if absent); "none": no drafter row
    shipped = SHIPPED / "orl-tiny7-draft"
    drafter = (None if args.drafter == "none" else args.drafter if args.drafter is not None
               else str(shipped) if args.base is None and shipped.is_dir() else None)
    run_demo(args.base or str(SHIPPED / "orl-tiny7-base"), orl, per_task=args.per_task, threshold=args.threshold,
             max_new_tokens=args.max_new_tokens, spec_tokens=args.spec_tokens, drafter=drafter)
    return 0


def add_command(sub) -> None:
    from orl.cli_tasks import add_task_flags

    s = sub.add_parser("demo", help="base vs ORL on held-out prompts, side by side, and one example as it decodes")
    s.add_argument("--base", default=None, help="base checkpoint (default: the shipped orl-tiny7-base)")
    s.add_argument("--orl", default=None,
                   help="ORL checkpoint of that base (default: the shipped orl-tiny7-orl with the shipped base; none "
                        "with a --base of your own; skipped if absent)")
    s.add_argument("--drafter", default=None,
                   help="a draft-only drafter of the base, shown beside it under the fused decoder: the base's outputs "
                        "in fewer forwards (default: the shipped orl-tiny7-draft with the shipped base; 'none': no "
                        "drafter row)")
    s.add_argument("--per-task", type=int, default=6,
                   help="held-out prompts per family (and as many beyond the range of a length-varied one)")
    s.add_argument("--threshold", type=float, default=None,
                   help="commit threshold for both models under the threshold decoder (--spec-tokens 0; default 0.9)")
    s.add_argument("--max-new-tokens", type=int, default=None,
                   help="answer budget (default 64, or 112 when a family is length-varied, within the context)")
    s.add_argument("--spec-tokens", type=int, default=None, metavar="K",
                   help="score with the fused self-speculative decoder, K drafted tokens in 3 draft groups a round (at "
                        "most 2K) (0: the threshold decoder; default 8 for a base pretrained with a next-token loss "
                        "beside its diffusion loss, recipe ar_aux > 0, such as the shipped orl-tiny7-base, or an ORL "
                        "model of one; else 0)")
    add_task_flags(s)
    s.set_defaults(func=cmd_demo)
