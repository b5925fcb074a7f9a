"""What weight quantization costs on the tiny suite (DESIGN section 6): for each shipped model and each
form (fp32, bf16, int8, fp8, nvfp4) -
  bytes     of the saved weights: all of them, and the backbone's linear layers (those quantize
            replaces; with their scales in the quantized forms);
  logits    relative error ||L_q - L|| / ||L|| against fp32 and top-1 agreement, at the masked positions
            of staircase rows (orl.train.batches.diffusion_batch: the noisy block states the model
            denoises) built from held-out prompts and their reference answers;
  accuracy  and TPF (ratio of sums; EOS-free beside it) of `orl eval` at threshold 0.9 on the same
            held-out prompts, with the paired change against fp32 (McNemar exact p on discordant pairs);
  path      the kernel the quantized layers ran ("emulated" = dequantize in software).
Each quantized form is saved and loaded back through the checkpoint manifest before it is measured.

With --gemma (default: the imported gemma-3-270m in $ORL_CACHE when it is there) a second table gives
an autoregressive real model's bytes, next-token logit error and top-1 agreement against its fp32
weights on fixed text (the source of Python's `textwrap` module, --gemma-chunks x 128 tokens); those
forms are quantized in memory (the tiny rows already go through checkpoints).

    .venv/bin/python benchmarks/quant_accuracy.py [--limit 40] [--models checkpoints/orl-tiny-base ...]
                                                  [--gemma DIR | --gemma none]
"""
from __future__ import annotations

import argparse
import inspect
import math
import os
import platform
import tempfile
import time
from pathlib import Path

import torch

from orl.checkpoint import load_checkpoint, save_checkpoint
from orl.cli_quant import CARRIED, quantize_checkpoint
from orl.eval.runner import EvalSpec, run_eval
from orl.eval.tasks import make_samples, task_names
from orl.model.masks import causal
from orl.model.vocab import special_ids
from orl.quant import KINDS, linear_paths, quantize, weight_bytes
from orl.train.batches import diffusion_batch

ROOT = Path(__file__).resolve().parents[1]
MODELS = [ROOT / "checkpoints/orl-tiny-base", ROOT / "checkpoints/orl-tiny-orl"]


def staircase_logits(model, tok, limit: int, seed: int, block_len: int) -> torch.Tensor:
    """Logits [n, V] at the masked positions of one staircase batch per family (same noise every call)."""
    ids = special_ids(tok, model.args.vocab_size)
    out = []
    for name in task_names():
        samples = make_samples(name, "heldout", limit, seed)
        pairs = [(tok.encode(s.prompt), tok.encode(s.answer)) for s in samples]
        b = diffusion_batch(pairs, block_len, ids, torch.Generator().manual_seed(seed))
        with torch.no_grad():
            logits = model(b.tokens, b.pos, b.mask, read_from=b.read_from)
        out.append(logits[b.weight > 0])
    return torch.cat(out)


def mcnemar_p(b: int, c: int) -> float:
    """Exact two-sided McNemar p-value: the discordant pairs under a fair coin."""
    n = b + c
    if n == 0:
        return 1.0
    tail = sum(math.comb(n, i) for i in range(min(b, c) + 1)) / 2 ** n
    return min(1.0, 2 * tail)


def evaluate(directory: Path, out: Path, limit: int, seed: int, batch_size: int) -> dict:
    recs = run_eval(EvalSpec(model=str(directory), out=str(out), limit=limit, thresholds=[0.9], seed=seed,
                             batch_size=batch_size, progress=False))
    forwards = sum(r["forwards"]["step"] + r["forwards"]["commit"] for r in recs)
    tokens = sum(r["n_tokens"] for r in recs)
    answer = sum(r["n_tokens"] - bool(r["finished"]) for r in recs)  # without the EOS
    per_task = {t: sum(r["verdict"] for r in recs if r["task"] == t) / max(1, sum(r["task"] == t for r in recs))
                for t in task_names()}
    return {"verdicts": {r["prompt_id"]: bool(r["verdict"]) for r in recs}, "n": len(recs),
            "acc": sum(r["verdict"] for r in recs) / len(recs), "tpf": tokens / forwards,
            "tpf_answer": answer / forwards, "per_task": per_task}


