"""`orl demo`: the shipped base dLLM vs its ORL post-trained version on held-out prompts, side by
side (accuracy in %, TPF as a ratio of sums with and without EOS, tokens/s at batch 1, same decoder;
the accuracy difference with its paired McNemar p), then one example's denoising step by step.

The prompts come from the families the base checkpoint was trained on (orl.eval.tasks.trained_tasks,
the families ORL rolls out on), so a length-varied base is shown on held-out prompts in its training
range and beyond it."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import torch

from orl.checkpoint import read_manifest, recorded_path, recorded_verifier
from orl.cli_format import format_step
from orl.engine import BlockEvent, DecodeConfig, DoneEvent, Engine, StepEvent
from orl.engine.ar import ARConfig, ARDecoder
from orl.engine.stops import with_stop
from orl.eval import metrics
from orl.eval.tasks import BEYOND, Sample, get_task, trained_tasks
from orl.eval.tasks.sized import Sized

# the v7 families' longest beyond-range answers run to 7 blocks of 16 (long7xp at 28 digits)
SIZED_MAX_NEW_TOKENS = 112
SPEC_GROUPS = 3  # the fused decoder's draft groups a round, as the length-varied bases are measured (lengths_eval.sh)
SPEC_TOKENS = 8  # and its drafted tokens a round


def default_spec_tokens(manifest: dict) -> int:
    """SPEC_TOKENS for a block-diffusion base pretrained with a next-token loss beside its diffusion loss (recipe
    ar_aux > 0: its AR path verifies), the decoder such a base is measured with (its parallel path alone is far less
    accurate: docs/RESULTS.md, session 46); a post-trained model (ORL) inherits its recorded base's; else 0, the
    threshold decoder."""
    if manifest.get("objective") != "block_diffusion":
        return 0
    base = _recorded_base((manifest.get("recipe") or {}).get("base"))
    return SPEC_TOKENS if _trained_ar_path(manifest) or (base is not None and _trained_ar_path(base)) else 0


def _trained_ar_path(manifest: dict) -> bool:
    return (((manifest.get("recipe") or {}).get("config") or {}).get("ar_aux") or 0) > 0


def _recorded_base(path) -> dict | None:
    """The manifest of a recipe's recorded base (as given, or relative to the repository: checkpoints/...), if
    it is there."""
    if not isinstance(path, str) or not path:
        return None
    for d in (recorded_path(path), Path(path)):  # the repository's first (orl.checkpoint.recorded_path)
        if (d / "orl.json").is_file():
            return json.loads((d / "orl.json").read_text())
    return None


def spec_groups(spec_tokens: int) -> int:
    """Draft groups a round: SPEC_GROUPS, at most the 2K the fused decoder takes (ARConfig.validate)."""
    return min(SPEC_GROUPS, 2 * spec_tokens)


def drafted(spec_tokens: int) -> str:
    return f"{spec_tokens} drafted token{'s' * (spec_tokens != 1)}"


def length_varied(name: str) -> bool:
    """Whether a family (or its k-shot form, "<family>:<k>shot") has sizes beyond its training range."""
    return isinstance(get_task(name.split(":")[0]), Sized)


def demo_samples(families: list[str], per_task: int) -> list[Sample]:
    """per_task held-out prompts of each family, and as many beyond its training range where it has one."""
    if per_task < 1:
        raise ValueError(f"per_task must be >= 1, got {per_task}")
    splits = lambda t: ("heldout", BEYOND) if length_varied(t) else ("heldout",)  # noqa: E731
    return [get_task(t).sample(split, i) for t in families for split in splits(t) for i in range(per_task)]


def demo_budget(samples: list[Sample], context: int, block_len: int) -> int:
    """New tokens a prompt may take: 64, or enough for the longest beyond-range answer when there is one,
    cut to the whole blocks the model's context leaves after the longest prompt (in characters: a bound
    on a character model's tokens)."""
    want = SIZED_MAX_NEW_TOKENS if any(s.split == BEYOND for s in samples) else 64
    room = (context - max(len(s.prompt) for s in samples)) // block_len * block_len
    return max(min(want, room), block_len)


