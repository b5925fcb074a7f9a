"""`orl average`: the weighted mean of several checkpoints of one model (orl.average), written as a new one."""
from __future__ import annotations

import argparse


def weights_arg(text: str) -> list[float]:
    try:
        if "_" in text:  # float() reads "1_0" as 10
            raise ValueError
        return [float(x) for x in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"--weights wants comma-separated numbers, got {text!r}") from None


def cmd_average(args: argparse.Namespace) -> int:
    from orl.average import average_checkpoints

    print(average_checkpoints(args.models, args.out, args.weights))
    return 0


def add_commands(sub) -> None:
    s = sub.add_parser("average", help="write the weighted mean of checkpoints of one model (e.g. a run's kept "
                                       "copies) as a new checkpoint")
    s.add_argument("models", nargs="+", metavar="MODEL",
                   help="checkpoint directories (at least 2) of one architecture and tokenizer, e.g. RUN-at5000 RUN")
    s.add_argument("--out", required=True,
                   help="output directory (refused if it holds files orl did not write or a training run, or is, "
                        "holds or lies inside an input)")
    s.add_argument("--weights", type=weights_arg, default=None,
                   help="one positive weight per MODEL, comma-separated (normalised to sum 1; default: equal)")
    s.set_defaults(func=cmd_average)
