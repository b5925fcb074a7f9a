"""Base-model recipe for the tiny dLLM: an autoregressive stage (dense next-token supervision), then
conversion to block diffusion with the staircase masked-diffusion loss (the QwenDLM route).

Exact resume: every batch and every noise draw is a pure function of (seed, step) (and, with a balanced
mix, of the per-task loss averages: orl.train.mix), and the checkpoint carries the optimizer state, those
averages and the step, so a resumed run continues bit for bit.
"""
from __future__ import annotations

import json
import random
import time
from dataclasses import replace
from pathlib import Path

import torch
from tqdm import tqdm

from orl.model.vocab import special_ids
from orl.eval.tasks import get_task
from orl.model import ModelArgs
from orl.model.model import Transformer
from orl.train.batches import (Batch, ar_batch, diffusion_batch, grid_pairs, shift_positions, stretch_positions,
                               weighted_ce_sum)
from orl.train.dist import SINGLE, Dist, setup, shard_rows
from orl.train.fsdp import gathered
from orl.atomic_dir import RUN_FILES
from orl.train.loop import TrainLoop, make_optimizer
from orl.train.mix import MixBalancer
from orl.train.pretrain_config import PretrainConfig, lr_at


def active_tasks(cfg: PretrainConfig) -> list[str]:
    return [name for name, n in zip(cfg.tasks, cfg.samples_per_task) if n > 0]


def stage_of(cfg: PretrainConfig, step: int) -> str:
    return "ar" if step < cfg.ar_steps else "diffusion" if cfg.convert else "ar2"


def make_batches(cfg: PretrainConfig, tok, step: int, counts: tuple[int, ...] | None = None) -> list[Batch]:
    """One micro-batch per task: a task's rows have similar lengths, so little of a step is padding
    (one mixed batch would pad an 11-token row to the 66 tokens of a `long` row). counts: rows per task
    (the balanced mix, orl.train.mix), else the config's."""
    rng = random.Random(f"pretrain|{cfg.seed}|{step}")
    ids = special_ids(tok, cfg.model.vocab_size)
    gen = torch.Generator().manual_seed(cfg.seed * 1_000_003 + step)
    diffusion = stage_of(cfg, step) == "diffusion"
    batches, aux = [], []
    for name, n in zip(cfg.tasks, counts or cfg.samples_per_task):
        if n == 0:
            continue  # the task is off in this preset
        task = get_task(name)
        samples = [task.sample("train", rng.randrange(1 << 30)) for _ in range(n)]
        pairs = [(tok.encode(s.prompt), tok.encode(s.answer)) for s in samples]
        if not diffusion:
            batches.append(ar_batch(pairs, tok.pad_id, tok.eos_id))
        else:
            if cfg.layout == "absolute_grid":  # each prompt's partial last block opens its answer, fixed
                rows, fixed = grid_pairs(pairs, cfg.block_len)
                batches.append(diffusion_batch(rows, cfg.block_len, ids, gen, cfg.noisy_copies, grid=True, fixed=fixed))
            else:
                batches.append(diffusion_batch(pairs, cfg.block_len, ids, gen, cfg.noisy_copies))
            if cfg.ar_aux > 0:
                b = ar_batch(pairs, tok.pad_id, tok.eos_id)
                b.weight *= cfg.ar_aux
                aux.append(b)
    if cfg.pos_offset > 0:  # drawn after the step's noise, so runs without it keep their batches
        for b in batches + aux:
            shift_positions(b, cfg.model.max_seq_len, cfg.pos_offset, gen)
    if cfg.pos_stretch > 0:  # drawn last, so runs without it keep their batches and noise
        for b in batches + aux:
            stretch_positions(b, cfg.pos_stretch, cfg.pos_stretch_max, gen)
    return batches + aux  # auxiliary rows last: the first len(active_tasks) entries are the tasks' own


def train_step(model: Transformer, opt: torch.optim.Optimizer, batches: list[Batch], cfg: PretrainConfig,
               lr: float, parts: list | None = None, dist: Dist = SINGLE, norms: list | None = None) -> float:
    """One optimizer step over the micro-batches: the weighted mean loss over all of their positions.
    `parts` (if given) receives each micro-batch's own mean loss, `norms` the gradient norm before
    clipping. Under torchrun `model` is the DDP wrapper (or the FSDP-sharded model) and each rank runs
    its rows of every micro-batch (dist.shard_rows)."""
    for g in opt.param_groups:
        g["lr"] = lr
    weights = torch.stack([b.weight.sum() for b in batches])  # whole micro-batches: the global total
    total_w = weights.sum().clamp(min=1e-6)
    opt.zero_grad(set_to_none=True)
    sums = []
    for i, batch in enumerate(batches):
        rows = shard_rows(batch, dist)
        with dist.no_sync(model, skip=i < len(batches) - 1):  # gradients sync once, in the last backward
            with torch.autocast(dist.device.type, dtype=torch.bfloat16, enabled=cfg.bf16):
                logits = model(rows.tokens, rows.pos, rows.mask, read_from=rows.read_from)
            s = weighted_ce_sum(logits, rows)
            # DDP / FSDP average gradients over ranks; world x this rank's share gives the whole loss's gradient
            (s * (dist.world / total_w)).backward()
        sums.append(s.detach())
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
    opt.step()
    if norms is not None:
        norms.append(norm.detach())
    # logging only: one sync (and under torchrun one collective) per optimizer step
    sums = dist.all_sum(torch.stack(sums)).cpu()
    if parts is not None:
        parts.extend(sums / weights.clamp(min=1e-6))
    return float(sums.sum() / total_w)


