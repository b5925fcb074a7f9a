"""The convert recipe's own held-out eval (orl.train.convert.evaluate) on any checkpoint, in either layout.

    python benchmarks/convert_heldout.py --base ~/.cache/orl/gemma-3-270m --dlm untrained \
        --corpus ~/.cache/orl/corpus/<key> --preset gemma_convert_short --layout absolute_grid --out x.json

The run logs this eval every `eval_every` steps; this script gives its step 0 (--dlm untrained: the AR
weights with the shifted read-out) and any checkpoint under the other layout's rows. Held-out code
windows of the preset's window / context / eval_windows, every answer block fully masked: mean CE,
one-shot token accuracy and whole-block match (argmax of every position from one forward).
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import replace
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from orl.checkpoint import load_checkpoint  # noqa: E402
from orl.model.vocab import special_ids  # noqa: E402
from orl.presets import get_preset  # noqa: E402
from orl.train.convert import evaluate, to_diffusion  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--base", required=True, help="the AR original (for --dlm untrained)")
    ap.add_argument("--dlm", required=True, help="a converted checkpoint, or 'untrained'")
    ap.add_argument("--corpus", required=True, help="the corpus directory (tokens.safetensors: code_heldout)")
    ap.add_argument("--preset", default="gemma_convert_short")
    ap.add_argument("--layout", choices=("prompt_block", "absolute_grid"), required=True)
    ap.add_argument("--windows", type=int, help="held-out windows; default: the preset's eval_windows")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--device", default="cpu", help="cpu | cuda")
    ap.add_argument("--out")
    args = ap.parse_args()
    from safetensors.torch import load_file

    torch.set_num_threads(args.threads)
    cfg = replace(get_preset("convert", args.preset), layout=args.layout)
    cfg = replace(cfg, eval_windows=args.windows or cfg.eval_windows)
    if args.dlm == "untrained":
        model, tok, _ = load_checkpoint(args.base, device=args.device)
        model = to_diffusion(model)
    else:
        model, tok, _ = load_checkpoint(args.dlm, device=args.device)
    streams = {"code_heldout": load_file(Path(args.corpus) / "tokens.safetensors")["code_heldout"]}
    t = time.process_time()
    res = evaluate(model.eval(), streams, cfg, special_ids(tok, model.args.vocab_size), getattr(tok, "bos_id", None))
    out = {"dlm": args.dlm, "preset": args.preset, "layout": args.layout, "device": args.device, **res,
           "cpu_s": round(time.process_time() - t, 1) if args.device == "cpu" else None}
    text = json.dumps(out)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")


if __name__ == "__main__":
    main()
