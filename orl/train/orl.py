"""The ORL recipe: fresh rollouts -> one optimizer update -> discard, repeated (DESIGN section 4).

The same loop runs the ablations: residual off (plain on-policy self-distillation), lambda_aec = 0,
and stale rollouts (`rollout_reuse` > 1 updates per rollout batch, with the KL anchor measured
against the weights that produced them). The off-policy RCD baseline is orl.train.rcd.
"""
from __future__ import annotations

import copy
import json
import time
from dataclasses import asdict, dataclass, field
from typing import ClassVar
from pathlib import Path

import torch
from tqdm import tqdm

from orl.engine import DecodeConfig
from orl.engine.layouts import LAYOUTS
from orl.model.vocab import special_ids
from orl.model.args import ModelArgs
from orl.model.model import Transformer
from orl.train.ar_anchor import ar_anchor_sums, rollout_ar_batch
from orl.train.heldout import check_eval_fits, eval_fix, heldout_eval, mean_over_tasks
from orl.train.dist import SINGLE, Dist
from orl.train.loop import ResumeError, TrainLoop, check_fields, make_optimizer
from orl.train.objective import LossWeights, orl_loss, response_counts
from orl.train.relabel import relabel_unverified
from orl.train.replay import build_batch, make_unit, pack
from orl.train.rollout import (base_weights, collect, rollout_engine, rollout_stats, sample_prompts, select_kept,
                               start_run)



SHIPPED_BASE = str(Path(__file__).resolve().parents[2] / "checkpoints" / "orl-tiny-base")
KEEP = ("verified", "fastest")
RELABEL = ("none", "reference")


@dataclass(frozen=True)
class ORLConfig:
    base: str = SHIPPED_BASE
    tasks: tuple[str, ...] = ()         # empty: the tasks the base was trained on (orl.eval.tasks.trained_tasks)
    updates: int = 100
    prompts_per_update: int = 16
    group_size: int = 4                 # rollouts per prompt
    rollout: DecodeConfig = field(default_factory=lambda: DecodeConfig(
        max_new_tokens=64, threshold=0.9, temperature=0.7, residual="adapter"))
    adapter_dim: int = 128
    adapter_alpha: float = 1.0
    lr: float = 5e-5
    adapter_lr: float = 1e-3
    grad_clip: float = 1.0
    adapter_grad_clip: float = 1.0
    weights: LossWeights = field(default_factory=LossWeights)
    kl_conf: float = 0.9                # rollout confidence above which a position is anchored
    rollout_reuse: int = 1              # > 1: stale-rollout ablation
    keep: str = "verified"              # "fastest": one verified rollout per prompt (rollout.select_kept)
    keep_reward: float = 1.0            # a rollout is verified when its reward reaches this (partial credit)
    relabel: str = "none"               # "reference": also train on unverified rollouts' states before their first
                                        # wrong commit, toward a correct answer (orl.train.relabel)
    row_tokens: int = 768
    # cache slots of the rollout / eval engine (prompt + answer), capped by the model's max_seq_len: every
    # step attends over the whole cache; gemma-3-270m's 32,768 took one measured update to 2.2x the CPU time
    engine_max_len: int = 1024
    eval_every: int = 25
    eval_samples: int = 20
    eval_threshold: float = 0.9
    save_every: int = 10
    keep_every: int = 0                 # also keep the checkpoint of every this many updates as OUT-atUPDATE
    seed: int = 0
    threads: int = 0
    # the learning rates are constant, so more updates continue a run exactly (--set updates=600)
    RESUME_FREE: ClassVar[frozenset[str]] = frozenset({"updates"})

    def __post_init__(self):
        problems = check_fields(self, positive=("updates", "prompts_per_update", "group_size", "lr", "grad_clip",
                                                "rollout_reuse", "row_tokens", "engine_max_len", "eval_every",
                                                "eval_samples", "save_every"),
                                non_negative=("adapter_dim", "adapter_lr", "adapter_grad_clip", "threads", "keep_every"))
        if self.rollout.residual == "adapter" and self.adapter_dim <= 0:
            problems.append("adapter_dim must be > 0 when rollouts use the adapter residual")
        # the lambdas weigh losses to minimise; min(KL, c) with c <= 0 is a constant (the anchor silently off)
        problems += [f"weights.{p}" for p in check_fields(self.weights, positive=("kl_cap",), non_negative=(
            "lambda_aec", "lambda_kl", "lambda_ar", "lambda_ar_kl", "lambda_cf"))]
        # L_AEC's target (1 - rho) stopgrad H(k): rho > 1 makes it negative, so a contraction is penalised too;
        # rho < 0 lets the entropy grow
        if not 0.0 <= self.weights.rho <= 1.0:
            problems.append(f"weights.rho must be in [0, 1], got {self.weights.rho}")
        if self.keep not in KEEP:
            problems.append(f"keep must be one of {KEEP}, got {self.keep!r}")
        if self.relabel not in RELABEL:
            problems.append(f"relabel must be one of {RELABEL}, got {self.relabel!r}")
        if not 0.0 < self.keep_reward <= 1.0:
            problems.append(f"keep_reward must be in (0, 1], got {self.keep_reward}")
        if not 0.0 < self.eval_threshold <= 1.0:
            problems.append(f"eval_threshold must be in (0, 1], got {self.eval_threshold}")
        if not 0.0 <= self.kl_conf <= 1.0:
            problems.append(f"kl_conf must be in [0, 1], got {self.kl_conf}")
        try:
            self.rollout.validate()
        except ValueError as e:
            problems.append(f"rollout: {e}")
        if problems:
            raise ValueError("invalid ORLConfig: " + "; ".join(problems))

    def to_dict(self) -> dict:
        return asdict(self)


