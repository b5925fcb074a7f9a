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

from orl.engine import DecodeConfig
from orl.model.residual import residual_state
from orl.model.vocab import ban_tokens, special_ids
from orl.train.batches import diffusion_batch, grid_pairs, weighted_ce_sum
from orl.train.dist import shard_rows
from orl.train.heldout import check_eval_fits, eval_fix, heldout_eval, mean_over_tasks
from orl.train.loop import check_fields, make_optimizer
from orl.train.orl import SHIPPED_BASE, base_layout, save_due
from orl.train.rollout import collect, rollout_engine, rollout_stats, sample_prompts, start_run


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
    engine_max_len: int = 1024          # cache slots of the engines, capped by max_seq_len (ORLConfig's)
    save_every: int = 20
    keep_every: int = 0                 # also keep the checkpoint of every this many updates as OUT-atUPDATE
    seed: int = 0
    threads: int = 0
    # the learning rates are constant, so more updates continue a run exactly (--set updates=600)
    RESUME_FREE: ClassVar[frozenset[str]] = frozenset({"updates"})

    def __post_init__(self):
        problems = check_fields(self, positive=("updates", "prompts_per_update", "group_size", "lr", "grad_clip",
                                                "engine_max_len", "eval_every", "eval_samples", "save_every"),
                                non_negative=("threads", "keep_every"))
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
              log=tqdm.write, device: str | None = None) -> None:
    from orl.checkpoint import load_checkpoint, require_objective

    cfg, dist, loop = start_run(cfg, out, resume, allow_config_change, log, "decodes", device)
    state = loop.state

    def read_models():
        ref, tok, manifest = load_checkpoint(cfg.base, device=dist.device)
        require_objective(manifest, "block_diffusion", cfg.base)
        model = load_checkpoint(loop.out, device=dist.device)[0] if state else copy.deepcopy(ref)
        # the data comes from the frozen reference decoding without residual (off-policy), at its block length
        return ref.eval(), tok, manifest, model, base_layout(manifest, replace(cfg.rollout, residual="off"))

    # every rank reads the checkpoints; one that cannot stops them all (Dist.on_every)
    ref, tok, manifest, model, data_cfg = dist.on_every(read_models)
    block_len = data_cfg.block_len
    opt = make_optimizer(model, cfg.lr)
    if state:
        opt.load_state_dict(state["optimizer"])
    ids = special_ids(tok, model.args.vocab_size)
    ref_engine, engine = rollout_engine(ref, tok, cfg), rollout_engine(model, tok, cfg)
    check_eval_fits(cfg.tasks, tok, cfg.eval_samples, data_cfg.max_new_tokens, engine.max_len, ar=False,
                    block_len=block_len, layout=data_cfg.layout, fix=eval_fix(cfg, data_cfg, model))
    ddp = dist.wrap(model, find_unused=model.model.residual_adapter is not None)  # the rcd residual skips an adapter
    emb = ref.model.embed_tokens.weight
    gen_tokens = state["generated_tokens"] if state else 0
    t0 = time.perf_counter()
    for update in loop.steps():
        samples = sample_prompts(cfg.tasks, cfg.prompts_per_update, f"orl|{cfg.seed}|{update}")
        mine = dist.shard(len(samples))
        rollouts = collect(ref_engine, samples[mine.start:mine.stop], cfg.group_size, data_cfg,
                           seed=cfg.seed * 7919 + update, first=mine.start)
        stats = rollout_stats(rollouts, dist)
        gen_tokens += stats["tokens"]
        kept = [r for r in rollouts if r.verified]
        rec = {"update": update + 1, **{f"rollout_{k}": v for k, v in stats.items()}, "generated_tokens": gen_tokens}
        # every process builds the whole batch from every process's data (its noise is one draw over all
        # rows) and trains on its rows of it, as pretraining does
        prompts = dist.gather_lists([r.gen.prompt_ids for r in kept])
        answers = dist.gather_lists([[t for t in r.gen.token_ids if t != ids.eos] for r in kept])
        if prompts:
            gen = torch.Generator().manual_seed(cfg.seed * 1_000_003 + update)
            pairs, fixed = list(zip(prompts, answers)), None
            if data_cfg.layout == "absolute_grid":  # the rows the engine decodes: a block grid from position 0
                pairs, fixed = grid_pairs(pairs, block_len)
            full = diffusion_batch(pairs, block_len, ids, gen, grid=fixed is not None, fixed=fixed)
            b = shard_rows(full, dist)
            masked = b.tokens == ids.mask
            with torch.no_grad():
                ref_logits = ban_tokens(ref(b.tokens, b.pos, b.mask, read_from=b.read_from), ids.banned)
                z, a = residual_state(ref_logits, emb, cfg.rollout.residual_temperature)
            model.train()
            logits = ddp(b.tokens, b.pos, b.mask, read_from=b.read_from, mask_id=ids.mask, z=z, a=a,
                         unresolved=masked, residual="rcd")
            total_w = full.weight.sum().clamp(min=1e-6)
            s = weighted_ce_sum(logits, b)
            opt.zero_grad(set_to_none=True)
            # DDP averages gradients over processes; world x this share is the whole loss's gradient
            (s * (dist.world / total_w)).backward()
            norm = torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
            opt.step()
            loss = float(dist.all_sum(s.detach()) / total_w)
            rec.update(loss=round(loss, 5), grad_norm=round(float(norm), 5), kept=len(prompts))
        done = update + 1
        if loop.due(done, cfg.eval_every):  # rank 0 evaluates; its failure stops every rank (Dist.on_main)
            ecfg = DecodeConfig(**{**data_cfg.to_dict(), "temperature": 0.0, "threshold": cfg.eval_threshold,
                                   "residual": "rcd"})
            ev = dist.on_main(lambda: heldout_eval(engine, cfg.tasks, ecfg, cfg.eval_samples))
            if dist.main:
                rec["eval"] = ev
                log(f"update {done}: acc {100 * mean_over_tasks(ev, 'acc'):.1f}% tpf {mean_over_tasks(ev, 'tpf'):.2f}")
        rec["wall_s"] = round(time.perf_counter() - t0, 1)
        loop.write(rec)
        save_due(loop, model, tok, opt, "rcd", replace(data_cfg, residual="rcd"), done, gen_tokens, cfg.base, manifest,
                 cfg.save_every)
    loop.finish()