def measure(model_dir: Path, kinds: list[str], limit: int, seed: int, batch_size: int, work: Path) -> list[dict]:
    ref_model, tok, manifest = load_checkpoint(model_dir)
    block_len = manifest["block_len"]
    ref_logits = staircase_logits(ref_model, tok, limit, seed, block_len)
    rows = []
    for kind in ["fp32", "bf16"] + kinds:
        t0 = time.perf_counter()
        directory = model_dir
        if kind == "bf16":  # the usual unquantized serving dtype, for scale
            keep = {k: manifest[k] for k in CARRIED if k in manifest}
            bf16 = load_checkpoint(model_dir, dtype=torch.bfloat16)[0]
            directory = save_checkpoint(bf16, tok, work / f"{model_dir.name}-bf16", keep)
        elif kind != "fp32":
            directory, _, _ = quantize_checkpoint(str(model_dir), kind, str(work / f"{model_dir.name}-{kind}"))
        model, _, _ = load_checkpoint(directory)  # through the manifest, as every command loads it
        logits = staircase_logits(model, tok, limit, seed, block_len)
        ev = evaluate(directory, work / f"{model_dir.name}-{kind}.jsonl", limit, seed, batch_size)
        rows.append({"model": model_dir.name, "form": kind, "bytes": weight_bytes(model),
                     "path": ", ".join(p.split(":")[1] for p in linear_paths(model, model.model.embed_tokens.weight.dtype)) or "-",
                     "rel_err": float((logits - ref_logits).norm() / ref_logits.norm()),
                     "top1": float((logits.argmax(-1) == ref_logits.argmax(-1)).float().mean()),
                     "n_logits": ref_logits.shape[0], "seconds": time.perf_counter() - t0, **ev})
    base = rows[0]["verdicts"]
    for r in rows:
        b = sum(base[k] and not r["verdicts"][k] for k in base)
        c = sum(r["verdicts"][k] and not base[k] for k in base)
        r.update(lost=b, gained=c, p=mcnemar_p(b, c))
    return rows


def table(rows: list[dict], limit: int) -> str:
    mib = 2**20
    head = ("| model | form | kernel | weights MiB | backbone linears MiB | logit rel. err | top-1 agree | "
            f"accuracy ({limit}/family) | Δ acc (lost/gained, p) | TPF (EOS-free) |")
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    fp32 = {r["model"]: r for r in rows if r["form"] == "fp32"}
    for r in rows:
        f = fp32[r["model"]]
        kept = min(x["bytes"]["other"] for x in rows if x["model"] == r["model"] and x["form"] in KINDS)
        q_mib = r["bytes"]["total"] - kept if r["form"] == "fp32" else r["bytes"]["quantized"]
        if r["form"] == "bf16":
            q_mib = (f["bytes"]["total"] - kept) / 2
        delta = "-" if r["form"] == "fp32" else \
            f"{100 * (r['acc'] - f['acc']):+.1f} pt ({r['lost']}/{r['gained']}, p={r['p']:.2f})"
        lines.append(f"| {r['model']} | {r['form']} | {r['path']} | {r['bytes']['total'] / mib:.2f} | {q_mib / mib:.2f} | "
                     f"{r['rel_err']:.4f} | {100 * r['top1']:.1f}% | {100 * r['acc']:.1f}% | {delta} | "
                     f"{r['tpf']:.2f} ({r['tpf_answer']:.2f}) |")
    return "\n".join(lines)