def with_adapter(base: Transformer, adapter_dim: int, alpha: float, seed: int = 0) -> Transformer:
    """The base model plus a fresh residual adapter (zero-initialised: identical outputs). Its init
    depends on `seed` only, so that a run is reproducible whatever ran before in the process."""
    if base.args.adapter_dim:
        return base
    args = ModelArgs.from_dict({**base.args.to_dict(), "adapter_dim": adapter_dim, "adapter_alpha": alpha})
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = Transformer(args).to(base.lm_head.weight.dtype)
    missing, unexpected = model.load_state_dict(base.state_dict(), strict=False)
    if unexpected or any(not k.startswith("model.residual_adapter.") for k in missing):
        raise ValueError(f"cannot add an adapter: missing {missing}, unexpected {unexpected}")
    return model


def clip(model: Transformer, cfg: ORLConfig) -> torch.Tensor:
    """Clip the model and the adapter separately; their gradient norms before clipping."""
    adapter = [p for n, p in model.named_parameters() if "residual_adapter" in n]
    rest = [p for n, p in model.named_parameters() if "residual_adapter" not in n]
    norm = torch.nn.utils.clip_grad_norm_(rest, cfg.grad_clip)
    if adapter:
        return torch.stack([norm, torch.nn.utils.clip_grad_norm_(adapter, cfg.adapter_grad_clip)])
    return norm[None]


