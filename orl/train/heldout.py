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