def load_initial(directory: str, args: ModelArgs, device: torch.device | str) -> Transformer:
    """`init`'s weights in fp32 (as a random init), refused unless they are a plain trainable model of this run: the
    same ModelArgs (a silent mismatch would train another model than the config names), the recipe's character
    tokenizer (equal ids, another vocabulary, would train on the wrong characters), not quantized (its int8/fp8
    weights are buffers: the run would train the norms and embeddings alone) and not a draft-only conversion."""
    from orl.checkpoint import load_checkpoint
    from orl.tokenizer import CharTokenizer
    where = f"init={directory}"
    if not Path(directory).is_dir():
        raise FileNotFoundError(f"{where}: no such checkpoint directory")
    model, tok, manifest = load_checkpoint(directory, device=device, dtype=torch.float32)
    if manifest.get("quantization"):
        raise ValueError(f"{where}: a quantized checkpoint ({manifest['quantization']}); start from its source")
    if getattr(model, "verifier_record", None):
        raise ValueError(f"{where}: a draft-only conversion (its clean rows never trained); start from its base")
    if getattr(tok, "kind", None) != "char" or tok.itos != CharTokenizer().itos:
        raise ValueError(f"{where}: its tokenizer is not this recipe's character tokenizer")
    if model.args != args:
        diff = {k: (getattr(model.args, k), v) for k, v in vars(args).items() if getattr(model.args, k) != v}
        raise ValueError(f"{where}: its model differs from the run's (checkpoint, config): {diff}")
    return model


def pretrain(cfg: PretrainConfig, out: str | Path, resume: bool = True, allow_config_change: bool = False,
             log=tqdm.write, device: str | None = None) -> Transformer:
    from orl.checkpoint import load_checkpoint
    from orl.tokenizer import CharTokenizer
    from orl.train.heldout import check_eval_fits

    tok = CharTokenizer()
    if cfg.init:  # the run's record names the checkpoint wherever it was started from
        cfg = replace(cfg, init=str(Path(cfg.init).resolve()))
    if cfg.model.vocab_size < tok.vocab_size:
        raise ValueError(f"model vocab_size {cfg.model.vocab_size} < tokenizer vocab {tok.vocab_size}")
    diffusion_eval = cfg.convert and cfg.diffusion_steps > 0
    check_eval_fits(cfg.tasks, tok, cfg.eval_samples, cfg.eval_max_new_tokens, cfg.model.max_seq_len,
                    ar=cfg.ar_steps > 0 or not diffusion_eval, block_len=cfg.block_len if diffusion_eval else None,
                    layout=cfg.layout,
                    fix=f"lower eval_max_new_tokens ({cfg.eval_max_new_tokens}) or raise model.max_seq_len")
    out = Path(out).resolve()
    stage1 = out / RUN_FILES[1]  # the end of the AR stage, kept inside the run
    dist = setup(device)
    loop = TrainLoop(cfg, out, cfg.total_steps, "step", resume=resume, allow_config_change=allow_config_change,
                     extra_outputs=(stage1,), log=log, dist=dist, keep_every=cfg.keep_every)
    saved_layout = ((loop.state or {}).get("config") or {}).get("layout", PretrainConfig.layout)  # older runs: the default
    if loop.start > cfg.ar_steps and saved_layout != cfg.layout:  # the manifest would name a layout it barely trained
        raise ValueError(f"{out} is in stage 2 with layout {saved_layout!r}; a run cannot change it to "
                         f"{cfg.layout!r} midway (start from its stage1 checkpoint in a new --out instead)")
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    if loop.state:  # every rank reads the checkpoint; one that cannot stops them all (Dist.on_every)
        model, tok, _ = dist.on_every(lambda: load_checkpoint(out, device=dist.device))
    elif cfg.init:
        model = dist.on_every(lambda: load_initial(cfg.init, cfg.model, dist.device))
    else:
        torch.manual_seed(cfg.seed)
        model = Transformer(cfg.model).to(dist.device)
    model.train()
    ddp = dist.wrap(model, parallel=cfg.parallel, bf16=cfg.bf16)  # `model` for evaluation and checkpoints
    opt = make_optimizer(model, cfg.lr, cfg.weight_decay)
    if loop.state:
        loop.load_optimizer(model, opt)
    balancer = MixBalancer(cfg.tasks, cfg.samples_per_task, cfg.balance) if cfg.balance else None
    if balancer and loop.state and "mix_balance" in loop.state:
        why = balancer.load_state_dict(loop.state["mix_balance"])
        if why:
            log(why)
    t_last, tokens = time.perf_counter(), 0
    for step in loop.steps():
        counts = balancer.counts(stage_of(cfg, step)) if balancer else None
        batches = make_batches(cfg, tok, step, counts)
        parts, norms = [], []
        loss = train_step(ddp, opt, batches, cfg, lr_at(cfg, step), parts, dist, norms)
        tokens += sum(b.n_tokens for b in batches)
        stage = stage_of(cfg, step)
        names = active_tasks(cfg)
        rec = {"step": step + 1, "stage": stage, "loss": round(loss, 5), "lr": lr_at(cfg, step),
               "grad_norm": round(float(norms[0]), 5),
               "task_loss": {n: round(float(x), 4) for n, x in zip(names, parts)}}
        if balancer:
            balancer.update(stage, parts[:len(names)])  # the loss of the step's rows: it sets the next step's
            rec["rows"] = dict(zip(cfg.tasks, counts))
        if len(parts) > len(names):  # make_batches puts the ar_aux rows after the tasks' own
            rec["ar_aux_loss"] = {n: round(float(x), 4) for n, x in zip(names, parts[len(names):])}
        done = step + 1
        if done % 10 == 0:
            dt = time.perf_counter() - t_last
            rec["tok_s"] = round(tokens / dt)
            loop.bar.set_postfix(stage=stage, loss=f"{loss:.4f}", tok_s=f"{tokens / dt:.0f}")
            t_last, tokens = time.perf_counter(), 0
        if loop.due(done, cfg.eval_every) or done == cfg.ar_steps:
            with gathered(model):  # sharded weights: every rank gathers them, rank 0 evaluates (a failure
                # there stops every rank: Dist.on_main). During the AR stage the model is judged as what it
                # is then: a greedy AR decoder.
                ev = dist.on_main(lambda: evaluate(model, tok, cfg) if stage == "diffusion" else
                                  evaluate_ar(model, tok, cfg))
                model.train()
            if dist.main:
                rec["eval"] = ev
                log(f"step {done} eval {json.dumps(ev)}")
        loop.write(rec)
        end_of_stage1 = done == cfg.ar_steps and cfg.diffusion_steps > 0
        if end_of_stage1:
            # A resumable branch point for other stage-2 recipes. Saved before `out`: a crash in between
            # resumes `out` from before this step, so stage 1 is written again, never skipped.
            save(loop, model, tok, opt, cfg, done, {"eval": rec.get("eval")}, stage1, balancer)
        if done in loop.snapshots:  # before `out`, like stage 1: a crash in between writes it again on resume
            save(loop, model, tok, opt, cfg, done, {"eval": rec.get("eval")}, loop.snapshots[done], balancer)
        if loop.due(done, cfg.save_every) or end_of_stage1:
            save(loop, model, tok, opt, cfg, done, {"eval": rec.get("eval")}, balancer=balancer)
    loop.finish()
    model.eval()
    return model


