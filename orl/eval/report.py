"""`orl report`: tables (CSV + markdown), PNG plots and one self-contained HTML page, built only from
evaluation records. Every number comes from orl.eval.metrics over the records' stored fields.

Outputs in --out: summary.csv (per model, decoder, task, threshold), overall.csv (tasks pooled),
aup.csv (one row per model/decoder curve and task; y_max = best accuracy of any curve on that task),
steps.csv (per model, decoder and threshold: how many blocks took 1, 2, ..., 7, >= 8 denoising steps),
accuracy_vs_tpf.png, accuracy_vs_tokens_per_s.png, tpf_per_task.png, steps_per_block.png,
training_curves.png when post-training logs are given (--train-logs, orl.eval.curves), report.md (links
the PNGs) and report.html (PNGs embedded as base64).
"""
from __future__ import annotations

import base64
import csv
import html
import math
import os
from collections import Counter, defaultdict
from pathlib import Path

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from orl.eval import metrics
from orl.eval.curves import plot_training_curves
from orl.eval.records import group_value, read_records

CURVE = ("model", "decoder")
TASK_ROWS = (*CURVE, "task", "threshold")
POOLED = "all"
SHOWN = ("n", "accuracy", "tpf", "tpf_ceiling", "tokens_per_s", "tokens_per_s_median", "latency_p50_s", "latency_p90_s",
         "steps_per_block", "batch_size")


def summarize(records: list[dict], keys: tuple[str, ...]) -> list[dict]:
    return metrics.summarize(records, keys, group_value)


def aup_rows(task_rows: list[dict], pooled_rows: list[dict]) -> list[dict]:
    rows = task_rows + [{**r, "task": POOLED} for r in pooled_rows]
    curves: dict[tuple, list[dict]] = defaultdict(list)
    for r in rows:
        curves[(r["task"], r["model"], r["decoder"])].append(r)
    y_max = defaultdict(float)
    for r in rows:
        y_max[r["task"]] = max(y_max[r["task"]], r["accuracy"])
    out = []
    for (task, model, decoder), pts in sorted(curves.items()):
        out.append({"model": model, "decoder": decoder, "task": task, "points": len(pts),
                    "max_accuracy": max(p["accuracy"] for p in pts), "max_tpf": max(p["tpf"] for p in pts),
                    "aup": metrics.aup([p["tpf"] for p in pts], [p["accuracy"] for p in pts], y_max[task])})
    return out


STEP_BINS = 8  # blocks of >= 8 steps share the last bin


def steps_rows(records: list[dict]) -> list[dict]:
    """Distribution of denoising steps per block over every block of the records, per curve point."""
    groups: dict[tuple, list[int]] = defaultdict(list)
    for r in records:
        groups[tuple(group_value(r, k) for k in (*CURVE, "threshold"))] += r["block_steps"]
    out = []
    for key, steps in sorted(groups.items(), key=lambda kv: tuple(str(k) for k in kv[0])):
        row = dict(zip((*CURVE, "threshold"), key))
        counts = Counter(min(s, STEP_BINS) for s in steps)
        row.update(blocks=len(steps), mean_steps=sum(steps) / max(len(steps), 1))
        row.update({str(b): counts[b] for b in range(1, STEP_BINS)})
        row[f">={STEP_BINS}"] = counts[STEP_BINS]
        out.append(row)
    return out


def _columns(rows: list[dict]) -> list[str]:
    cols: list[str] = []
    for r in rows:
        cols += [c for c in r if c not in cols]
    return cols


def _fmt(v: object) -> str:
    if isinstance(v, float):
        return "nan" if math.isnan(v) else f"{v:.4g}"
    return str(v)


def text_table(rows: list[dict], columns: list[str] | None = None) -> str:
    """Fixed-width table for the terminal."""
    cols = columns or _columns(rows)
    cells = [cols] + [[_fmt(r.get(c, "")) for c in cols] for r in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(cols))]
    return "\n".join("  ".join(c.rjust(w) for c, w in zip(row, widths)) for row in cells)