def score(decoder: Engine | ARDecoder, cfg: DecodeConfig | ARConfig, samples: list[Sample]) -> dict:
    """Accuracy (and the verdict of each sample), pooled TPF with and without EOS, mean tokens/s at batch 1."""
    decoder.generate(samples[0].prompt, with_stop(cfg, get_task(samples[0].task).stop))  # warm-up, untimed
    ok, recs, tps = [], [], []
    for s in samples:
        g = decoder.generate(s.prompt, with_stop(cfg, get_task(s.task).stop))[0]  # k-shot tasks stop at the newline
        ok.append(get_task(s.task).verify(s.prompt, g.text))
        recs.append({"n_tokens": g.n_tokens, "finished": g.finished, "stop": g.stop, "token_ids": g.token_ids,
                     "forwards": {"step": g.step_forwards, "commit": g.commit_forwards}})
        tps.append(g.tokens_per_s)
    tpf = metrics.pooled_tpf(recs)  # a ratio of sums over the prompts, DESIGN section 5
    return {"acc": sum(ok) / len(ok), "ok": ok, "tpf": tpf["tpf"], "tpf_no_eos": tpf["tpf_no_eos"],
            "tok_s": metrics.mean(tps), "token_ids": [r["token_ids"] for r in recs]}


def fused_decoder(engine: Engine, path: Path, spec_tokens: int, max_new_tokens: int) -> tuple[ARDecoder, ARConfig]:
    """The checkpoint's AR path verifying its own diffusion path's drafts, built as `orl eval --spec-draft fused`
    builds it (a draft-only checkpoint is verified by the base its recipe records)."""
    from orl.verifier import attach_self_draft

    model = attach_self_draft(engine.model, engine.manifest, path, engine.tokenizer, None, None, "fused")
    cfg = ARConfig(max_new_tokens=max_new_tokens, spec_tokens=spec_tokens, spec_draft="fused",
                   spec_groups=spec_groups(spec_tokens)).validate()
    return ARDecoder(model, engine.tokenizer, manifest=engine.manifest), cfg


def drafter_for(path: str | Path, base: str | Path) -> Path:
    """A draft-only drafter whose recorded verifier is `base` (the same directory): its fused decoding emits the
    base's tokens, so the demo can show it beside the base; anything else is refused by name."""
    verifier = recorded_verifier(read_manifest(path)).get("base")
    if not verifier:
        raise ValueError(f"--drafter {path} records no verifier (orl.json recipe.verifier): give a draft-only drafter "
                         "(orl train --recipe draft --set draft_only=true)")
    if recorded_path(verifier).resolve() != Path(base).resolve():
        raise ValueError(f"--drafter {path} drafts for {verifier}, not for the base {base}: the demo shows a drafter "
                         "beside the base it verifies with")
    return Path(path)


