"""Training curves of post-training runs (ORL and its ablations) from their JSONL logs: the rollouts'
verified share (in %), TPF and steps per block, and the loss terms, per update."""
from __future__ import annotations

import json
import os
from pathlib import Path

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

PANELS = (("rollout_reward", "mean rollout reward %"), ("rollout_tpf", "rollout TPF"),
          ("rollout_steps_per_block", "rollout steps per block"), ("pred", "L_pred"), ("aec", "L_AEC"))


def read_log(path: str | os.PathLike) -> list[dict]:
    """The per-update records of one trainer log (lines without an "update" key are skipped)."""
    rows = []
    try:
        with open(path, encoding="utf-8") as f:
            for n, line in enumerate(f, 1):
                try:
                    rec = json.loads(line)
                except json.JSONDecodeError as e:
                    raise ValueError(f"{path}:{n}: not a JSON line ({e.msg})") from None
                if isinstance(rec, dict) and "update" in rec:
                    rows.append(rec)
    except UnicodeDecodeError as e:
        raise ValueError(f"{path}: not a trainer log (not UTF-8 text: {e})") from None
    if not rows:
        raise ValueError(f"{path} holds no per-update records: is it a trainer log (<run>/train.log.jsonl)?")
    return rows


def smooth(values: list[float], window: int) -> list[float]:
    """Trailing mean over the last `window` values (fewer at the start). Each window is summed afresh: a running
    sum never recovers from a NaN or inf (nan - nan is NaN), which turned the rest of a curve into NaN."""
    return [sum(values[max(0, i + 1 - window): i + 1]) / min(i + 1, window) for i in range(len(values))]


def run_name(path) -> str:
    """A run's label: its directory for `<run>/train.log.jsonl`, else the file name without .log.jsonl."""
    p = Path(path)
    return p.parent.name if p.name == "train.log.jsonl" else p.name.removesuffix(".log.jsonl")


def run_names(paths: list[str | os.PathLike]) -> list[str]:
    """run_name of each log, lengthened by its parent directories where two different logs would share one
    (runs/a/stage1 and runs/b/stage1 -> "a/stage1", "b/stage1"): keyed by the bare name, one run's curves
    replaced the other's. The same file given twice keeps one name."""
    names = [run_name(p) for p in paths]
    parts = [(*Path(p).resolve().parent.parts, *(() if Path(p).name == "train.log.jsonl" else (n,)))
             for p, n in zip(paths, names)]
    out = list(names)
    for name in set(names):
        group = {parts[i]: i for i, n in enumerate(names) if n == name}
        for k in range(2, max(map(len, group)) + 1):
            if len(group) < 2:
                break
            label = {ps: "/".join(ps[-k:]) for ps in group}
            if len(set(label.values())) == len(group):
                for i, n in enumerate(names):
                    if n == name:
                        out[i] = label[parts[i]]
                break
    return out


def plot_training_curves(paths: list[str | os.PathLike], path: Path, window: int = 10) -> Figure:
    """One panel per quantity, one line per log, labelled by the log's file name; every panel has its
    legend beside it, and a log keeps its colour and line style in every panel."""
    from orl.eval.plots import LEGEND, styles

    logs = {name: read_log(p) for name, p in zip(run_names(paths), paths)}
    style = styles(list(logs))
    fig = Figure(figsize=(8.2 * 2, 3 * max(3.0, 0.16 * len(logs) + 0.8)), layout="constrained")
    for i, (key, title) in enumerate(PANELS):
        ax = fig.add_subplot(3, 2, i + 1)
        for label, rows in logs.items():
            pts = [(r["update"], r[key]) for r in rows if key in r]
            if pts:
                scale = 100.0 if key == "rollout_reward" else 1.0  # accuracy-like numbers are shown in %
                ax.plot([u for u, _ in pts], smooth([scale * v for _, v in pts], window), label=label, **style[label])
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("update")
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(**LEGEND)
    fig.suptitle(f"post-training curves (trailing mean over {window} updates)")
    FigureCanvasAgg(fig)
    fig.savefig(path, dpi=110, bbox_inches="tight")
    return fig
