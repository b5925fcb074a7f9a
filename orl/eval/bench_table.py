"""`orl bench`'s table: the systems' labels, the columns, the notes under the table, and its markdown
(orl.eval.bench runs the systems)."""
from __future__ import annotations

import platform
import time
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from orl.engine import DecodeConfig
    from orl.eval.bench_spec import BenchSpec, System

LABELS = {"a": "(a) dLLM base, dlmrt", "b": "(b) dLLM + ORL, dlmrt", "c": "(c) LLaDA-reference loop (base)",
          "d": "(d) prefix-cache loop (base)", "e": "(e) AR, orl.engine.ar", "f": "(f) AR, transformers generate",
          "g": "(g) AR + prompt-lookup speculative, orl.engine.ar",
          "h": "(h) AR + prompt-lookup speculative, transformers generate",
          "i": "(i) dLLM base, self-speculative (AR path verifies)", "j": "(j) dLLM base, fused self-speculative",
          "k": "(k) dLLM base, fused self-speculative, likeliest groups",
          "l": "(l) draft-only drafter, its recorded verifier verifies (fused)"}
COLUMNS = ("system", "n", "tok/s mean (batch 1)", "tok/s median (batch 1)", "TPF", "TPF noEOS", "latency p50 s",
           "latency p90 s", "acc %", "tok/s vs (a)", "TPF vs (a)", "p50 vs (a)")
NOTES = (
    "Peers: (a), (c) and (d) decode the same base model on the same prompts and answer budget and differ only "
    "in the decoding loop ((a) and (d) with the same threshold rule, (c) with LLaDA's fixed schedule): their "
    "tok/s compare loops. (b) is (a)'s engine and settings on the ORL model: (b) vs (a) is what "
    "ORL buys. (e) and (f) are one AR model in two decoders (the same tokens); an AR row and a dLLM row compare "
    "only at matched accuracy.",
    "(g) and (h): (e) and (f) with prompt-lookup speculative decoding (Saxena 2023; no draft model): up to K "
    "tokens copied from the prompt and answer so far after the first earlier occurrence of their last n-gram, "
    "verified in one forward with the next token; greedy, so the same tokens as (e) (tested). TPF = tokens / "
    "target forwards (every verify forward counts; (h): transformers' model calls, its prefill included).",
    "Why a loop can match or beat dlmrt on a CPU: at batch 1 a forward of a small model costs mostly per-op "
    "dispatch, not arithmetic. dlmrt's step is built to be compiled and captured as a CUDA graph (static buffers, "
    "no host syncs, finished rows kept as no-ops, attention over the whole static cache), which costs extra ops "
    "when run eagerly; the prefix-cache loop (d) runs fewer ops per step and attends only to the live prefix. "
    "With --compile, or on a GPU, dlmrt's formulation pays (docs/BENCHMARKS.md).",
    "(i) and (j): the base checkpoint's AR path decodes (its next-token read-out, trained by ar_aux), drafts "
    "come from its diffusion path, so (i) and (j) emit the same tokens as each other, not as (a); every forward "
    "counts, drafts included. (j)'s forwards are (K + 1) + (2K + 1) K tokens long: cheap where a forward is "
    "latency bound (a GPU at batch 1), not on a CPU core. (k) is (j) with only the G groups its draft's own "
    "confidences make likeliest: (K + 1) + G K tokens a forward, the same tokens.",
    "(l): a draft-only checkpoint (trained with its verifier's weights frozen on the clean rows) drafts and the "
    "model its recipe records verifies, in (k)'s fused decoder: the verifier's greedy tokens exactly (an AR "
    "model's: the same tokens as (e) when it is --ar), at the drafter's acceptance; every forward counts.",
    "TPF = all generated tokens up to and including EOS / all forwards (denoising + commit), a ratio of sums over "
    "the prompts; noEOS without the EOS tokens; acc % = percent of prompts the task's verifier accepts.",
)
TPF_BELOW_1 = ("TPF < 1 ({rows}): forwards that yield no counted token count too: the forwards between blocks "
               "(dlmrt's commit, (d)'s cache refresh), and the loops' steps on the positions after EOS in its "
               "block (dlmrt fills them with EOS at once).")


def _num(x: float) -> str:
    return f"{x:.0f}" if abs(x) >= 1e4 else f"{x:.4g}"


def _drafter_head(spec: BenchSpec) -> str:
    if not spec.drafter:
        return "drafter -"
    from orl.checkpoint import read_manifest, recorded_verifier

    verifier = recorded_verifier(read_manifest(spec.drafter)).get("base")
    k, g = spec.self_spec_tokens, spec.self_spec_groups
    return f"(l) drafter `{spec.drafter}` verified by `{verifier}`, {g if 0 < g <= 2 * k else 'all'} groups"


def format_table(spec: BenchSpec, cfg: DecodeConfig, rows: dict[str, dict], systems: dict[str, System | str],
                 n_prompts: int) -> str:
    cpu = platform.processor() or platform.machine()
    device = torch.cuda.get_device_name() if spec.device.startswith("cuda") else cpu
    head = [f"## orl bench {time.strftime('%Y-%m-%d %H:%M:%S')}", "",
            f"base `{spec.base}`, orl `{spec.orl or '-'}`, ar `{spec.ar or '-'}`; {n_prompts} prompts "
            f"(tasks {','.join(spec.tasks)}, {spec.split}, limit {spec.limit}/task, seed {spec.seed}); "
            f"batch 1, greedy, max_new_tokens {spec.max_new_tokens}; tau {spec.threshold}, "
            f"block_len {cfg.block_len} (base), "
            f"chunk_steps {spec.chunk_steps} (dlmrt) / {spec.ar_chunk_steps} (AR), compile {spec.compile}; "
            f"AR speculative: prompt lookup K {spec.ar_spec_tokens}, n-gram {spec.ar_spec_ngram}; "
            f"self-speculative K {spec.self_spec_tokens}, (k) {spec.self_spec_groups} groups; "
            f"{_drafter_head(spec)}; "
            f"{spec.device} ({device}, {torch.get_num_threads()} threads); warm-up excluded.", "",
            "| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    lines = []
    for key, label in LABELS.items():
        if key not in rows:
            lines.append(f"| {label} | {systems[key]} |" + " |" * (len(COLUMNS) - 2))
            continue
        r, v = rows[key], rows[key]["vs_a"]
        cells = [label, str(r["n"]), _num(r["tokens_per_s"]), _num(r["tokens_per_s_median"]), f"{r['tpf']:.2f}",
                 f"{r['tpf_no_eos']:.2f}", _num(r["latency_p50_s"]), _num(r["latency_p90_s"]),
                 f"{100 * r['accuracy']:.1f}", f"{v['tokens_per_s']:.3f}", f"{v['tpf']:.3f}", f"{v['latency_p50_s']:.3f}"]
        lines.append("| " + " | ".join(cells) + " |")
    notes = list(NOTES)
    if low := [k for k in LABELS if k in rows and rows[k]["tpf"] < 1]:
        notes.append(TPF_BELOW_1.format(rows=", ".join(f"({k})" for k in low)))
    return "\n".join(head + lines + [""] + [f"- {n}" for n in notes]) + "\n"
