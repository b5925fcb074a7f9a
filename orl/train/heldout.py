"""Periodic held-out evaluation during training, through the serving engine."""
from __future__ import annotations

import torch

from orl.engine import DecodeConfig, Engine, layouts
from orl.engine.request import check_request
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
                    fix: str = "lower eval_max_new_tokens") -> None:
    """Raise ValueError before training when a periodic eval's request would not fit the context: the
    engine refuses it only when the eval runs, hundreds of steps into the run. The request is sized the way
    the engine sizes it (the layout's own plan, then `check_request`): `ar`, greedy AR decoding;
    `block_len`, block diffusion in `layout`. `fix` names what the user can change."""
    if not ar and not block_len:
        raise ValueError("check_eval_fits: nothing to check (neither an AR nor a block-diffusion eval)")
    problems = []
    for name in tasks:
        task = get_task(name)
        ids = [tok.encode(task.sample("heldout", i).prompt) for i in range(n)]
        sizes = [(max_new_tokens, f"max_new_tokens ({max_new_tokens})", None)] if ar else []
        if block_len and layout == "full_sequence":
            sizes.append((max_new_tokens, f"{max_new_tokens} answer tokens", None))
        elif block_len:
            plan = layouts.plan(ids, layout, block_len, max_new_tokens)
            sizes.append((plan.n_blocks * block_len, f"{plan.n_blocks} blocks of {block_len}", plan.P))
        for slots, what, first in sizes:
            try:
                check_request(ids, slots, what, max_len, None, 0, first_slot=first)
            except ValueError as e:
                problems.append(f"{name}: " + str(e).split(";")[0])  # the engine's own words, without its advice
    if problems:
        raise ValueError(f"the periodic eval would not fit its context; {fix}: " + "; ".join(problems))


def eval_fix(cfg, rollout: DecodeConfig, model) -> str:
    """What an ORL or RCD run can change when its eval does not fit (check_eval_fits)."""
    return (f"lower rollout.max_new_tokens ({rollout.max_new_tokens}) or raise engine_max_len ({cfg.engine_max_len}; "
            f"the model's max_seq_len {model.args.max_seq_len} caps it)")