def markdown_table(rows: list[dict]) -> str:
    cols = _columns(rows)
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(_fmt(r.get(c, "")) for c in cols) + " |" for r in rows]
    return "\n".join(lines)


def html_table(rows: list[dict]) -> str:
    cols = _columns(rows)
    head = "".join(f"<th>{html.escape(c)}</th>" for c in cols)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(_fmt(r.get(c, '')))}</td>" for c in cols) + "</tr>"
                   for r in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def write_csv(path: Path, rows: list[dict]) -> None:
    """Full precision (repr), so values read back equal the computed ones."""
    cols = _columns(rows)
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=cols)
        w.writeheader()
        w.writerows(rows)


def eval_summary(records: list[dict]) -> str:
    """The table `orl eval` prints: per task and threshold of each model/decoder."""
    rows = summarize(records, TASK_ROWS)
    cols = [*TASK_ROWS, "n", "accuracy"] + [c for c in _columns(rows) if c.startswith("pass@")] + \
        ["tpf", "tpf_ceiling", "tokens_per_s", "steps_per_block", "batch_size"]
    return text_table(rows, cols)


def _tau(threshold: float | None) -> str:
    return "-" if threshold is None else f"{threshold:g}"  # None: a decoder without a threshold (AR)


def _save(fig: Figure, path: Path) -> None:
    FigureCanvasAgg(fig)
    fig.savefig(path, dpi=110, bbox_inches="tight")


def _series(rows: list[dict]) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = defaultdict(list)
    for r in rows:
        out[f"{r['model']} / {r['decoder']}"].append(r)
    return {k: sorted(v, key=lambda r: r["tpf"]) for k, v in sorted(out.items())}


def plot_accuracy(rows: list[dict], x: str, xlabel: str, path: Path) -> None:
    """One panel per task (and all tasks pooled), one curve per model/decoder, points labelled by tau."""
    tasks = sorted({r["task"] for r in rows})
    n = len(tasks)
    ncols = min(3, n)
    fig = Figure(figsize=(4.2 * ncols, 3.4 * math.ceil(n / ncols)))
    for i, task in enumerate(tasks):
        ax = fig.add_subplot(math.ceil(n / ncols), ncols, i + 1)
        for label, pts in _series([r for r in rows if r["task"] == task]).items():
            pts = sorted(pts, key=lambda r: r[x])
            ax.plot([p[x] for p in pts], [p["accuracy"] for p in pts], marker="o", label=label)
            for p in pts:
                ax.annotate(_tau(p["threshold"]), (p[x], p["accuracy"]), fontsize=7,
                            textcoords="offset points", xytext=(3, 3))
        ax.set(title=task, xlabel=xlabel, ylabel="accuracy", ylim=(-0.03, 1.03))
        ax.grid(alpha=0.3)
    fig.axes[0].legend(fontsize=7)
    fig.tight_layout()
    _save(fig, path)


def plot_tpf_per_task(rows: list[dict], path: Path) -> None:
    tasks = sorted({r["task"] for r in rows})
    series = sorted({(r["model"], r["decoder"], r["threshold"]) for r in rows},
                    key=lambda k: (k[0], k[1], -1.0 if k[2] is None else k[2]))
    width = 0.8 / len(series)
    fig = Figure(figsize=(max(6.0, 1.2 * len(tasks) + 0.25 * len(series)), 3.6))
    ax = fig.add_subplot()
    for j, (model, decoder, tau) in enumerate(series):
        by_task = {r["task"]: r["tpf"] for r in rows if (r["model"], r["decoder"], r["threshold"]) == (model, decoder, tau)}
        xs = [i + j * width for i, t in enumerate(tasks) if t in by_task]
        ax.bar(xs, [by_task[t] for t in tasks if t in by_task], width, label=f"{model} / {decoder} tau={_tau(tau)}")
    ax.set_xticks([i + 0.4 - width / 2 for i in range(len(tasks))], tasks)
    ax.set(ylabel="mean TPF", title="tokens per forward by task")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1))
    fig.tight_layout()
    _save(fig, path)


