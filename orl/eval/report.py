"""`orl report`: tables (CSV + markdown), PNG plots and one self-contained HTML page, built only from
evaluation records. Every number comes from orl.eval.metrics over the records' stored fields; headers
and units from orl.eval.tables (accuracy in %, TPF a ratio of sums, tok/s next to its batch size).

The report opens with the headline comparison (orl.eval.headline): a reference model (--baseline, else
the first model of the first records file) against each other one on the samples both evaluated, per
family: accuracy, difference, McNemar p, TPF with its spread over prompt seeds.

Outputs in --out: headline.csv, summary.csv (per model, decoder, task, threshold), overall.csv (tasks
pooled), aup.csv (one row per model/decoder curve and task; y_max = best accuracy of any curve on that
task), steps.csv (per model, decoder and threshold: how many blocks took 1, 2, ..., 7, >= 8 denoising
steps), accuracy_vs_tpf.png, accuracy_vs_tokens_per_s.png, tpf_per_task.png, steps_per_block.png,
training_curves.png when post-training logs are given (--train-logs, orl.eval.curves), report.md
(links the PNGs) and report.html (PNGs embedded as base64). An --out holding files of these names is
written only when it is an earlier orl report (check_out): a user's summary.csv is never replaced.
"""
from __future__ import annotations

import base64
import html
import os
from collections import Counter, defaultdict
from collections.abc import Callable
from pathlib import Path

from orl.eval import metrics
from orl.eval.curves import plot_training_curves, read_log
from orl.eval.headline import block_notes, block_rows, compare, headline_text
from orl.eval.plots import plot_accuracy, plot_steps_hist, plot_tpf_per_task
from orl.eval.records import group_value, read_records, separate_configs
from orl.eval.tables import EVAL_SUMMARY, SUMMARY, display, expand, html_table, markdown_table, notes, text_table, write_csv

CURVE = ("model", "decoder")
TASK_ROWS = (*CURVE, "task", "threshold")
POOLED = "all"


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


def with_pooled(records: list[dict]) -> list[dict]:
    """Per task rows, each decoder point followed by its pooled row (task "all": every sample of the
    point, TPF again a ratio of sums, not a mean of the task rows)."""
    rows = summarize(records, TASK_ROWS) + [{**r, "task": POOLED} for r in summarize(records, (*CURVE, "threshold"))]
    tau = lambda t: -1.0 if t is None else t  # noqa: E731
    return sorted(rows, key=lambda r: (r["model"], r["decoder"], tau(r["threshold"]), r["task"] == POOLED, r["task"]))


def eval_summary(records: list[dict]) -> str:
    """The table `orl eval` prints: per task and threshold of each model/decoder, a pooled row per
    point, then what the numbers mean."""
    rows = with_pooled(records)
    return "\n".join([text_table(display(rows, expand(EVAL_SUMMARY, rows))), *notes(rows)])


PLOTS = {"accuracy_vs_tpf.png": "Accuracy vs TPF", "accuracy_vs_tokens_per_s.png": "Accuracy vs tokens/s",
         "tpf_per_task.png": "TPF per task", "steps_per_block.png": "Steps per block"}
TITLES = {"headline": "Headline", "summary": "Per task and threshold", "overall": "All tasks pooled",
          "aup": "AUP (accuracy under parallelism)", "steps": "Denoising steps per block (blocks per count)"}

OUTPUTS = ("headline.csv", *(f"{n}.csv" for n in TITLES if n != "headline"), *PLOTS, "training_curves.png",
           "report.md", "report.html")
MARKER = ".orl_report"  # written before any output: a directory holding it is orl's report directory
HTML_HEAD = "<!doctype html><html><head><meta charset='utf-8'><title>orl evaluation report</title>"


def check_out(d: Path) -> None:
    """--out may be new, hold no file of a report's names, or hold an earlier report (its report.html is
    orl's, or its MARKER is there): a file of those names that orl did not write (a summary.csv or
    report.md of the user's) is never replaced - the report is refused before anything is written."""
    if d.exists() and not d.is_dir():
        raise ValueError(f"--out {d} is a file; give the report a directory")
    clash = [n for n in OUTPUTS if (d / n).exists()]
    if not clash:
        return
    page = d / "report.html"
    try:
        with open(page, "rb") as f:
            ours = page.is_file() and f.read(len(HTML_HEAD)) == HTML_HEAD.encode()
    except OSError:
        ours = False
    ours = ours or (d / MARKER).is_file()  # a report that stopped before its page was written
    if not ours:
        raise ValueError(f"--out {d} holds {', '.join(clash)}, which orl report did not write (no orl report.html "
                         "there); refusing to replace them: choose a new directory")


def split_of(record: dict) -> str:
    """A record's prompt split: its field, else the middle of its prompt id (task/split/index)."""
    parts = str(record.get("prompt_id", "")).split("/")
    return record.get("split") or (parts[1] if len(parts) == 3 else "(none)")


def choose_split(records: list[dict], split: str | None) -> list[dict]:
    """The records of one prompt split (`--split`; "all" pools them). Records of several splits and no
    choice are refused: one accuracy over in-range and beyond-the-range lengths (issue 21's eval writes
    both to one file) describes neither, and a curve would join points of different prompts."""
    if split == "all":
        return records
    present = sorted({split_of(r) for r in records})
    if split is None:
        if len(present) > 1:
            raise ValueError(f"the records hold the splits {', '.join(present)}: pass --split with one of them "
                             "(or --split all to pool them)")
        return records
    kept = [r for r in records if split_of(r) == split]
    if not kept:
        raise ValueError(f"--split {split}: no records of that split (the records hold {', '.join(present)})")
    return kept