def gemma_rows(directory: Path, kinds: list[str], chunks: int, seq: int = 128) -> list[dict]:
    import textwrap

    model, tok, _ = load_checkpoint(directory)
    ids = tok.encode(inspect.getsource(textwrap))
    bos = [ids.pop(0)] if getattr(tok, "bos_id", None) is not None else []  # each chunk opens with BOS
    n = seq - len(bos)
    tokens = torch.tensor([bos + ids[i * n:(i + 1) * n] for i in range(chunks)])
    pos, mask = torch.arange(seq).expand(chunks, seq), causal(seq)[None].expand(chunks, seq, seq)

    def next_token_logits(m) -> list[torch.Tensor]:
        with torch.no_grad():  # one chunk at a time: [seq, 262144] fp32 logits are 128 MiB
            return [m(tokens[i:i + 1], pos[i:i + 1], mask[i:i + 1])[0] for i in range(chunks)]

    ref = next_token_logits(model)
    rows = []
    for kind in ["fp32", "bf16"] + kinds:
        t0 = time.perf_counter()
        m = load_checkpoint(directory, dtype=torch.bfloat16)[0] if kind == "bf16" else \
            model if kind == "fp32" else quantize(load_checkpoint(directory)[0], kind)
        got = ref if kind == "fp32" else next_token_logits(m)
        err = sum(float((g - r).pow(2).sum()) for g, r in zip(got, ref)) ** 0.5 / sum(float(r.pow(2).sum()) for r in ref) ** 0.5
        top1 = sum(int((g.argmax(-1) == r.argmax(-1)).sum()) for g, r in zip(got, ref)) / (chunks * seq)
        rows.append({"form": kind, "bytes": weight_bytes(m), "rel_err": err, "top1": top1,
                     "path": ", ".join(p.split(":")[1] for p in linear_paths(m, m.model.embed_tokens.weight.dtype)) or "-",
                     "seconds": time.perf_counter() - t0})
        del m
    return rows


def gemma_table(rows: list[dict]) -> str:
    mib = 2**20
    kept = min(r["bytes"]["other"] for r in rows if r["form"] in KINDS)
    lines = ["| model | form | kernel | weights MiB | backbone linears MiB | next-token logit rel. err | top-1 agree |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        lin = r["bytes"]["quantized"] if r["form"] in KINDS else r["bytes"]["total"] - kept * (1 if r["form"] == "fp32" else 0.5)
        lines.append(f"| gemma-3-270m | {r['form']} | {r['path']} | {r['bytes']['total'] / mib:.1f} | {lin / mib:.1f} | "
                     f"{r['rel_err']:.4f} | {100 * r['top1']:.1f}% |")
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--models", nargs="*", type=Path, default=MODELS)
    p.add_argument("--kinds", nargs="+", choices=KINDS, default=list(KINDS))
    p.add_argument("--limit", type=int, default=40, help="held-out prompts per family")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--gemma", default="auto", help="imported gemma-3-270m directory, 'auto' ($ORL_CACHE) or 'none'")
    p.add_argument("--gemma-chunks", type=int, default=4, help="128-token chunks of text for gemma's logits")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    gemma = Path(os.environ.get("ORL_CACHE") or Path.home() / ".cache/orl") / "gemma-3-270m" \
        if args.gemma == "auto" else None if args.gemma == "none" else Path(args.gemma)
    if gemma is not None and not (gemma / "orl.json").exists():
        print(f"(no gemma-3-270m at {gemma}: `orl fetch gemma-3-270m` imports it; its table is skipped)\n")
        gemma = None
    if gemma is not None:
        g_rows = gemma_rows(gemma, args.kinds, args.gemma_chunks)
        print(gemma_table(g_rows))
        print(f"\n{args.gemma_chunks} x 128 tokens of textwrap.py; {sum(r['seconds'] for r in g_rows):.0f} s\n")
    if not args.models:
        return
    rows = []
    with tempfile.TemporaryDirectory() as work:
        for m in args.models:
            rows += measure(m, args.kinds, args.limit, args.seed, args.batch_size, Path(work))
    print(table(rows, args.limit))
    print(f"\n{len(task_names())} families x {args.limit} held-out prompts (seed {args.seed}), threshold 0.9, "
          f"batch {args.batch_size}, {torch.get_num_threads()} thread(s), torch {torch.__version__}, "
          f"{platform.processor() or platform.machine()}; logits at {rows[0]['n_logits']} masked positions per model; "
          f"{sum(r['seconds'] for r in rows):.0f} s")
    for r in rows:
        print(f"  {r['model']:<14} {r['form']:<6} per family: " +
              ", ".join(f"{t} {100 * a:.0f}%" for t, a in r["per_task"].items()))


if __name__ == "__main__":
    main()
