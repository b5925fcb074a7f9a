"""How evaluation numbers are shown: one header and one format per metric, the same in the terminal,
markdown, HTML and CSV, and the notes that explain a table's numbers under it.

Units: accuracy and pass@k in percent of samples (one decimal; CSV keeps full precision), TPF as a
ratio of sums with two decimals, tokens/s next to the batch size it was measured at.
"""
from __future__ import annotations

import csv
import html
import math
from pathlib import Path

# metric key -> (header, kind); kinds: pct (fraction shown in percent), tpf, num, str
COLUMNS: dict[str, tuple[str, str]] = {
    "model": ("model", "str"), "decoder": ("decoder", "str"), "task": ("task", "str"),
    "threshold": ("tau", "tau"), "n": ("n", "str"), "n_prompts": ("prompts", "str"),
    "accuracy": ("acc %", "pct"), "max_accuracy": ("max acc %", "pct"),
    "tpf": ("TPF", "tpf"), "tpf_no_eos": ("TPF noEOS", "tpf"), "tpf_ceiling": ("TPF ceiling", "tpf"),
    "tpf_sample_mean": ("TPF per-sample mean", "tpf"), "max_tpf": ("max TPF", "tpf"),
    "steps_per_block": ("steps/block", "tpf"), "mean_steps": ("steps/block", "tpf"),
    "tokens_per_s": ("tok/s mean", "num"), "tokens_per_s_median": ("tok/s median", "num"),
    "batch_size": ("batch", "str"),
    "latency_p50_s": ("latency p50 s", "num"), "latency_p90_s": ("latency p90 s", "num"),
    "latency_p99_s": ("latency p99 s", "num"), "aup": ("AUP", "num"),
}

# what the terminal and the report's summary tables show, in order: tok/s stands next to its batch
SUMMARY = ("model", "decoder", "task", "threshold", "n", "accuracy", "pass@*", "tpf", "tpf_no_eos", "tpf_ceiling",
           "steps_per_block", "tokens_per_s", "tokens_per_s_median", "batch_size", "latency_p50_s", "latency_p90_s")
EVAL_SUMMARY = tuple(k for k in SUMMARY if k not in ("tokens_per_s_median", "latency_p50_s", "latency_p90_s"))


def spec(key: str) -> tuple[str, str]:
    if key.startswith("pass@"):
        return f"{key} %", "pct"
    return COLUMNS.get(key, (key, "num"))


def _cell(v: object, kind: str, exact: bool) -> object:
    if v is None:
        return "-"
    if kind == "pct" and isinstance(v, (int, float)):
        v = 100.0 * v
        return v if exact else f"{v:.1f}"
    if not isinstance(v, float) or exact:
        return v
    if math.isnan(v):
        return "nan"
    if kind == "tau":
        return f"{v:g}"
    return f"{v:.2f}" if kind == "tpf" else (f"{v:.0f}" if abs(v) >= 1e4 else f"{v:.4g}")


def expand(keys: tuple[str, ...] | list[str], rows: list[dict]) -> list[str]:
    """keys with 'pass@*' replaced by the pass@k columns the rows have, and absent keys dropped."""
    present = [k for r in rows for k in r]
    out: list[str] = []
    for k in keys:
        if k == "pass@*":
            out += [c for c in dict.fromkeys(present) if c.startswith("pass@")]
        elif k in present:
            out.append(k)
    return out


def display(rows: list[dict], keys: list[str] | None = None, exact: bool = False) -> list[dict]:
    """Rows keyed by header, values formatted (exact: numbers kept, percent scaled, for CSV)."""
    keys = keys or list(dict.fromkeys(k for r in rows for k in r))
    return [{spec(k)[0]: _cell(r.get(k), spec(k)[1], exact) for k in keys} for r in rows]


def _headers(rows: list[dict]) -> list[str]:
    return list(dict.fromkeys(k for r in rows for k in r))


def text_table(rows: list[dict]) -> str:
    """Fixed-width table of display() rows."""
    cols = _headers(rows)
    cells = [cols] + [[str(r.get(c, "")) for c in cols] for r in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(cols))]
    return "\n".join("  ".join(c.rjust(w) for c, w in zip(row, widths)) for row in cells)


def markdown_table(rows: list[dict]) -> str:
    cols = _headers(rows)
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(str(r.get(c, "")) for c in cols) + " |" for r in rows]
    return "\n".join(lines)


def html_table(rows: list[dict]) -> str:
    cols = _headers(rows)
    head = "".join(f"<th>{html.escape(c)}</th>" for c in cols)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(str(r.get(c, '')))}</td>" for c in cols) + "</tr>"
                   for r in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def write_csv(path: Path, rows: list[dict]) -> None:
    """display(..., exact=True) rows: full precision (repr), so values read back equal the computed ones."""
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=_headers(rows))
        w.writeheader()
        w.writerows(rows)


def notes(rows: list[dict]) -> list[str]:
    """What the numbers of a summary table mean, and why a TPF below 1 or a batch > 1 looks as it does."""
    out = ["acc % = percent of samples the task's verifier accepts. TPF = all generated tokens up to and "
           "including EOS / all forwards (denoising + commit), a ratio of sums over the row's samples "
           "(not a mean of per-sample TPF); noEOS = the same without the EOS tokens; ceiling = the most any "
           "block decoder could reach on these outputs (one denoising forward per block, plus one commit forward "
           "between blocks unless the commit is fused into the next block's first step)."]
    low = sorted({f"{r.get('task', '')}@{_cell(r.get('threshold'), 'tau', False)}" for r in rows
                  if isinstance(r.get("tpf"), float) and r["tpf"] < 1})
    if low:
        out.append(f"TPF < 1 ({', '.join(low[:6])}{', ...' if len(low) > 6 else ''}): commit forwards count as "
                   "forwards (one between blocks unless fused into the next block's first step), so a decoder that "
                   "commits about one token per denoising step ends below 1 token per forward.")
    if any("tokens_per_s" in r for r in rows):
        batches = sorted({str(r.get("batch_size")) for r in rows})
        out.append(f"tok/s = a sample's tokens / its wall time (request start to its last token, warm-up excluded) "
                   f"at the batch size in 'batch' ({', '.join(batches)}); with batch > 1 that time includes the "
                   "other rows' work, so compare tok/s at equal batch only, and use batch 1 for speed.")
    return out