def run_demo(base: str | Path, orl: str | Path | None, per_task: int = 6, threshold: float | None = None,
             example: str | None = None, max_new_tokens: int | None = None, spec_tokens: int | None = None,
             out=None, drafter: str | Path | None = None) -> dict:
    """Both models scored by the threshold decoder, or for spec_tokens K > 0 by the fused self-speculative one
    (each model's diffusion path drafts K tokens, its AR path verifies: the outputs are the AR path's greedy
    ones), the decoder the length-varied bases are measured with (None: default_spec_tokens of the base); the
    example is decoded by the same decoder. orl None or absent: the base alone. out: a text stream (sys.stdout).
    drafter: a draft-only drafter of the base (drafter_for), scored beside it by the fused decoder (the base's
    outputs, its own TPF); not shown under the threshold decoder. threshold: the threshold decoder's (None: 0.9);
    refused beside the fused decoder, which has none."""
    out = sys.stdout if out is None else out  # looked up per call: a redirected sys.stdout (pytest's) is written to
    for given in (base, orl):
        if given is not None and Path(given).is_dir() and recorded_verifier(read_manifest(given)):
            raise ValueError(f"{given} is a draft-only drafter (it decodes only beside the verifier it records): orl "
                             f"demo compares a base with an ORL model of it; decode the drafter with `orl generate "
                             f"--model {given} --spec-draft fused --spec-tokens 8`, or time it with `orl bench "
                             f"--drafter {given} --self-spec-tokens 8`")
    models = {"base": Path(base)}
    if orl is not None and Path(orl).exists():
        models["orl"] = Path(orl)
    else:
        print(f"(no ORL checkpoint{f' at {orl}' if orl else ' given'}: showing the base model only)", file=out)
    engines = {name: Engine.from_checkpoint(path) for name, path in models.items()}
    families = list(trained_tasks(engines["base"].manifest))
    if "orl" in engines and list(trained_tasks(engines["orl"].manifest)) != families:
        raise ValueError(f"the ORL checkpoint {orl} was trained on {', '.join(trained_tasks(engines['orl'].manifest))} "
                         f"and the base {base} on {', '.join(families)}: compare a base with an ORL model of it "
                         "(--orl DIR)")
    if spec_tokens is None:
        spec_tokens = default_spec_tokens(engines["base"].manifest)
    if threshold is not None and spec_tokens:  # silently ignored before
        raise ValueError(f"--threshold {threshold} is the threshold decoder's; this demo scores with the fused "
                         f"self-speculative decoder (--spec-tokens {spec_tokens}), which has none: add --spec-tokens 0")
    threshold = 0.9 if threshold is None else threshold
    draft = drafter_for(drafter, base) if drafter is not None and spec_tokens else None
    samples = demo_samples(families, per_task)
    block_len = DecodeConfig.from_manifest(engines["base"].manifest).block_len
    if max_new_tokens is None:
        max_new_tokens = demo_budget(samples, min(e.max_len for e in engines.values()), block_len)
    # held out and multi-answer: under the threshold decoder the base hesitates between valid answers, where ORL
    # gains (under the fused one both models' AR paths choose, and usually the same tokens)
    judge = None if example else get_task(next((t for t in families if t.startswith("split")), families[0]))
    example = example or judge.sample("heldout", 0).prompt
    rows, cfgs, scorers = {}, {}, {}
    for name, engine in engines.items():
        cfgs[name] = DecodeConfig.from_manifest(engine.manifest, max_new_tokens=max_new_tokens, threshold=threshold)
        scorers[name] = ((engine, cfgs[name]) if not spec_tokens else
                         fused_decoder(engine, models[name], spec_tokens, max_new_tokens))
        with torch.no_grad():
            rows[name] = score(*scorers[name], samples)
    if draft is not None:
        from orl.verifier import drafter_decoder

        cfgs["draft"] = cfgs["base"]
        with torch.no_grad():
            rows["draft"] = score(drafter_decoder(draft), scorers["base"][1], samples)
    _table(rows, cfgs, samples, families, per_task, threshold, spec_tokens, max_new_tokens, out)
    for name, (decoder, cfg) in scorers.items():  # the example, decoded as the table's prompts were
        gen = _example_steps(name, decoder, with_stop(cfg, judge.stop) if judge else cfg, example, out)
        verdict = "" if judge is None else f", {'right' if judge.verify(example, gen.text) else 'wrong'}"
        print(f"  -> {gen.text!r}  ({gen.n_tokens} tokens, {gen.forwards} forwards, TPF {gen.tpf:.2f}{verdict})",
              file=out)
    return rows


def _example_steps(name: str, decoder: Engine | ARDecoder, cfg: DecodeConfig | ARConfig, example: str, out):
    """Print one prompt's decoding as it happens: each denoising step's commits (threshold decoder), or each round's
    text so far and the tokens it added (fused decoder: the AR path's accepted drafts and its own next token)."""
    if isinstance(decoder, ARDecoder):
        print(f"\n{name}: {example!r} round by round, fused self-speculative decoder ({drafted(cfg.spec_tokens)} a "
              "round; +n: the tokens a round writes, its AR path's next token included)", file=out)
        events = decoder.run([decoder.encode(example)], cfg)
    else:
        print(f"\n{name}: {example!r} step by step, threshold {cfg.threshold} ('_' masked, [x] committed at that "
              "step)", file=out)
        events = decoder.stream(example, cfg, steps=True)
    with torch.no_grad():
        for event in events:
            if isinstance(event, StepEvent):
                r = event.record
                line = format_step(decoder.tokenizer, r, event.n_valid, cfg.eos_fill, start=event.start)
                print(f"  block {r.block} step {r.step + 1}: {line}", file=out)
            elif isinstance(event, BlockEvent) and isinstance(decoder, ARDecoder):  # the engine's: its blocks
                print(f"  round {event.block + 1}: {event.text[0]!r}  (+{event.n_valid})", file=out)
            elif isinstance(event, DoneEvent):
                return event.generations[0]
    raise AssertionError("the decoder ended without a DoneEvent")


