"""`orl demo`: the shipped base dLLM vs its ORL post-trained version on held-out prompts, side by
side (accuracy in %, TPF as a ratio of sums with and without EOS, tokens/s at batch 1, same decoder;
the accuracy difference with its paired McNemar p), then one example's denoising step by step."""
from __future__ import annotations

import sys
from pathlib import Path

import torch

from orl.cli_format import format_step
from orl.engine import DecodeConfig, DoneEvent, Engine, StepEvent
from orl.eval import metrics
from orl.eval.tasks import get_task, task_names


def _score(engine: Engine, cfg: DecodeConfig, samples) -> dict:
    engine.generate(samples[0].prompt, cfg)  # warm-up, excluded from timings
    ok, recs, tps = [], [], []
    for s in samples:
        g = engine.generate(s.prompt, cfg)[0]
        ok.append(get_task(s.task).verify(s.prompt, g.text))
        recs.append({"n_tokens": g.n_tokens, "finished": g.finished,
                     "forwards": {"step": g.step_forwards, "commit": g.commit_forwards}})
        tps.append(g.tokens_per_s)
    tpf = metrics.pooled_tpf(recs)  # a ratio of sums over the prompts, DESIGN section 5
    return {"acc": sum(ok) / len(ok), "ok": ok, "tpf": tpf["tpf"], "tpf_no_eos": tpf["tpf_no_eos"],
            "tok_s": metrics.mean(tps)}


def run_demo(base: str | Path, orl: str | Path, per_task: int = 6,
             threshold: float = 0.9, example: str | None = None, out=sys.stdout) -> dict:
    models = {"base": Path(base)}
    if Path(orl).exists():
        models["orl"] = Path(orl)
    else:
        print(f"(no ORL checkpoint at {orl}: showing the base model only)", file=out)
    samples = [get_task(t).sample("heldout", i) for t in task_names() for i in range(per_task)]
    # held out and multi-answer: the base hesitates between valid answers, which is where ORL gains
    example = example or get_task("split").sample("heldout", 0).prompt
    rows, engines = {}, {}
    for name, path in models.items():
        engine = Engine.from_checkpoint(path)
        engines[name] = (engine, DecodeConfig.from_manifest(engine.manifest, max_new_tokens=64, threshold=threshold))
        with torch.no_grad():
            rows[name] = _score(*engines[name], samples)
    print(f"\n{len(samples)} held-out prompts ({per_task} per task), batch 1, threshold {threshold}, "
          f"block {engines['base'][1].block_len}\n", file=out)
    print(f"{'model':<6} {'residual':<9} {'acc %':>6} {'TPF':>6} {'TPF noEOS':>10} {'tok/s (batch 1)':>16}", file=out)
    for name, r in rows.items():
        print(f"{name:<6} {engines[name][1].residual:<9} {100 * r['acc']:>6.1f} {r['tpf']:>6.2f} {r['tpf_no_eos']:>10.2f} "
              f"{r['tok_s']:>16.1f}", file=out)
    if "orl" in rows:
        b, o = rows["base"], rows["orl"]
        _, only_base, only_orl = metrics.paired_counts(dict(enumerate(b["ok"])), dict(enumerate(o["ok"])))
        print(f"\nORL / base: TPF x{o['tpf'] / b['tpf']:.2f}, tokens/s x{o['tok_s'] / b['tok_s']:.2f}, "
              f"accuracy {100 * (o['acc'] - b['acc']):+.1f} points (paired McNemar p = "
              f"{metrics.mcnemar_exact(only_base, only_orl):.3g}: {only_orl} prompts only ORL gets right, "
              f"{only_base} only the base)", file=out)
    print("TPF = all tokens incl. EOS / all forwards (denoising + commit) over these prompts; noEOS without the "
          "EOS tokens; tok/s = mean over prompts, one at a time, warm-up excluded.", file=out)
    if any(r["tpf"] < 1 for r in rows.values()):
        print("TPF < 1: commit forwards count too (one between blocks unless fused into the next block's first "
              "step), so one token per denoising step ends below 1.", file=out)
    for name, (engine, cfg) in engines.items():
        print(f"\n{name}: {example!r} step by step ('_' masked, [x] committed at that step)", file=out)
        gen = None
        for event in engine.stream(example, cfg, steps=True):
            if isinstance(event, StepEvent):
                r = event.record
                print(f"  block {r.block} step {r.step + 1}: "
                      f"{format_step(engine.tokenizer, r, event.n_valid, cfg.eos_fill)}", file=out)
            elif isinstance(event, DoneEvent):
                gen = event.generations[0]
        print(f"  -> {gen.text!r}  ({gen.n_tokens} tokens, {gen.forwards} forwards, TPF {gen.tpf:.2f})", file=out)
    return rows
