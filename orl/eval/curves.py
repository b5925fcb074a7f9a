"""Training curves of post-training runs (ORL and its ablations) from their JSONL logs: the rollouts'
verified fraction, TPF and steps per block, and the loss terms, per update."""
from __future__ import annotations

import json
import os
from pathlib import Path

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

PANELS = (("rollout_reward", "verified fraction of rollouts"), ("rollout_tpf", "rollout TPF"),
          ("rollout_steps_per_block", "rollout steps per block"), ("pred", "L_pred"), ("aec", "L_AEC"))


def read_log(path: str | os.PathLike) -> list[dict]:
    """The per-update records of one trainer log (lines without an "update" key are skipped)."""
    rows = []
    with open(path) as f:
        for n, line in enumerate(f, 1):
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as e:
                raise ValueError(f"{path}:{n}: not a JSON line ({e.msg})") from None
            if "update" in rec:
                rows.append(rec)
    if not rows:
        raise ValueError(f"{path} holds no per-update records: is it a trainer log (*.log.jsonl)?")
    return rows


def smooth(values: list[float], window: int) -> list[float]:
    """Trailing mean over the last `window` values (fewer at the start)."""
    out, total = [], 0.0
    for i, v in enumerate(values):
        total += v
        if i >= window:
            total -= values[i - window]
        out.append(total / min(i + 1, window))
    return out


def plot_training_curves(paths: list[str | os.PathLike], path: Path, window: int = 10) -> None:
    """One panel per quantity, one line per log, labelled by the log's file name."""
    logs = {Path(p).name.removesuffix(".log.jsonl"): read_log(p) for p in paths}
    fig = Figure(figsize=(4.2 * 3, 3.2 * 2))
    for i, (key, title) in enumerate(PANELS):
        ax = fig.add_subplot(2, 3, i + 1)
        for label, rows in logs.items():
            pts = [(r["update"], r[key]) for r in rows if key in r]
            if pts:
                ax.plot([u for u, _ in pts], smooth([v for _, v in pts], window), label=label)
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("update")
        ax.grid(alpha=0.3)
    fig.axes[0].legend(fontsize=7)
    fig.suptitle(f"post-training curves (trailing mean over {window} updates)")
    fig.tight_layout(rect=(0, 0, 1, 0.96))
    FigureCanvasAgg(fig)
    fig.savefig(path, dpi=110, bbox_inches="tight")
