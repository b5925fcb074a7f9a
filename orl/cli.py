"""`orl` command line: parses arguments and calls into the library, nothing else."""
from __future__ import annotations

import argparse
import sys


def cmd_info(args: argparse.Namespace) -> int:
    from orl.checkpoint import describe

    print(describe(args.dir))
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="orl", description="ORL post-training and the dlmrt inference engine")
    sub = p.add_subparsers(dest="cmd", required=True, metavar="COMMAND")

    s = sub.add_parser("info", help="print a checkpoint's manifest and parameter count")
    s.add_argument("dir", help="checkpoint directory")
    s.set_defaults(func=cmd_info)
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
