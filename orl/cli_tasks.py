"""`orl tasks`: what to type to a model. Lists every task family with its prompt format, an example
prompt and answer, its size knobs and the prompt/answer lengths they give, then what each model was
trained on (its manifest's recipe.config.tasks). Also the `--task-module` / `--tasks-file` flags that
`orl train`, `orl eval`, `orl tasks` and `orl demo` share (tasks of the user's own, docs/TASKS.md).

No weights load: manifests are read as JSON, so the listing takes a second or two.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import math
import shlex
import sys
from pathlib import Path

SHIPPED = Path(__file__).resolve().parent.parent / "checkpoints"
GENERATE_MAX_NEW_TOKENS = 64  # `orl generate`'s default answer budget


def add_task_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--task-module", action="append", default=[], metavar="FILE.py|MODULE",
                   help="register the Task subclasses of a Python file or module for this run (repeatable; "
                        "docs/TASKS.md)")
    p.add_argument("--tasks-file", action="append", default=[], metavar="[NAME=]FILE.jsonl",
                   help="register a JSONL task (prompt, answer(s), checker exact|numeric|regex|python_tests) named "
                        "after the file (repeatable; docs/TASKS.md)")


def load_task_flags(args: argparse.Namespace) -> list[str]:
    """Register the flags' tasks; their names (empty without flags)."""
    modules, files = getattr(args, "task_module", []) or [], getattr(args, "tasks_file", []) or []
    if not modules and not files:
        return []
    from orl.eval.tasks.custom import load_tasks

    return load_tasks(modules, files)


def use_custom_tasks(cfg, preset_cfg, custom: list[str]):
    """With tasks of the user's own and a config whose tasks are still the preset's, the run trains on
    the user's tasks; a config that names its tasks (--set tasks=..., --config) keeps them."""
    if not custom or not hasattr(cfg, "tasks") or tuple(cfg.tasks) != tuple(preset_cfg.tasks):
        return cfg
    changes = {"tasks": tuple(custom)}
    if getattr(cfg, "mix", None) and tuple(cfg.mix) == tuple(preset_cfg.mix):  # counts for the preset's tasks
        changes["mix"] = ()
    print(f"note: training on {', '.join(custom)} (from --task-module / --tasks-file; --set tasks=... chooses)",
          file=sys.stderr)
    return dataclasses.replace(cfg, **changes)


def cmd_tasks(args: argparse.Namespace) -> int:
    from orl.eval.tasks import SUITE, SUITE_V5, SUITE_V7, TASKS, get_task

    if args.samples < 1:
        raise ValueError(f"--samples must be >= 1, got {args.samples}")
    custom = load_task_flags(args)
    models = [Path(m) for m in args.model] or sorted(d for d in SHIPPED.glob("*") if (d / "orl.json").is_file())
    manifests = {m: _manifest(m) for m in models}
    names = args.names or list(dict.fromkeys([*SUITE, *SUITE_V5, *SUITE_V7, *TASKS, *custom]))
    lengths = {}
    print("Task families: each prompt is plain text; a model answers in the reference format and the task's "
          "verifier judges it.\n`orl eval --tasks NAME` evaluates one (--tasks all: "
          f"{','.join(SUITE)}); `orl generate --model DIR PROMPT` answers one prompt.\n")
    for name in names:
        task = get_task(name)
        print("\n".join(family_lines(task, args.samples, manifests, lengths)) + "\n")
    print("Models and the tasks they were trained on (manifest recipe.config.tasks), with the prompt and answer "
          "lengths of those tasks:")
    for m, manifest in manifests.items():
        print("\n".join(model_lines(m, manifest, args.samples, lengths)))
    if not manifests:
        print("  (none found; pass --model DIR)")
    return 0