def build_report(paths: list[str | os.PathLike], out: str | os.PathLike, train_logs: list[str | os.PathLike] = (),
                 baseline: str | None = None, threshold: float = 0.9,
                 echo: Callable[[str], None] | None = None, split: str | None = None) -> Path:
    """Write the report; echo (e.g. print) receives the headline comparison text. split: see choose_split."""
    records = read_records(paths)
    if not records:
        raise ValueError("the records files hold no records")
    records = separate_configs(choose_split(records, split))
    for log in train_logs:  # read before anything is written: a bad log left a partial report behind
        read_log(log)
    d = Path(out)
    check_out(d)
    d.mkdir(parents=True, exist_ok=True)
    (d / MARKER).touch()
    task_rows = summarize(records, TASK_ROWS)
    pooled = summarize(records, (*CURVE, "threshold"))
    blocks = compare(records, baseline, threshold)
    if echo is not None:
        echo(headline_text(blocks))
    tables = {"summary": task_rows, "overall": pooled, "aup": aup_rows(task_rows, pooled), "steps": steps_rows(records)}
    shown = {"summary": expand(SUMMARY, task_rows), "overall": expand(SUMMARY, pooled)}
    head_rows = [{"A": f"{b['a'][0]} / {b['a'][1]}", "B": f"{b['b'][0]} / {b['b'][1]}", **row}
                 for b in blocks for row in block_rows(b)]
    write_csv(d / "headline.csv", head_rows or [{"A": "", "B": ""}])
    for name, rows in tables.items():
        write_csv(d / f"{name}.csv", display(rows, exact=True))
    both = task_rows + [{**r, "task": POOLED} for r in pooled]
    plot_accuracy(both, "tpf", "tokens per forward (TPF, ratio of sums)", d / "accuracy_vs_tpf.png")
    plot_accuracy(both, "tokens_per_s", f"tokens/s (batch {_batches(records)})", d / "accuracy_vs_tokens_per_s.png")
    plot_tpf_per_task(task_rows, d / "tpf_per_task.png")
    plot_steps_hist(records, d / "steps_per_block.png")
    plots = dict(PLOTS)
    if train_logs:
        plot_training_curves(list(train_logs), d / "training_curves.png")
        plots["training_curves.png"] = "Post-training curves"

    sources = ", ".join(str(p) for p in paths) + ("" if split is None else f" (split {split})")
    sources = ", ".join([sources, *(str(p) for p in train_logs)])
    shown_tables = {n: display(rows, shown.get(n)) for n, rows in tables.items()}
    table_notes = {n: notes(rows) for n, rows in (("summary", task_rows), ("overall", pooled))}
    head = [(f"{b['b'][0]} (B) vs {b['a'][0]} (A)", block_rows(b), block_notes(b)) for b in blocks] or \
        [("", [], [headline_text([])])]
    md = [f"# Evaluation report\n\n{len(records)} records from {sources}. Definitions: DESIGN.md section 5 "
          "and orl/eval/metrics.py.\n", "## Headline\n"]
    md += [(f"### {t}\n\n" if t else "") + (markdown_table(rows) + "\n\n" if rows else "") +
           "\n".join(f"- {n}" for n in ns) + "\n" for t, rows, ns in head]
    md += [f"## {TITLES[n]}\n\n{markdown_table(rows)}\n" + "".join(f"\n- {x}" for x in table_notes.get(n, [])) + "\n"
           for n, rows in shown_tables.items()]
    md += [f"## {t}\n\n![{t}]({f})\n" for f, t in plots.items()]
    (d / "report.md").write_text("\n".join(md))

    li = lambda ns: "<ul>" + "".join(f"<li>{html.escape(x)}</li>" for x in ns) + "</ul>"  # noqa: E731
    heads = "".join((f"<h3>{html.escape(t)}</h3>" if t else "") + (html_table(rows) if rows else "") + li(ns)
                    for t, rows, ns in head)
    imgs = "".join(f"<h2>{t}</h2><img alt='{t}' src='data:image/png;base64,"
                   f"{base64.b64encode((d / f).read_bytes()).decode()}'>" for f, t in plots.items())
    tabs = "".join(f"<h2>{TITLES[n]}</h2>{html_table(rows)}{li(table_notes.get(n, []))}" for n, rows in shown_tables.items())
    style = ("body{font-family:sans-serif;margin:2em;max-width:1400px}table{border-collapse:collapse;font-size:13px}"
             "td,th{border:1px solid #ccc;padding:3px 7px;text-align:right}img{max-width:100%}li{font-size:13px}")
    page = (f"{HTML_HEAD}<style>{style}</style></head><body><h1>Evaluation report</h1><p>{len(records)} records from "
            f"{html.escape(sources)}.</p><h2>Headline</h2>{heads}{tabs}{imgs}</body></html>")
    (d / "report.html").write_text(page)
    return d / "report.html"


def _batches(records: list[dict]) -> str:
    return ", ".join(str(b) for b in sorted({r["batch_size"] for r in records}))
