"""Session 41 diagnostic for issue 21's TPF question: is the pos_stretch stage 2's diffusion loss high on the
contiguous positions inference uses, or only on the stretched rows it also trained on? Scores a stage-2
checkpoint's block-diffusion loss (no AR rows) on the same training-distribution batches twice, once with every
row contiguous (pos_stretch 0) and once with every row stretched (pos_stretch 1, up to 2x); the batches differ only
in positions (stretch_positions is drawn last). No gradients, no optimizer.

    python docs/results-lengths/s41/stretch_loss.py RUN [RUN ...] [--steps N]
"""
from __future__ import annotations

import argparse
import dataclasses

import torch

from orl.checkpoint import load_checkpoint
from orl.overrides import apply_overrides
from orl.presets import get_preset
from orl.train.batches import weighted_ce_sum
from orl.train.pretrain import active_tasks, make_batches

SETS = ["tasks=long7xp,prog7xp,long7xph,prog7xph,long7xpf", "mix=12,12,6,6,6", "ar_steps=7000",
        "diffusion_steps=3000", "layout=absolute_grid", "model.attn_logn=false"]  # stage2_40.sh's config


def losses(model, tok, cfg, steps: range) -> dict[str, float]:
    num: dict[str, float] = {}
    den: dict[str, float] = {}
    tasks = active_tasks(cfg)
    for step in steps:
        for name, b in zip(tasks, make_batches(cfg, tok, step)):  # the tasks' own diffusion rows (aux rows last)
            with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
                logits = model(b.tokens, b.pos, b.mask, read_from=b.read_from)
            num[name] = num.get(name, 0.0) + float(weighted_ce_sum(logits.float(), b))
            den[name] = den.get(name, 0.0) + float(b.weight.sum())
    return {k: num[k] / den[k] for k in num}


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("runs", nargs="+")
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--first", type=int, default=9000, help="step numbers to draw (stage-2 steps)")
    a = ap.parse_args()
    torch.set_num_threads(1)
    base = apply_overrides(get_preset("pretrain", "tiny_base7h"), SETS, None)
    plain = dataclasses.replace(base, pos_stretch=0.0, ar_aux=0.0)
    stretched = dataclasses.replace(base, pos_stretch=1.0, pos_stretch_max=2.0, ar_aux=0.0)
    steps = range(a.first, a.first + a.steps)
    print("| run | rows | " + " | ".join(active_tasks(plain)) + " | mean |")
    print("|---|---|" + "---:|" * (len(active_tasks(plain)) + 1))
    for run in a.runs:
        model, tok, _ = load_checkpoint(run)
        model.eval()
        for label, cfg in (("contiguous", plain), ("stretched <=2x", stretched)):
            d = losses(model, tok, cfg, steps)
            print(f"| {run.rstrip('/').split('/')[-1]} | {label} | " + " | ".join(f"{v:.3f}" for v in d.values())
                  + f" | {sum(d.values()) / len(d):.3f} |")