def save(loop: TrainLoop, model, tok, opt, cfg: PretrainConfig, step: int, extra: dict, target: Path | None = None,
         balancer: MixBalancer | None = None) -> None:
    diffusion = cfg.convert and step > cfg.ar_steps
    manifest = {"block_len": cfg.block_len, "residual_mode": "off",
                "objective": "block_diffusion" if diffusion else "autoregressive",
                **({"layout": cfg.layout} if diffusion else {}),  # the engine decodes as the rows trained
                "recipe": {"name": "pretrain", "config": loop.config, "step": step, **extra}}
    loop.save(model, tok, manifest, opt, step, target,
              **({"mix_balance": balancer.state_dict()} if balancer else {}))


def evaluate(model: Transformer, tok, cfg: PretrainConfig, threshold: float | None = None) -> dict:
    """Held-out accuracy per family; conservative decoding (one token per step, most confident
    first) unless a threshold is given."""
    from orl.engine import DecodeConfig, Engine
    from orl.train.heldout import heldout_eval

    rule = {"rule": "topk"} if threshold is None else {"rule": "threshold", "threshold": threshold}
    dcfg = DecodeConfig(block_len=cfg.block_len, max_new_tokens=cfg.eval_max_new_tokens, layout=cfg.layout, **rule)
    return heldout_eval(Engine(model, tok), cfg.tasks, dcfg, cfg.eval_samples)


@torch.no_grad()
def evaluate_ar(model: Transformer, tok, cfg: PretrainConfig) -> dict:
    """Held-out accuracy per family of greedy left-to-right decoding (the AR stage's own decoder)."""
    from orl.engine.ar import ARConfig, ARDecoder

    was_training = model.training
    dec, res = ARDecoder(model, tok), {}
    for name in cfg.tasks:
        task = get_task(name)
        samples = [task.sample("heldout", i) for i in range(cfg.eval_samples)]
        gens = dec.generate([s.prompt for s in samples], ARConfig(max_new_tokens=cfg.eval_max_new_tokens))
        res[name] = {"acc": round(sum(task.verify(s.prompt, g.text) for s, g in zip(samples, gens)) / len(samples), 3)}
    model.train(was_training)
    return res
