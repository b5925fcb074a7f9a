"""`orl demo`: the shipped base dLLM vs its ORL post-trained version on held-out prompts, side by
side (accuracy / TPF / tokens/s, batch 1, same decoder), then one example's denoising step by step."""
from __future__ import annotations

import statistics
import sys
from pathlib import Path

import torch

from orl.cli_format import format_step
from orl.engine import DecodeConfig, DoneEvent, Engine, StepEvent
from orl.eval.tasks import get_task, task_names


def _score(engine: Engine, cfg: DecodeConfig, samples) -> dict:
    engine.generate(samples[0].prompt, cfg)  # warm-up, excluded from timings
    ok, tpf, tps = [], [], []
    for s in samples:
        g = engine.generate(s.prompt, cfg)[0]
        ok.append(get_task(s.task).verify(s.prompt, g.text))
        tpf.append(g.tpf)
        tps.append(g.tokens_per_s)
    return {"acc": sum(ok) / len(ok), "tpf": statistics.mean(tpf), "tok_s": statistics.mean(tps)}


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
    print(f"{'model':<6} {'residual':<9} {'accuracy':>9} {'TPF':>6} {'tokens/s':>9}", file=out)
    for name, r in rows.items():
        print(f"{name:<6} {engines[name][1].residual:<9} {r['acc']:>9.1%} {r['tpf']:>6.2f} {r['tok_s']:>9.1f}", file=out)
    if "orl" in rows:
        print(f"\nORL / base: TPF x{rows['orl']['tpf'] / rows['base']['tpf']:.2f}, "
              f"tokens/s x{rows['orl']['tok_s'] / rows['base']['tok_s']:.2f}", file=out)
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