def plot_steps_hist(records: list[dict], path: Path) -> None:
    series: dict[str, list[int]] = defaultdict(list)
    for r in records:
        key = f"{group_value(r, 'model')} / {group_value(r, 'decoder')} tau={_tau(r['decode']['threshold'])}"
        series[key] += r["block_steps"]
    top = max((s for v in series.values() for s in v), default=1)
    fig = Figure(figsize=(6.5, 3.6))
    ax = fig.add_subplot()
    for label, steps in sorted(series.items()):
        ax.hist(steps, bins=[b - 0.5 for b in range(1, top + 2)], histtype="step", density=True, label=label)
    ax.set(xlabel="denoising steps per block", ylabel="fraction of blocks", title="steps per block")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1))
    fig.tight_layout()
    _save(fig, path)


PLOTS = {"accuracy_vs_tpf.png": "Accuracy vs TPF", "accuracy_vs_tokens_per_s.png": "Accuracy vs tokens/s",
         "tpf_per_task.png": "TPF per task", "steps_per_block.png": "Steps per block"}


def build_report(paths: list[str | os.PathLike], out: str | os.PathLike,
                 train_logs: list[str | os.PathLike] = ()) -> Path:
    records = read_records(paths)
    if not records:
        raise ValueError("the records files hold no records")
    d = Path(out)
    d.mkdir(parents=True, exist_ok=True)
    task_rows = summarize(records, TASK_ROWS)
    pooled = summarize(records, (*CURVE, "threshold"))
    aups = aup_rows(task_rows, pooled)
    tables = {"summary": task_rows, "overall": pooled, "aup": aups, "steps": steps_rows(records)}
    for name, rows in tables.items():
        write_csv(d / f"{name}.csv", rows)
    both = task_rows + [{**r, "task": POOLED} for r in pooled]
    plot_accuracy(both, "tpf", "tokens per forward (TPF)", d / "accuracy_vs_tpf.png")
    plot_accuracy(both, "tokens_per_s", "tokens/s", d / "accuracy_vs_tokens_per_s.png")
    plot_tpf_per_task(task_rows, d / "tpf_per_task.png")
    plot_steps_hist(records, d / "steps_per_block.png")
    plots = dict(PLOTS)
    if train_logs:
        plot_training_curves(list(train_logs), d / "training_curves.png")
        plots["training_curves.png"] = "Post-training curves"

    sources = ", ".join(str(p) for p in [*paths, *train_logs])
    titles = {"summary": "Per task and threshold", "overall": "All tasks pooled", "aup": "AUP (accuracy under parallelism)",
              "steps": "Denoising steps per block (blocks per count)"}
    md = [f"# Evaluation report\n\n{len(records)} records from {sources}. Definitions: DESIGN.md section 5 "
          "and orl/eval/metrics.py.\n"]
    md += [f"## {titles[n]}\n\n{markdown_table(rows)}\n" for n, rows in tables.items()]
    md += [f"## {t}\n\n![{t}]({f})\n" for f, t in plots.items()]
    (d / "report.md").write_text("\n".join(md))

    imgs = "".join(f"<h2>{t}</h2><img alt='{t}' src='data:image/png;base64,"
                   f"{base64.b64encode((d / f).read_bytes()).decode()}'>" for f, t in plots.items())
    tabs = "".join(f"<h2>{titles[n]}</h2>{html_table(rows)}" for n, rows in tables.items())
    style = ("body{font-family:sans-serif;margin:2em;max-width:1400px}table{border-collapse:collapse;font-size:13px}"
             "td,th{border:1px solid #ccc;padding:3px 7px;text-align:right}img{max-width:100%}")
    page = (f"<!doctype html><html><head><meta charset='utf-8'><title>orl evaluation report</title>"
            f"<style>{style}</style></head><body><h1>Evaluation report</h1><p>{len(records)} records from "
            f"{html.escape(sources)}.</p>{tabs}{imgs}</body></html>")
    (d / "report.html").write_text(page)
    return d / "report.html"