def family_lines(task, n: int, manifests: dict, cache: dict) -> list[str]:
    from orl.eval.tasks.custom import source_of

    pad = " " * 12
    lines = [f"{task.name:<11} {getattr(task, 'description', '')}"]
    if src := source_of(task.name):
        lines.append(f"{pad}from:    {src}")
    try:
        example = _example(task)
        prompts, answers, beyond = _lengths(task, n, cache)
    except (ValueError, RuntimeError) as e:
        return lines + [f"{pad}example: none ({e})"]
    model, block, decoder = _model_for(task.name, manifests)
    budget = _budget(max(answers), block)
    flags = ("" if budget == GENERATE_MAX_NEW_TOKENS else f" --max-new-tokens {budget}") + decoder
    lines.append(f"{pad}try:     orl generate --model {model}{flags} {shlex.quote(example.prompt)}")
    lines.append(f"{pad}answer:  {example.answer}   (a reference; any output the verifier accepts is right)")
    lines.append(f"{pad}sizes:   {knobs(task)}")
    line = f"{pad}lengths: prompts {_span(prompts)} chars, answers {_span(answers)} chars + EOS ({len(answers)} samples)"
    if beyond:
        more = _budget(max(beyond), block)
        line += f"; beyond split: answers {_span(beyond)} chars" + (f" (--max-new-tokens {more})" if more > 64 else "")
    return lines + [line]


def knobs(task) -> str:
    """The size knobs of a family, as its registry instance sets them."""
    if hasattr(task, "sizes") and hasattr(task, "unit"):  # tasks/sized.py: a range and the one beyond it
        (lo, hi), (blo, bhi) = task.sizes, task.beyond
        return f"{lo}-{hi} {task.unit} in train/heldout, {blo}-{bhi} in the beyond split ({knobs(task.inner)})"
    if hasattr(task, "count"):  # a data file
        return f"{len(task.rows)} rows: {task.count('train')} train, {task.count('heldout')} heldout"
    values = {k: v for k, v in vars(task).items() if isinstance(v, (int, float, str)) and not k.startswith("_")
              and k not in ("name", "description", "why_parallel_is_hard")}
    return " ".join(f"{k}={v}" for k, v in values.items()) or "none"


def model_lines(path: Path, manifest: dict | None, n: int, cache: dict) -> list[str]:
    from orl.eval.tasks import TASKS

    if manifest is None:
        return [f"  {_display(path)}: no orl.json (not an orl checkpoint, or a plain Hugging Face model)"]
    recipe = manifest.get("recipe") or {}
    cfg = recipe.get("config") or {}
    args = manifest.get("model_args") or {}
    what = [manifest.get("objective") or "block_diffusion", f"recipe {recipe.get('name', '?')}",
            f"context {args.get('max_seq_len', '?')} tokens", f"block {manifest.get('block_len', '?')}"]
    if recipe.get("base"):  # a base since replaced at that path names the commit that holds it
        what.append(f"from {recipe['base']}" + (f" at git {recipe['base_git_commit']}" if recipe.get("base_git_commit")
                                                 else ""))
    if verifier := (recipe.get("verifier") or {}).get("base"):
        what.append(f"a draft-only drafter: decodes beside its verifier {verifier} (--spec-draft fused --spec-tokens 8)")
    if rollout := cfg.get("rollout"):
        what.append(f"rollouts of up to {rollout.get('max_new_tokens')} new tokens")
    if cfg.get("eval_max_new_tokens"):
        what.append(f"eval answers up to {cfg['eval_max_new_tokens']} tokens")
    lines = [f"  {_display(path)}: {', '.join(what)}"]
    tasks, mix = cfg.get("tasks") or [], cfg.get("mix") or []
    if not tasks:
        return lines + ["    trained on: not recorded"]
    for i, name in enumerate(tasks):
        share = f"{f'mix {mix[i]}' if len(mix) == len(tasks) else '':<7}"
        if name not in TASKS:
            lines.append(f"    {name:<9} {share} (not registered here: pass its --task-module / --tasks-file)")
            continue
        try:
            prompts, answers, _ = _lengths(TASKS[name], n, cache)
        except (ValueError, RuntimeError) as e:
            lines.append(f"    {name:<9} {share} ({e})")
            continue
        lines.append(f"    {name:<9} {share} prompts {_span(prompts):>5} chars, answers {_span(answers):>5} chars; "
                     f"{short_knobs(TASKS[name])}")
    return lines


