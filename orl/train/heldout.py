"""Periodic held-out evaluation during training, through the serving engine."""
from __future__ import annotations

import torch

from orl.engine import DecodeConfig, Engine
from orl.engine.stops import with_stop
from orl.eval.tasks import get_task


@torch.no_grad()
def heldout_eval(engine: Engine, tasks: tuple[str, ...], cfg: DecodeConfig, n: int) -> dict:
    """Accuracy, TPF (ratio of sums: all tokens / all forwards, DESIGN section 5) and mean steps per
    block per family on the first n held-out samples, each family decoded with its own stop strings."""
    was_training = engine.model.training
    engine.model.eval()
    res = {}
    for name in tasks:
        task = get_task(name)
        samples = [task.sample("heldout", i) for i in range(n)]
        gens = engine.generate([s.prompt for s in samples], with_stop(cfg, task.stop))
        steps = [k for g in gens for k in g.block_steps]
        res[name] = {"acc": round(sum(task.verify(s.prompt, g.text) for s, g in zip(samples, gens)) / n, 3),
                     "tpf": round(sum(g.n_tokens for g in gens) / max(sum(g.forwards for g in gens), 1), 2),
                     "steps_per_block": round(sum(steps) / max(len(steps), 1), 2)}
    engine.model.train(was_training)
    return res


def mean_over_tasks(res: dict, key: str) -> float:
    return sum(v[key] for v in res.values()) / max(len(res), 1)


def check_eval_fits(tasks: tuple[str, ...], tok, n: int, max_new_tokens: int, max_len: int, *,
                    ar: bool, block_len: int | None = None, layout: str = "prompt_block",
                    setting: str = "eval_max_new_tokens") -> None:
    """Raise ValueError before training when a periodic eval's request would not fit the context: the
    engine refuses it only when the eval runs, hundreds of steps into the run. `ar`: greedy AR eval
    (prompt + max_new_tokens slots); `block_len`: block-diffusion eval (whole blocks where `layout` puts them,
    the engine's own plan; the full_sequence layout takes prompt + max_new_tokens slots)."""
    from orl.engine import layouts

    problems = []
    for name in tasks:
        task = get_task(name)
        ids = [tok.encode(task.sample("heldout", i).prompt) for i in range(n)]
        P = max(len(p) for p in ids)
        need = [(P, max_new_tokens, f"{max_new_tokens} tokens")] if ar or layout == "full_sequence" else []
        if block_len and layout != "full_sequence":  # the absolute grid prefills whole blocks only
            plan = layouts.plan(ids, layout, block_len, max_new_tokens)
            need.append((max(len(p) for p in plan.prefill), plan.n_blocks * block_len,
                         f"{plan.n_blocks} blocks of {block_len}"))
        for prefill, answer, what in need:
            if prefill + answer > max_len:
                problems.append(f"{name}: its longest eval prompt ({prefill} tokens) + {what} = "
                                f"{prefill + answer} > {max_len}")
    if problems:
        raise ValueError(f"the periodic eval would not fit the model's context ({max_len} tokens); lower "
                         f"{setting} or shorten the prompts: " + "; ".join(problems))
