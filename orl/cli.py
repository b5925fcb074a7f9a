"""`orl` command line: parses arguments and calls into the library, nothing else."""
from __future__ import annotations

import argparse
import sys


def cmd_info(args: argparse.Namespace) -> int:
    from orl.checkpoint import describe

    print(describe(args.dir))
    return 0


def _set_field(cfg, path: str, value: str) -> None:
    """--set a.b=value on nested dataclass configs, cast to the field's current type."""
    *parents, key = path.split(".")
    for p in parents:
        cfg = getattr(cfg, p)
    if not hasattr(cfg, key):
        raise ValueError(f"--set {path}: no such config field")
    kind = type(getattr(cfg, key))
    if kind is bool:
        parsed = value.lower() in ("1", "true", "yes")
    elif kind is tuple:
        parsed = tuple(value.split(","))
    else:
        parsed = kind(value)
    setattr(cfg, key, parsed)


def cmd_train(args: argparse.Namespace) -> int:
    from orl.presets import get_preset

    cfg = get_preset(args.recipe, args.preset)
    if args.base:
        cfg.base = args.base
    for override in args.set or []:
        key, _, value = override.partition("=")
        _set_field(cfg, key, value)
    if args.recipe == "pretrain":
        from orl.train.pretrain import pretrain

        pretrain(cfg, args.out, resume=not args.fresh)
    elif args.recipe == "orl":
        from orl.train.trainer import train_orl

        train_orl(cfg, args.out, resume=not args.fresh)
    else:
        from orl.train.rcd import train_rcd

        train_rcd(cfg, args.out, resume=not args.fresh)
    return 0


def cmd_serve(args: argparse.Namespace) -> int:
    from orl.serve import serve

    serve(args.model, host=args.host, port=args.port, queue_size=args.queue_size, timeout_s=args.timeout,
          device=args.device)
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="orl", description="ORL post-training and the dlmrt inference engine")
    sub = p.add_subparsers(dest="cmd", required=True, metavar="COMMAND")

    s = sub.add_parser("info", help="print a checkpoint's manifest and parameter count")
    s.add_argument("dir", help="checkpoint directory")
    s.set_defaults(func=cmd_info)

    s = sub.add_parser("train", help="train with a recipe and preset (resumes from --out if it holds a run)")
    s.add_argument("--recipe", default="pretrain", choices=["pretrain", "orl", "rcd"])
    s.add_argument("--base", help="base checkpoint (orl / rcd recipes)")
    s.add_argument("--preset", required=True, help="preset name (orl/presets)")
    s.add_argument("--out", required=True, help="checkpoint directory (written atomically, resumable)")
    s.add_argument("--set", action="append", metavar="KEY=VALUE", help="override a scalar config field")
    s.add_argument("--fresh", action="store_true", help="ignore an existing run in --out")
    s.set_defaults(func=cmd_train)

    s = sub.add_parser("serve", help="OpenAI-compatible HTTP server + live denoising page (docs/SERVING.md)")
    s.add_argument("--model", required=True, help="checkpoint directory; its name is the served model id")
    s.add_argument("--host", default="127.0.0.1", help="bind address (default 127.0.0.1)")
    s.add_argument("--port", type=int, default=8000, help="port (default 8000)")
    s.add_argument("--queue-size", type=int, default=64, help="requests that may wait for the engine (default 64)")
    s.add_argument("--timeout", type=float, default=600.0, help="seconds per request, queue wait included (default 600)")
    s.add_argument("--device", default=None, help="cpu | cuda (default: cuda when available)")
    s.set_defaults(func=cmd_serve)
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