def train_orl(cfg: ORLConfig, out: str | Path, resume: bool = True, allow_config_change: bool = False,
              log=tqdm.write, device: str | None = None) -> Transformer:
    from orl.checkpoint import load_checkpoint, require_objective

    cfg, dist, loop = start_run(cfg, out, resume, allow_config_change, log, "rolls out", device)
    state = loop.state
    if state and loop.start < loop.total and loop.start % cfg.rollout_reuse and not allow_config_change:
        # save_due writes `out` where a rollout batch ends, and at a run's last update, which may lie inside one:
        # extended (more updates), the run would roll out a new batch there
        raise ResumeError(f"refusing to resume {loop.out} at update {loop.start}: it lies inside a rollout batch "
                          f"(rollout_reuse={cfg.rollout_reuse}), and neither the batch nor the weights that rolled it "
                          "out are saved, so the run would not continue as it began; pass --allow-config-change to "
                          "go on with a new batch there, or choose another --out")

    def read_model():
        if state:
            model, tok, manifest = load_checkpoint(loop.out, device=dist.device)
        else:
            model, tok, manifest = load_checkpoint(cfg.base, device=dist.device)
            require_objective(manifest, "block_diffusion", cfg.base)  # rollouts go through the dLLM engine
            if cfg.rollout.residual == "adapter":
                model = with_adapter(model, cfg.adapter_dim, cfg.adapter_alpha, cfg.seed).to(dist.device)
        return model, tok, manifest, base_layout(manifest, cfg.rollout)

    # every rank reads the checkpoint; one that cannot stops them all (Dist.on_every)
    model, tok, manifest, rollout_cfg = dist.on_every(read_model)
    w = cfg.weights
    if (w.lambda_ar > 0 or w.lambda_ar_kl > 0) and not model.args.shift_logits:
        raise ValueError(f"weights.lambda_ar {w.lambda_ar} / lambda_ar_kl {w.lambda_ar_kl} anchor the AR path of a shifted "
                         f"base (the fused self-speculative decoder's); {cfg.base} has shift_logits=false: set them to 0")
    # the AR path's reference: the base as it was before ORL (read again on resume), frozen
    ar_ref = dist.on_every(lambda: frozen(load_checkpoint(cfg.base, device=dist.device)[0])) if w.lambda_ar_kl > 0 else None
    opt = make_optimizer(model, cfg.lr, adapter_lr=cfg.adapter_lr)
    if state:
        opt.load_state_dict(state["optimizer"])
    ids = special_ids(tok, model.args.vocab_size)
    # rollouts and evals decode with the plain model, the updates go through DDP
    engine = rollout_engine(model, tok, cfg)
    check_eval_fits(cfg.tasks, tok, cfg.eval_samples, rollout_cfg.max_new_tokens, engine.max_len, ar=False,
                    block_len=rollout_cfg.block_len, layout=rollout_cfg.layout, fix=eval_fix(cfg, rollout_cfg, model))
    if model.model.residual_adapter is not None and rollout_cfg.residual != "adapter":
        # an adapter this run never uses is frozen (it got no gradient anyway), rather than DDP's find_unused_parameters,
        # which refuses a head the losses read outside the wrapped forward (an untied head: "marked ready twice")
        model.model.residual_adapter.requires_grad_(False)
    ddp = dist.wrap(model)
    gen_tokens = state["generated_tokens"] if state else 0
    rollouts, ref_model = [], None
    t0 = time.perf_counter()
    for update in loop.steps():
        if update % cfg.rollout_reuse == 0 or not rollouts:
            model.eval()
            samples = sample_prompts(cfg.tasks, cfg.prompts_per_update, f"orl|{cfg.seed}|{update}")
            mine = dist.shard(len(samples))  # whole prompts (their groups stay together for keep="fastest")
            rollouts = collect(engine, samples[mine.start:mine.stop], cfg.group_size, rollout_cfg,
                               seed=cfg.seed * 7919 + update, first=mine.start, keep_reward=cfg.keep_reward)
            stats = rollout_stats(rollouts, dist)
            gen_tokens += stats["tokens"]
            # stale ablation: the rollout distribution comes from the weights that produced it
            ref_model = copy.deepcopy(model).eval() if cfg.rollout_reuse > 1 else None
        kept = select_kept(rollouts, cfg.group_size, cfg.keep)
        rec = {"update": update + 1, **{f"rollout_{k}": v for k, v in stats.items()}, "generated_tokens": gen_tokens}
        if cfg.relabel == "reference":
            extra = relabel_unverified(rollouts, kept, cfg.group_size, tok, ids, rollout_cfg, cfg.keep_reward)
            kept = kept + extra
            n_extra = dist.all_sum(torch.tensor([len(extra), sum(len(r.gen.trace) for r in extra)])).tolist()
            rec["relabelled"], rec["relabelled_states"] = n_extra
        model.train()
        rec.update(orl_update(ddp, opt, kept, rollouts, cfg, rollout_cfg, ids, ref_model, dist, ar_ref))
        done = update + 1
        if loop.due(done, cfg.eval_every):  # rank 0 evaluates; its failure stops every rank (Dist.on_main)
            ecfg = DecodeConfig(**{**rollout_cfg.to_dict(), "temperature": 0.0, "threshold": cfg.eval_threshold})
            ev = dist.on_main(lambda: heldout_eval(engine, cfg.tasks, ecfg, cfg.eval_samples))
            if dist.main:
                rec["eval"] = ev
                log(f"update {done}: acc {100 * mean_over_tasks(ev, 'acc'):.1f}% tpf {mean_over_tasks(ev, 'tpf'):.2f} "
                    f"{json.dumps(ev)}")
        rec["wall_s"] = round(time.perf_counter() - t0, 1)
        loop.bar.set_postfix(reward=f"{stats['reward']:.2f}", tpf=f"{stats['tpf']:.2f}",
                             steps=f"{stats['steps_per_block']:.2f}", loss=f"{rec.get('loss', float('nan')):.3f}")
        loop.write(rec)
        save_due(loop, model, tok, opt, "orl", rollout_cfg, done, gen_tokens, cfg.base, manifest, cfg.save_every,
                 reuse=cfg.rollout_reuse)
    loop.finish()
    model.eval()
    return model


