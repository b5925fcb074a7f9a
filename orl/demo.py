"""`orl demo`: the shipped base dLLM vs its ORL post-trained version on held-out prompts, side by
side (accuracy in %, TPF as a ratio of sums with and without EOS, tokens/s at batch 1, same decoder;
the accuracy difference with its paired McNemar p), then one example's denoising step by step.

The prompts come from the families the base checkpoint was trained on (its manifest's recipe, helpers
left out), so a length-varied base is shown on its held-out prompts in range and beyond its range."""
from __future__ import annotations

import sys
from pathlib import Path

import torch

from orl.cli_format import format_step
from orl.engine import DecodeConfig, DoneEvent, Engine, StepEvent
from orl.engine.ar import ARConfig, ARDecoder
from orl.eval import metrics
from orl.eval.tasks import BEYOND, HELPER_NAMES, SUITE, Sample, get_task
from orl.eval.tasks.sized import Sized

# the v7 families' longest beyond-range answers run to 7 blocks of 16 (long7xp at 28 digits)
SIZED_MAX_NEW_TOKENS = 112


def demo_families(manifest: dict) -> list[str]:
    """The families a checkpoint was trained on, without its training-only helpers; tasks v6 if the
    manifest does not say (checkpoints written before recipes recorded their tasks)."""
    tasks = manifest.get("recipe", {}).get("config", {}).get("tasks") or SUITE
    families = [t for t in tasks if t not in HELPER_NAMES]
    if not families:
        raise ValueError(f"the checkpoint's recipe trained only helpers ({', '.join(tasks)}): no family to show")
    return families


def demo_samples(families: list[str], per_task: int) -> list[Sample]:
    """per_task held-out prompts of each family, and as many beyond its training range where it has one."""
    splits = lambda t: ("heldout", BEYOND) if isinstance(get_task(t), Sized) else ("heldout",)  # noqa: E731
    return [get_task(t).sample(split, i) for t in families for split in splits(t) for i in range(per_task)]


def _score(engine: Engine | ARDecoder, cfg: DecodeConfig | ARConfig, samples) -> dict:
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


def demo_budget(samples: list[Sample]) -> int:
    """New tokens a prompt may take: enough for the longest beyond-range answer when there is one."""
    return SIZED_MAX_NEW_TOKENS if any(s.split == BEYOND for s in samples) else 64


def run_demo(base: str | Path, orl: str | Path, per_task: int = 6, threshold: float = 0.9,
             example: str | None = None, max_new_tokens: int | None = None, spec_tokens: int = 0,
             out=sys.stdout) -> dict:
    """spec_tokens K > 0 scores both models with the fused self-speculative decoder instead (each model's
    diffusion path drafts K tokens in its 3 likeliest groups, its AR path verifies: `orl eval --spec-draft
    fused --spec-groups 3`), the decoder the length-varied bases are measured with; the step-by-step
    example stays the threshold decoder's."""
    models = {"base": Path(base)}
    if Path(orl).exists():
        models["orl"] = Path(orl)
    else:
        print(f"(no ORL checkpoint at {orl}: showing the base model only)", file=out)
    engines = {name: Engine.from_checkpoint(path) for name, path in models.items()}
    families = demo_families(engines["base"].manifest)
    samples = demo_samples(families, per_task)
    max_new_tokens = max_new_tokens or demo_budget(samples)
    # held out and multi-answer: the base hesitates between valid answers, which is where ORL gains
    example = example or get_task(next((t for t in families if t.startswith("split")), families[0])
                                  ).sample("heldout", 0).prompt
    rows, cfgs = {}, {}
    for name, engine in engines.items():
        cfgs[name] = DecodeConfig.from_manifest(engine.manifest, max_new_tokens=max_new_tokens, threshold=threshold)
        scorer = (engine, cfgs[name]) if not spec_tokens else (
            ARDecoder(engine.model, engine.tokenizer, manifest=engine.manifest),
            ARConfig(max_new_tokens=max_new_tokens, spec_tokens=spec_tokens, spec_draft="fused", spec_groups=3).validate())
        with torch.no_grad():
            rows[name] = _score(*scorer, samples)
    beyond = [s.split == BEYOND for s in samples]
    what = f"{per_task} per family and split: held out in range and beyond it" if any(beyond) else \
        f"{per_task} per family"
    decoder = (f"threshold {threshold}, block {cfgs['base'].block_len}" if not spec_tokens else
               f"fused self-speculative decoder, {spec_tokens} drafted tokens in 3 groups a round")
    print(f"\n{len(samples)} held-out prompts of {', '.join(families)} ({what}), batch 1, {decoder}\n", file=out)
    print(f"{'model':<6} {'residual':<9} {'acc %':>6} {'TPF':>6} {'TPF noEOS':>10} {'tok/s (batch 1)':>16}", file=out)
    for name, r in rows.items():
        print(f"{name:<6} {cfgs[name].residual if not spec_tokens else 'unused':<9} {100 * r['acc']:>6.1f} {r['tpf']:>6.2f} {r['tpf_no_eos']:>10.2f} "
              f"{r['tok_s']:>16.1f}", file=out)
    if any(beyond):
        for name, r in rows.items():
            acc = {b: 100 * metrics.mean([ok for ok, x in zip(r["ok"], beyond) if x == b]) for b in (False, True)}
            print(f"{name:<6} accuracy in range {acc[False]:.1f}%, beyond the training range {acc[True]:.1f}%", file=out)
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
    for name, engine in engines.items():
        cfg = cfgs[name]
        print(f"\n{name}: {example!r} step by step, threshold {threshold} ('_' masked, [x] committed at that step)",
              file=out)
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
