"""Off-policy RCD baseline (DESIGN section 4): the ablation ORL must beat.

Data: verified outputs of the frozen base model on the same prompt stream and token budget as ORL.
Each update masks the answers' blocks at random (staircase rows), a frozen reference model predicts
on that noisy input, its soft embedding and entropy become the RCD residual
(1 - a) E[mask] + a z at the masked positions, and the trained model learns plain masked-diffusion
cross-entropy with that input. The residual never comes from the trained model itself: off-policy.
"""
from __future__ import annotations

import copy
import json
import time
from dataclasses import replace
from pathlib import Path

import torch
from tqdm import tqdm

from orl.engine import DecodeConfig, Engine
from orl.model.vocab import ban_tokens, special_ids
from orl.model.residual import residual_state
from orl.train.batches import diffusion_batch, weighted_ce
from orl.train.heldout import heldout_eval, mean_over_tasks
from orl.train.rollout import collect, rollout_stats, sample_prompts, trained_tasks
from orl.train.runlog import open_log
from orl.train.pretrain import TRAIN_STATE
from orl.train.trainer import ORLConfig, clip, make_optimizer, save_update


def train_rcd(cfg: ORLConfig, out: str | Path, resume: bool = True, log=print) -> None:
    from orl.checkpoint import load_checkpoint, require_objective

    out = Path(out)
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    ref, tok, manifest = load_checkpoint(cfg.base)
    require_objective(manifest, "block_diffusion", cfg.base)
    cfg = replace(cfg, tasks=cfg.tasks or trained_tasks(manifest))
    ref.eval()
    start, state = 0, None
    if resume and (out / TRAIN_STATE).exists():
        model, tok, _ = load_checkpoint(out)
        state = torch.load(out / TRAIN_STATE, weights_only=False)
        start = state["update"]
        log(f"resumed from {out} at update {start}")
    else:
        model = copy.deepcopy(ref)
    block_len = manifest.get("block_len") or cfg.rollout.block_len
    # the data comes from the frozen reference decoding without residual (off-policy)
    data_cfg = DecodeConfig(**{**cfg.rollout.to_dict(), "block_len": block_len, "residual": "off"}).validate()
    opt = make_optimizer(model, cfg)
    if state:
        opt.load_state_dict(state["optimizer"])
    ids = special_ids(tok, model.args.vocab_size)
    ref_engine, engine = Engine(ref, tok), Engine(model, tok)
    emb = ref.model.embed_tokens.weight
    log_path = open_log(out, start, "update")
    gen_tokens = state["generated_tokens"] if state else 0
    t0 = time.perf_counter()
    for update in tqdm(range(start, cfg.updates), initial=start, total=cfg.updates, dynamic_ncols=True):
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
            clip(model, cfg)
            opt.step()
            rec.update(loss=round(loss.item(), 5), kept=len(kept))
        done = update + 1
        if done % cfg.eval_every == 0 or done == cfg.updates:
            ecfg = DecodeConfig(**{**data_cfg.to_dict(), "temperature": 0.0, "threshold": cfg.eval_threshold,
                                   "residual": "rcd"})
            ev = heldout_eval(engine, cfg.tasks, ecfg, cfg.eval_samples)
            rec["eval"] = ev
            log(f"update {done}: acc {mean_over_tasks(ev, 'acc'):.3f} tpf {mean_over_tasks(ev, 'tpf'):.2f}")
        rec["wall_s"] = round(time.perf_counter() - t0, 1)
        with open(log_path, "a") as f:
            f.write(json.dumps(rec) + "\n")
        if done % cfg.save_every == 0 or done == cfg.updates:
            save_update(out, model, tok, opt, cfg, "rcd", "rcd", block_len, done, gen_tokens)