def orl_update(ddp: torch.nn.Module, opt: torch.optim.Optimizer, kept: list, rollouts: list, cfg: ORLConfig,
               rollout_cfg: DecodeConfig, ids, ref_model: Transformer | None, dist: Dist = SINGLE,
               ar_ref: Transformer | None = None) -> dict:
    """One optimizer update on this process's kept rollouts, each loss term averaged over the responses
    of every process, so that the update is the single-process one; the log fields, or {} when no
    process kept a rollout (then nothing changes). ar_ref: the frozen base of the lambda_ar_kl anchor."""
    model = getattr(ddp, "module", ddp)
    w = cfg.weights
    # a process that kept nothing replays one rollout at weight 0: every process must run the same
    # forward and backward for DDP, and a zero weight adds nothing to the gradient
    units = [make_unit(r, rollout_cfg.block_len, ids.eos, model.args.dim, cfg.kl_conf, rollout_cfg.layout,
                       rollout_cfg.max_new_tokens) for r in kept or rollouts[:1]]
    batch = build_batch(units, pack(units, cfg.row_tokens), ids.pad)
    ar = None
    # the AR anchors' rows: every rollout for the KL, else the verified kept ones (relabelled rollouts are cut
    # states of wrong answers: the next-token loss reads whole verified answers only)
    verified = [r for r in kept if r.verified]
    if w.lambda_ar > 0 or w.lambda_ar_kl > 0:
        rows = rollouts if w.lambda_ar_kl > 0 else verified or rollouts[:1]
        ar = rollout_ar_batch(rows, ids.pad, ids.eos)
        mine = {id(r) for r in verified}
        w_nll = ar.weight * torch.tensor([float(id(r) in mine) for r in rows])[:, None] * (w.lambda_ar > 0)
        w_kl = ar.weight * (w.lambda_ar_kl > 0)
    n_nll, n_kl = (int(w_nll.sum()), int(w_kl.sum())) if ar is not None else (0, 0)  # weights are 0 or 1
    local = torch.cat([response_counts(batch), torch.tensor([len(batch.tokens), batch.n_states])])
    # [0:3] response counts, 3 rows, 4 states, 5 anchor tokens kept, 6 anchor tokens of every rollout, 7 kept
    counts = dist.all_sum(torch.cat([local * bool(kept), torch.tensor([n_nll, n_kl, len(kept)])]))
    if not counts[-1]:
        return {}
    opt.zero_grad(set_to_none=True)
    l_nll = l_kl = None
    if ar is not None:  # its own backward, accumulated locally; the ORL loss's backward below syncs both
        with dist.no_sync(ddp, skip=True):
            s_nll, s_kl = ar_anchor_sums(ddp, ar, w_nll, w_kl, ar_ref, w.kl_cap)
            l_nll, l_kl = s_nll / counts[5].clamp(min=1), s_kl / counts[6].clamp(min=1)  # over every process's tokens
            ((w.lambda_ar * l_nll + w.lambda_ar_kl * l_kl) * dist.world).backward()
        l_nll, l_kl = l_nll.detach(), l_kl.detach()
    loss, parts = orl_loss(ddp, batch, rollout_cfg.residual, ids, w, ref_model, norm=counts[:3])
    # DDP averages gradients over processes; world x this process's share is the whole loss's gradient
    (loss * (dist.world if kept else 0.0)).backward()
    norms = clip(model, cfg).tolist()  # the synced gradients: the same on every process
    opt.step()
    l_nll, l_kl = (loss.new_zeros(()) if x is None else x.to(loss.dtype) for x in (l_nll, l_kl))
    terms = torch.stack([(loss + w.lambda_ar * l_nll) * bool(kept) + w.lambda_ar_kl * l_kl, parts["pred"] * bool(kept),
                         parts["aec"] * bool(kept), parts["kl"] * bool(kept), parts["entropy"] * batch.n_states * bool(kept),
                         l_nll, l_kl, parts["cf"] * bool(kept)]).detach()
    terms = dist.all_sum(terms.cpu().double()).tolist()  # logging: one sync per update
    return {"loss": round(terms[0], 5), "pred": round(terms[1], 5), "aec": round(terms[2], 5),
            "kl": round(terms[3], 5), "entropy": round(terms[4] / max(int(counts[4]), 1), 5),
            **({"ar": round(terms[5], 5)} if w.lambda_ar > 0 else {}),
            **({"ar_kl": round(terms[6], 5)} if w.lambda_ar_kl > 0 else {}),
            **({"cf": round(terms[7], 5)} if w.lambda_cf > 0 else {}),
            "grad_norm": round(norms[0], 5), **({"adapter_grad_norm": round(norms[1], 5)} if len(norms) > 1 else {}),
            "kept": int(counts[7]), "rows": int(counts[3])}


