"""The report's PNG plots, readable with many runs: every panel has its own legend (outside the axes,
so it hides no point), a run keeps one colour and line style in every plot, and thresholds are marker
shapes rather than text labels next to points (which overlap once curves crowd)."""
from __future__ import annotations

import math
from collections import Counter, defaultdict
from pathlib import Path

from matplotlib import colormaps
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.ticker import MaxNLocator

from orl.eval.records import group_value

MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*", "<", ">", "h")
LINESTYLES = ("-", "--", ":", "-.")
LEGEND = dict(fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0.0, frameon=False)


def _tau(threshold: float | None) -> str:
    return "-" if threshold is None else f"{threshold:g}"  # None: a decoder without a threshold (AR)


def _label(r: dict) -> str:
    return f"{r['model']} / {r['decoder']}"


def styles(labels: list[str]) -> dict[str, dict]:
    """label -> colour and line style; tab10 then tab20, line styles cycling past 20 runs."""
    labels = sorted(set(labels))
    cmap = colormaps["tab10" if len(labels) <= 10 else "tab20"]
    return {lab: {"color": cmap(i % cmap.N), "linestyle": LINESTYLES[i // cmap.N % len(LINESTYLES)]}
            for i, lab in enumerate(labels)}


def _markers(taus: list) -> dict:
    order = sorted(set(taus), key=lambda t: -1.0 if t is None else t)
    return {t: MARKERS[i % len(MARKERS)] for i, t in enumerate(order)}


def _save(fig: Figure, path: Path) -> Figure:
    FigureCanvasAgg(fig)
    fig.savefig(path, dpi=110, bbox_inches="tight")
    return fig


def _grid(n: int, legend_rows: int) -> tuple[Figure, int, int]:
    ncols = 1 if n == 1 else 2
    nrows = math.ceil(n / ncols)
    height = max(3.4, 0.16 * legend_rows + 0.8)  # room for the legend beside each panel
    return Figure(figsize=(ncols * 8.2, nrows * height), layout="constrained"), nrows, ncols


def plot_accuracy(rows: list[dict], x: str, xlabel: str, path: Path) -> Figure:
    """One panel per task (and all tasks pooled), one curve per model/decoder, one marker per tau."""
    tasks = sorted({r["task"] for r in rows})
    style = styles([_label(r) for r in rows])
    marks = _markers([r["threshold"] for r in rows])
    fig, nrows, ncols = _grid(len(tasks), len(style) + len(marks) + 1)
    for i, task in enumerate(tasks):
        ax = fig.add_subplot(nrows, ncols, i + 1)
        series: dict[str, list[dict]] = defaultdict(list)
        for r in rows:
            if r["task"] == task:
                series[_label(r)].append(r)
        for label, pts in sorted(series.items()):
            pts = sorted(pts, key=lambda r: r[x])
            ax.plot([p[x] for p in pts], [100 * p["accuracy"] for p in pts], label=label, **style[label])
            for p in pts:
                ax.plot(p[x], 100 * p["accuracy"], marker=marks[p["threshold"]], color=style[label]["color"],
                        linestyle="none", markersize=5)
        handles, labels = ax.get_legend_handles_labels()
        handles += [Line2D([], [], color="0.4", marker=m, linestyle="none") for m in marks.values()]
        labels += [f"tau {_tau(t)}" for t in marks]
        ax.legend(handles, labels, **LEGEND)
        ax.set(title=task, xlabel=xlabel, ylabel="accuracy %", ylim=(-3, 103))
        ax.grid(alpha=0.3)
    return _save(fig, path)


def _by_threshold(items: list, tau_of) -> dict:
    out: dict = defaultdict(list)
    for it in items:
        out[tau_of(it)].append(it)
    return dict(sorted(out.items(), key=lambda kv: -1.0 if kv[0] is None else kv[0]))


def plot_tpf_per_task(rows: list[dict], path: Path) -> Figure:
    """One panel per threshold: TPF (ratio of sums) per task, one bar per model/decoder."""
    panels = _by_threshold(rows, lambda r: r["threshold"])
    tasks = sorted({r["task"] for r in rows})
    style = styles([_label(r) for r in rows])
    fig = Figure(figsize=(max(7.0, 0.9 * len(tasks) + 0.12 * len(tasks) * len(style)) + 3.5,
                          len(panels) * max(3.0, 0.16 * len(style) + 0.8)), layout="constrained")
    for i, (tau, pts) in enumerate(panels.items()):
        ax = fig.add_subplot(len(panels), 1, i + 1)
        labels = sorted({_label(r) for r in pts})
        width = 0.8 / len(labels)
        for j, label in enumerate(labels):
            by_task = {r["task"]: r["tpf"] for r in pts if _label(r) == label}
            xs = [k + j * width for k, t in enumerate(tasks) if t in by_task]
            ax.bar(xs, [by_task[t] for t in tasks if t in by_task], width, label=label, color=style[label]["color"])
        ax.set_xticks([k + 0.4 - width / 2 for k in range(len(tasks))], tasks)
        ax.set(ylabel="TPF (ratio of sums)", title=f"tokens per forward by task, tau {_tau(tau)}")
        ax.axhline(1.0, color="0.5", linewidth=0.6)
        ax.legend(**LEGEND)
    return _save(fig, path)


def plot_steps_hist(records: list[dict], path: Path) -> Figure:
    """One panel per threshold: fraction of blocks decoded in k denoising steps, one line per model/decoder."""
    panels = _by_threshold([r for r in records if r["block_steps"]], lambda r: r["decode"]["threshold"])
    label_of = lambda r: f"{group_value(r, 'model')} / {group_value(r, 'decoder')}"  # noqa: E731
    style = styles([label_of(r) for r in records])
    top = max((s for r in records for s in r["block_steps"]), default=1)
    fig = Figure(figsize=(10.5, max(1, len(panels)) * max(3.0, 0.16 * len(style) + 0.8)), layout="constrained")
    for i, (tau, recs) in enumerate(panels.items()):
        ax = fig.add_subplot(len(panels), 1, i + 1)
        series: dict[str, list[int]] = defaultdict(list)
        for r in recs:
            series[label_of(r)] += r["block_steps"]
        for label, steps in sorted(series.items()):  # lines, not overlapping histogram outlines
            counts = Counter(steps)
            ax.plot(range(1, top + 1), [counts[k] / len(steps) for k in range(1, top + 1)], marker="o", markersize=3,
                    label=label, **style[label])
        ax.set(xlabel="denoising steps per block", ylabel="fraction of blocks", title=f"steps per block, tau {_tau(tau)}")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.legend(**LEGEND)
    return _save(fig, path)
