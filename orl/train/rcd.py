"""Off-policy RCD baseline (DESIGN section 4): the ablation ORL must beat.

Data: verified outputs of the frozen base model on the same prompt stream and token budget as ORL.
Each update masks the answers' blocks at random (staircase rows), a frozen reference model predicts
on that noisy input, its soft embedding and entropy become the RCD residual
(1 - a) E[mask] + a z at the masked positions, and the trained model learns plain masked-diffusion
cross-entropy with that input. The residual never comes from the trained model itself: off-policy.
"""
from __future__ import annotations

import copy
import time
from dataclasses import asdict, dataclass, field, replace
from typing import ClassVar
from pathlib import Path

import torch
from tqdm import tqdm

from orl.engine import DecodeConfig, Engine
from orl.model.residual import residual_state
from orl.model.vocab import ban_tokens, special_ids
from orl.train.batches import diffusion_batch, weighted_ce
from orl.train.heldout import heldout_eval, mean_over_tasks
from orl.train.loop import TrainLoop, check_fields, make_optimizer
from orl.train.orl import SHIPPED_BASE, save_update
from orl.train.rollout import collect, rollout_stats, sample_prompts, trained_tasks


@dataclass(frozen=True)
class RCDConfig:
    base: str = SHIPPED_BASE
    tasks: tuple[str, ...] = ()         # empty: the tasks the base was trained on
    updates: int = 240
    prompts_per_update: int = 16        # the same prompt stream and token budget as ORL
    group_size: int = 4
    # the frozen base decodes the data without residual; residual_temperature sets the RCD residual
    rollout: DecodeConfig = field(default_factory=lambda: DecodeConfig(
        max_new_tokens=64, threshold=0.9, temperature=0.7, residual="off"))
    lr: float = 1e-4
    grad_clip: float = 1.0
    eval_every: int = 60
    eval_samples: int = 20
    eval_threshold: float = 0.9
    save_every: int = 20
    seed: int = 0
    threads: int = 0
    # the learning rates are constant, so more updates continue a run exactly (--set updates=600)
    RESUME_FREE: ClassVar[frozenset[str]] = frozenset({"updates"})

    def __post_init__(self):
        problems = check_fields(self, positive=("updates", "prompts_per_update", "group_size", "lr", "grad_clip",
                                                "eval_every", "eval_samples", "save_every"),
                                non_negative=("threads",))
        if not 0.0 < self.eval_threshold <= 1.0:
            problems.append(f"eval_threshold must be in (0, 1], got {self.eval_threshold}")
        try:
            self.rollout.validate()
        except ValueError as e:
            problems.append(f"rollout: {e}")
        if problems:
            raise ValueError("invalid RCDConfig: " + "; ".join(problems))

    def to_dict(self) -> dict:
        return asdict(self)


def train_rcd(cfg: RCDConfig, out: str | Path, resume: bool = True, allow_config_change: bool = False,
              log=tqdm.write) -> None:
    from orl.checkpoint import load_checkpoint, require_objective

    from orl.checkpoint import read_manifest

    cfg = replace(cfg, tasks=cfg.tasks or trained_tasks(read_manifest(cfg.base)))
    loop = TrainLoop(cfg, out, cfg.updates, "update", resume=resume, allow_config_change=allow_config_change, log=log)
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    ref, tok, manifest = load_checkpoint(cfg.base)
    require_objective(manifest, "block_diffusion", cfg.base)
    ref.eval()
    state = loop.state
    model = load_checkpoint(loop.out)[0] if state else copy.deepcopy(ref)
    block_len = manifest.get("block_len") or cfg.rollout.block_len
    # the data comes from the frozen reference decoding without residual (off-policy)
    data_cfg = DecodeConfig(**{**cfg.rollout.to_dict(), "block_len": block_len, "residual": "off"}).validate()
    opt = make_optimizer(model, cfg.lr)
    if state:
        opt.load_state_dict(state["optimizer"])
    ids = special_ids(tok, model.args.vocab_size)
    ref_engine, engine = Engine(ref, tok), Engine(model, tok)
    emb = ref.model.embed_tokens.weight
    gen_tokens = state["generated_tokens"] if state else 0
    t0 = time.perf_counter()
    for update in loop.steps():
        samples = sample_prompts(cfg.tasks, cfg.prompts_per_update, f"orl|{cfg.seed}|{update}")
        rollouts = collect(ref_engine, samples, cfg.group_size, data_cfg, seed=cfg.seed * 7919 + update)
        stats = rollout_stats(rollouts)
        gen_tokens += stats["tokens"]
        kept = [r for r in rollouts if r.verified]
        rec = {"update": update + 1, **{f"rollout_{k}": v for k, v in stats.items()}, "generated_tokens": gen_tokens}
        if kept:
            pairs = [(r.gen.prompt_ids, [t for t in r.gen.token_ids if t != ids.eos]) for r in kept]
            gen = torch.Generator().manual_seed(cfg.seed * 1_000_003 + update)
            b = diffusion_batch(pairs, block_len, ids, gen)
            masked = b.tokens == ids.mask
            with torch.no_grad():
                ref_logits = ban_tokens(ref(b.tokens, b.pos, b.mask, read_from=b.read_from), ids.banned)
                z, a = residual_state(ref_logits, emb, cfg.rollout.residual_temperature)
            model.train()
            logits = model(b.tokens, b.pos, b.mask, read_from=b.read_from, mask_id=ids.mask, z=z, a=a,
                           unresolved=masked, residual="rcd")
            loss = weighted_ce(logits, b)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
            opt.step()
            rec.update(loss=round(loss.item(), 5), kept=len(kept))
        done = update + 1
        if loop.due(done, cfg.eval_every):
            ecfg = DecodeConfig(**{**data_cfg.to_dict(), "temperature": 0.0, "threshold": cfg.eval_threshold,
                                   "residual": "rcd"})
            ev = heldout_eval(engine, cfg.tasks, ecfg, cfg.eval_samples)
            rec["eval"] = ev
            log(f"update {done}: acc {mean_over_tasks(ev, 'acc'):.3f} tpf {mean_over_tasks(ev, 'tpf'):.2f}")
        rec["wall_s"] = round(time.perf_counter() - t0, 1)
        loop.write(rec)
        if loop.due(done, cfg.save_every):
            save_update(loop, model, tok, opt, "rcd", "rcd", block_len, done, gen_tokens, cfg.base)
    loop.finish()