def short_knobs(task) -> str:
    if hasattr(task, "sizes") and hasattr(task, "unit"):
        return f"{task.sizes[0]}-{task.sizes[1]} {task.unit}"
    return knobs(task)


def _manifest(path: Path) -> dict | None:
    try:
        return json.loads((path / "orl.json").read_text())
    except FileNotFoundError:
        return None
    except (OSError, json.JSONDecodeError) as e:
        raise ValueError(f"cannot read {path / 'orl.json'}: {e}") from None


def _model_for(name: str, manifests: dict) -> tuple[str, int, str]:
    """A model trained on the family (its block length, the decoder flags it is measured with), else a placeholder."""
    trained = [(path, m) for path, m in manifests.items()
               if m and name in (((m.get("recipe") or {}).get("config") or {}).get("tasks") or [])]
    # a diffusion model first: the engine the project is about (`orl generate` runs AR models too); a draft-only
    # drafter last (it decodes only beside its verifier)
    trained.sort(key=lambda pm: (pm[1].get("objective") == "autoregressive",
                                 bool((pm[1].get("recipe") or {}).get("verifier"))))
    if trained:
        path, m = trained[0]
        return shlex.quote(_display(path)), int(m.get("block_len") or 16), _decoder_flags(m)
    return "DIR", 16, ""


def _decoder_flags(manifest: dict) -> str:
    """The example runs with the decoder the model is measured with (`orl demo`'s default)."""
    from orl.demo import default_spec_tokens, spec_groups

    k = default_spec_tokens(manifest)
    return f" --spec-tokens {k} --spec-draft fused --spec-groups {spec_groups(k)}" if k else ""


def _display(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def _example(task):
    from orl.eval.tasks import SPLITS

    count = getattr(task, "count", None)
    split = next((s for s in reversed(SPLITS) if count(s)), "heldout") if count else "heldout"
    return task.sample(split, 0)


def _lengths(task, n: int, cache: dict) -> tuple[list[int], list[int], list[int]]:
    """Prompt and answer lengths of n training samples (every row of a data file), and of n samples of
    the beyond split where the family has one."""
    if task.name not in cache:
        if hasattr(task, "rows"):
            rows = task.rows
            cache[task.name] = [len(r.prompt) for r in rows], [len(r.answers[0]) if r.answers else 0 for r in rows], []
        else:
            train = [task.sample("train", i) for i in range(n)]
            beyond = [task.sample("beyond", i) for i in range(n)] if hasattr(task, "beyond") else []
            cache[task.name] = [len(s.prompt) for s in train], [len(s.answer) for s in train], [len(s.answer) for s in beyond]
    return cache[task.name]


def _budget(answer_chars: int, block: int) -> int:
    """The answer budget (--max-new-tokens) that fits an answer and its EOS: whole blocks, at least the default."""
    return max(GENERATE_MAX_NEW_TOKENS, math.ceil((answer_chars + 1) / block) * block)


def _span(xs: list[int]) -> str:
    return f"{min(xs)}-{max(xs)}" if min(xs) != max(xs) else str(xs[0])


def add_commands(sub) -> None:
    s = sub.add_parser("tasks", help="task families: prompt format, an example to type, sizes; what each model "
                                     "was trained on")
    s.add_argument("names", nargs="*", help="families to show (default: all)")
    s.add_argument("--model", action="append", default=[], metavar="DIR",
                   help="checkpoint to describe (repeatable; default: the shipped ones in checkpoints/)")
    s.add_argument("--samples", type=int, default=200, help="training samples per family for the length ranges")
    add_task_flags(s)
    s.set_defaults(func=cmd_tasks)
