"""`orl` command line: parses arguments and calls into the library, nothing else."""
from __future__ import annotations

import argparse
import sys


def cmd_info(args: argparse.Namespace) -> int:
    from orl.checkpoint import describe

    print(describe(args.dir))
    return 0


def cmd_train(args: argparse.Namespace) -> int:
    from orl.presets import get_preset

    cfg = get_preset(args.recipe, args.preset)
    for override in args.set or []:
        key, _, value = override.partition("=")
        if not hasattr(cfg, key):
            raise ValueError(f"--set {override!r}: the {args.recipe} config has no field {key!r}")
        setattr(cfg, key, type(getattr(cfg, key))(value))
    if args.recipe == "pretrain":
        from orl.train.pretrain import pretrain

        pretrain(cfg, args.out, resume=not args.fresh)
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="orl", description="ORL post-training and the dlmrt inference engine")
    sub = p.add_subparsers(dest="cmd", required=True, metavar="COMMAND")

    s = sub.add_parser("info", help="print a checkpoint's manifest and parameter count")
    s.add_argument("dir", help="checkpoint directory")
    s.set_defaults(func=cmd_info)

    s = sub.add_parser("train", help="train with a recipe and preset (resumes from --out if it holds a run)")
    s.add_argument("--recipe", default="pretrain", help="pretrain")
    s.add_argument("--preset", required=True, help="preset name (orl/presets)")
    s.add_argument("--out", required=True, help="checkpoint directory (written atomically, resumable)")
    s.add_argument("--set", action="append", metavar="KEY=VALUE", help="override a scalar config field")
    s.add_argument("--fresh", action="store_true", help="ignore an existing run in --out")
    s.set_defaults(func=cmd_train)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except (ValueError, FileNotFoundError) as e:
        print(f"orl {args.cmd}: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