def frozen(model: Transformer) -> Transformer:
    return model.eval().requires_grad_(False)


def base_layout(manifest: dict, rollout: DecodeConfig) -> DecodeConfig:
    """The recipe's rollout settings in the base's block length and layout (orl.json; a converted model
    records absolute_grid): rollouts decode, and the replay rebuilds their states, as the base was
    trained. A layout the replay cannot rebuild is refused by name."""
    cfg = DecodeConfig.from_manifest(manifest, **{**rollout.to_dict(), "block_len": None, "layout": None}).validate()
    if cfg.layout not in LAYOUTS:
        raise ValueError(f"rollouts need a block layout {LAYOUTS}; the base records layout {cfg.layout!r}")
    return cfg


# what the base's orl.json says about decoding beyond block length and layout (EOS / end-of-turn ids, the
# mask token's name, Fast-dLLM v2 sub-blocks): the trained model decodes as its base does
CARRIED = ("eos_ids", "eos_tokens", "mask_token", "sub_block_len")


def save_update(loop: TrainLoop, model: Transformer, tok, opt: torch.optim.Optimizer, recipe: str,
                rollout_cfg: DecodeConfig, update: int, gen_tokens: int, base: str, base_manifest: dict,
                target: Path | None = None, recipe_extra: dict | None = None) -> None:
    """Atomic checkpoint + trainer state (optimizer, update, token budget) for exact resume. The decode
    fields of the base (block length, layout, CARRIED) stay, so the result decodes as its base does.
    target: a keep_every copy instead of `out` (written first, so a crash in between writes it again).
    recipe_extra: more orl.json recipe fields (a draft-only run's verifier)."""
    model.eval()
    loop.save(model, tok, {**{k: base_manifest[k] for k in CARRIED if k in base_manifest},
                           "objective": "block_diffusion", "block_len": rollout_cfg.block_len,
                           "layout": rollout_cfg.layout, "residual_mode": rollout_cfg.residual,
                           "recipe": {"name": recipe, "config": loop.config, "update": update, "base": base,
                                      "base_weights": base_weights(base), "generated_tokens": gen_tokens,
                                      **(recipe_extra or {})}},
              opt, update, target, generated_tokens=gen_tokens)


def save_due(loop: TrainLoop, model: Transformer, tok, opt: torch.optim.Optimizer, recipe: str,
             rollout_cfg: DecodeConfig, done: int, gen_tokens: int, base: str, base_manifest: dict,
             save_every: int, recipe_extra: dict | None = None, reuse: int = 1) -> None:
    """After update `done`: its keep_every snapshot (before `out`: a crash in between writes it again on
    resume), then `out` when save_every says so (save_update). reuse: updates per rollout batch (ORL's
    rollout_reuse); a save due inside a batch waits for its last update, since neither the batch nor the
    weights that rolled it out are saved and a run resumed there could not continue it."""
    if done in loop.snapshots:
        save_update(loop, model, tok, opt, recipe, rollout_cfg, done, gen_tokens, base, base_manifest,
                    loop.snapshots[done], recipe_extra)
    if loop.due(done, save_every, reuse):
        save_update(loop, model, tok, opt, recipe, rollout_cfg, done, gen_tokens, base, base_manifest,
                    recipe_extra=recipe_extra)