def _table(rows: dict, cfgs: dict, samples: list[Sample], families: list[str], per_task: int, threshold: float,
           spec_tokens: int, max_new_tokens: int, out) -> None:
    sized = [t for t in families if length_varied(t)]
    what = f"{per_task} per family" + (f", and {per_task} beyond the training range of {', '.join(sized)}"
                                       if sized else "")
    decoder = (f"threshold {threshold}, block {cfgs['base'].block_len}" if not spec_tokens else
               f"fused self-speculative decoder ({drafted(spec_tokens)}, "
               f"{spec_groups(spec_tokens)} groups a round: each model's AR path decides its tokens)")
    print(f"\n{len(samples)} held-out prompts of {', '.join(families)} ({what}), batch 1, at most {max_new_tokens} "
          f"new tokens, {decoder}\n", file=out)
    print(f"{'model':<6} {'residual':<9} {'acc %':>6} {'TPF':>6} {'TPF noEOS':>10} {'tok/s (batch 1)':>16}", file=out)
    for name, r in rows.items():
        residual = cfgs[name].residual if not spec_tokens else "unused"
        print(f"{name:<6} {residual:<9} {100 * r['acc']:>6.1f} {r['tpf']:>6.2f} {r['tpf_no_eos']:>10.2f} "
              f"{r['tok_s']:>16.1f}", file=out)
    if sized:
        for name, r in rows.items():  # the length-varied families only, in range against beyond
            acc = {split: 100 * metrics.mean([ok for ok, s in zip(r["ok"], samples) if s.split == split and
                                              s.task in sized]) for split in ("heldout", BEYOND)}
            print(f"{name:<6} {', '.join(sized)}: in range {acc['heldout']:.1f}%, beyond the training range "
                  f"{acc[BEYOND]:.1f}%", file=out)
    if "orl" in rows:
        b, o = rows["base"], rows["orl"]
        _, only_base, only_orl = metrics.paired_counts(dict(enumerate(b["ok"])), dict(enumerate(o["ok"])))
        print(f"\nORL / base: TPF x{o['tpf'] / b['tpf']:.2f}, tokens/s x{o['tok_s'] / b['tok_s']:.2f}, "
              f"accuracy {100 * (o['acc'] - b['acc']):+.1f} points (paired McNemar p = "
              f"{metrics.mcnemar_exact(only_base, only_orl):.3g}: {only_orl} prompts only ORL gets right, "
              f"{only_base} only the base)", file=out)
    if "draft" in rows:
        b, d = rows["base"], rows["draft"]
        same = sum(x == y for x, y in zip(b["token_ids"], d["token_ids"]))
        print(f"draft = the base verifying a trained drafter's drafts (draft-only: its outputs are the base's): "
              f"identical outputs on {same} of {len(samples)} prompts, TPF x{d['tpf'] / b['tpf']:.2f}, tokens/s "
              f"x{d['tok_s'] / b['tok_s']:.2f} (a forward runs both weight sets)", file=out)
    pooled = " (acc % pools every prompt above)" if sized else ""
    if not spec_tokens:
        print("TPF = all tokens incl. EOS / all forwards (denoising + commit) over these prompts; noEOS without the "
              f"EOS tokens; tok/s = mean over prompts, one at a time, warm-up excluded{pooled}.", file=out)
    else:
        print("TPF = all tokens incl. EOS / all forwards (one a round: the verify forward carries the next draft) over these "
              f"prompts; noEOS without the EOS tokens; tok/s = mean over prompts, one at a time, warm-up "
              f"excluded{pooled}.", file=out)
    if not spec_tokens and any(r["tpf"] < 1 for r in rows.values()):
        print("TPF < 1: commit forwards count too (one between blocks unless fused into the next block's first "
              "step), so one token per denoising step ends below 1.", file=out)
