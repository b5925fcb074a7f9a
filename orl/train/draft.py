"""The draft recipe: on-policy training of the fused self-draft (docs/TRAINING.md, "Session 32").

A block-diffusion checkpoint with the shifted read-out (best one trained with `ar_aux`) decodes
self-speculatively (`spec_draft = "fused"`): its output is exactly its AR path's, and its speed is how much of its
diffusion path's drafts that path accepts. This recipe trains the
acceptance where it is read: roll out with the current weights through that decoder (the same ARDecoder that
serves), keep the verified answers, train the diffusion path on them in the decoder's own draft geometry
(orl.train.draft_rows: every answer cut, m masks after it) beside a next-token loss on the answer at `ar_weight`
(which, on the model's own greedy tokens, does not hold the AR path in place) and, at `kl_weight`, a capped
reverse KL of the AR path to the frozen base at the same positions (the anchor that does), then roll out again
with the new weights. No residual and no replay of denoising states: a fused round has none, its states are the
cuts. The KL's reference is the base, not the rollout policy as in ORL's L_KL (DESIGN.md): rollouts here are
always fresh, so ORL's anchor would be 0; what must not move is the base's AR path, the decoder's output.

`draft_only` holds it exactly instead (docs/TRAINING.md, "Session 47"): the base, frozen, runs every clean row (its
AR path verifies) and a copy of it runs the draft rows and trains (orl.train.draft_only, orl.model.row_split), so
the outputs are the base's token for token and only the TPF moves; the run saves the drafter, which records its
verifier and decodes only beside it.
"""
from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import ClassVar

import torch
from tqdm import tqdm

from orl.engine import DecodeConfig
from orl.engine.ar import ARDecoder
from orl.engine.ar_step import ARConfig
from orl.engine.stops import with_stop
from orl.eval.tasks import get_task
from orl.eval.tasks.custom import reward_of
from orl.model.row_split import draft_rows_from, drafter_of
from orl.model.vocab import special_ids
from orl.train.dist import SINGLE, Dist, shard_rows
from orl.train.draft_rows import anchors, answer_weights, draft_rows, loss_sums
from orl.train.heldout import mean_over_tasks
from orl.train.loop import check_fields, make_optimizer
from orl.train.orl import SHIPPED_BASE, base_layout, save_due
from orl.train.rollout import Rollout, rollout_stats, sample_prompts, start_run


@dataclass(frozen=True)
class DraftConfig:
    base: str = SHIPPED_BASE
    tasks: tuple[str, ...] = ()         # empty: the tasks the base was trained on
    updates: int = 100
    prompts_per_update: int = 16
    spec_tokens: int = 4                # m: draft tokens per round, as the decoder will run (ARConfig.spec_tokens)
    max_new_tokens: int = 64
    temperature: float = 0.0            # rollouts: 0 = the AR path's greedy tokens, what the fused decoder emits
    # the answer's next-token CE (its own mean) at this weight beside the draft CE's mean. On the model's own greedy
    # tokens it is small and does not anchor the AR path (docs/TRAINING.md, session 32: the same outputs with 0)
    ar_weight: float = 0.5
    # min(KL(p_theta || p_base), kl_cap) of the AR path at the answers' positions, mean over them, at this weight
    # (0: off, no reference model is loaded)
    kl_weight: float = 0.0
    kl_cap: float = 1.0
    stride: int = 1                     # a draft group every `stride` answer cuts
    lr: float = 5e-5
    grad_clip: float = 1.0
    keep_reward: float = 1.0            # a rollout supervises when its task reward reaches this
    # the base, frozen, verifies (its weights on every clean row) and a copy of it drafts and trains
    # (orl.train.draft_only): the outputs stay the base's token for token; the run saves the drafter, which records
    # its verifier. Nothing then trains the AR path, so ar_weight and kl_weight must be 0
    draft_only: bool = False
    # draft_only: the checkpoint whose weights verify (empty: the base). Another model of the base's architecture
    # and tokenizer - an AR model, whose greedy tokens the decode then emits exactly - with the base drafting
    verifier: str = ""
    ce_chunk: int = 256
    row_tokens: int = 8192              # tokens (rows x row length) per forward; an update runs as many as it needs
    engine_max_len: int = 1024
    eval_every: int = 25
    eval_samples: int = 20
    save_every: int = 10
    keep_every: int = 0
    seed: int = 0
    threads: int = 0
    RESUME_FREE: ClassVar[frozenset[str]] = frozenset({"updates"})
    # what orl.train.draft_only.draft_only_model reads besides draft_only: this recipe's drafter is the base, in
    # full (no low-rank form, no other start)
    init_from: ClassVar[str] = ""
    draft_rank: ClassVar[int] = 0

    @property
    def freeze_embeddings(self) -> bool:
        # verified by the base, the drafter keeps the base's (tied) embeddings and head; beside another verifier
        # they are its own, differ from the verifier's, and train with it (the loss reads each row's own head)
        return not self.verifier

    def __post_init__(self):
        problems = check_fields(self, positive=("updates", "prompts_per_update", "spec_tokens", "max_new_tokens",
                                                "stride", "lr", "grad_clip", "ce_chunk", "row_tokens", "engine_max_len",
                                                "eval_every", "eval_samples", "save_every", "kl_cap"),
                                non_negative=("temperature", "ar_weight", "kl_weight", "keep_every", "threads"))
        if self.max_new_tokens < 3:
            problems.append(f"max_new_tokens must be >= 3 (an answer needs a token after its first draft's bonus slot), "
                            f"got {self.max_new_tokens}")
        longest = self.engine_max_len + self.max_new_tokens * self.spec_tokens // self.stride
        if self.row_tokens < longest:
            problems.append(f"row_tokens ({self.row_tokens}) must hold the longest row: engine_max_len + "
                            f"max_new_tokens x spec_tokens / stride = {longest}")
        if not 0.0 < self.keep_reward <= 1.0:
            problems.append(f"keep_reward must be in (0, 1], got {self.keep_reward}")
        if self.draft_only and (self.ar_weight or self.kl_weight):
            problems.append(f"draft_only trains the drafter alone (the frozen base runs the clean rows): ar_weight "
                            f"{self.ar_weight} and kl_weight {self.kl_weight} would weigh terms nothing can learn "
                            "from; set both to 0")
        if self.verifier and not self.draft_only:
            problems.append(f"verifier {self.verifier} is for draft_only runs (a separate model on the clean rows)")
        if problems:
            raise ValueError("invalid DraftConfig: " + "; ".join(problems))

    def to_dict(self) -> dict:
        return asdict(self)

    def decode(self, stop: tuple[str, ...] = (), temperature: float | None = None) -> ARConfig:
        """The fused self-speculative decode the recipe rolls out and evaluates with."""
        t = self.temperature if temperature is None else temperature
        return with_stop(ARConfig(max_new_tokens=self.max_new_tokens, temperature=t, spec_tokens=self.spec_tokens,
                                  spec_draft="fused"), stop)


@torch.no_grad()
def roll_out(dec: ARDecoder, samples: list, cfg: DraftConfig, seed: int, temperature: float | None = None) -> list[Rollout]:
    """One fused decode per sample (speculative decoding runs at batch 1), with the sample's task stop strings;
    an answer cut at max_new_tokens earns nothing (orl.train.rollout's Rollout, rollout_stats counts them)."""
    out = []
    for i, s in enumerate(samples):
        task = get_task(s.task)
        g = dec.generate_ids([dec.encode(s.prompt)], cfg.decode(tuple(task.stop), temperature),
                             seeds=[seed * 1_000_003 + i])[0]
        reward = reward_of(task, s.prompt, g.text) if g.finished else 0.0
        out.append(Rollout(s, g, reward >= cfg.keep_reward, reward))
    return out


def heldout(dec: ARDecoder, cfg: DraftConfig, tasks: tuple[str, ...]) -> dict:
    """Greedy fused decoding of the first eval_samples held-out prompts per family: accuracy and TPF."""
    res = {}
    for name in tasks:
        task = get_task(name)
        rolls = roll_out(dec, [task.sample("heldout", i) for i in range(cfg.eval_samples)], cfg, 0, temperature=0.0)
        res[name] = {"acc": round(sum(task.verify(r.sample.prompt, r.gen.text) for r in rolls) / len(rolls), 3),
                     "tpf": round(rollout_stats(rolls)["tpf"], 2)}
    return res


IDLE_LIMIT = 10  # updates in a row without a kept answer before the run stops: it would train nothing


def micro_batches(kept: list, cfg: DraftConfig) -> list[list]:
    """The kept (prompt, answer) pairs in groups whose padded rows hold at most cfg.row_tokens tokens (draft-only:
    rows whose groups all start after the group's longest sequence, draft_rows' clean_width)."""
    out, cur, width, longest, groups = [], [], 0, 0, 0
    for p, a in sorted(kept, key=lambda pa: -len(pa[0]) - len(pa[1])):
        L = len(p) + len(a)
        g = len(anchors(len(p), L, cfg.stride)) * cfg.spec_tokens
        # its row's length (draft_rows), or the group's with it
        n = max(longest, L) + max(groups, g) if cfg.draft_only else max(width, L + g)
        if cur and (len(cur) + 1) * n > cfg.row_tokens:
            out.append(cur)
            cur, width, longest, groups = [], 0, 0, 0
        cur.append((p, a))
        width, longest, groups = max(width, L + g), max(longest, L), max(groups, g)
    return out + [cur] if cur else out


def update_on(model, opt, kept: list, cfg: DraftConfig, ids, dist: Dist = SINGLE, ref=None) -> dict:
    """One optimizer step: mean draft CE + ar_weight x mean next-token CE + kl_weight x mean KL to `ref` (the
    frozen base; None: no KL term) over every kept answer, each mean over its own positions, accumulated over
    micro-batches of at most row_tokens."""
    parts = []
    for group in micro_batches(kept, cfg):
        seqs, starts = [p + a for p, a in group], [len(p) for p, _ in group]
        width = max(map(len, seqs)) if cfg.draft_only else None  # one cut: clean columns, then draft ones
        rows = draft_rows(seqs, starts, cfg.spec_tokens, ids.mask, ids.pad, cfg.stride, width)
        # draft-only: no next-token term (the frozen verifier runs the clean rows)
        ar_w = torch.zeros_like(rows.weight) if cfg.draft_only else answer_weights(rows, seqs, starts)
        parts.append((rows, ar_w, width))
    n_draft = sum(float(r.weight.sum()) for r, _, _ in parts)
    n_ar = sum(float(w.sum()) for _, w, _ in parts)
    opt.zero_grad(set_to_none=True)
    draft = ar = kl = 0.0
    for rows, ar_w, width in parts:
        with draft_rows_from(model, width):  # width None: every row clean (and a no-op for an unsplit model)
            d, a, k = loss_sums(model, shard_rows(rows, dist), ar_w.to(dist.device), cfg.ce_chunk, ref, cfg.kl_cap)
            (d / max(n_draft, 1e-6) + (cfg.ar_weight * a + cfg.kl_weight * k) / max(n_ar, 1e-6)).backward()
        draft, ar, kl = draft + float(d.detach()), ar + float(a.detach()), kl + float(k.detach())
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
    opt.step()
    d_mean, a_mean, k_mean = draft / max(n_draft, 1e-6), ar / max(n_ar, 1e-6), kl / max(n_ar, 1e-6)
    rec = {"loss": round(d_mean + cfg.ar_weight * a_mean + cfg.kl_weight * k_mean, 5),  # k_mean is 0 without ref
           "draft_ce": round(d_mean, 5), "ar_ce": round(a_mean, 5), "grad_norm": round(float(norm), 5),
           "micro_batches": len(parts)}
    if ref is not None:
        rec["kl"] = round(k_mean, 6)
    return rec


def split_model(cfg: DraftConfig, model, resumed_manifest: dict | None, base_manifest: dict, device):
    """(the verifier, frozen, on the clean rows beside a drafter; the manifest's recipe.verifier record) for a
    draft-only run. The verifier is cfg.verifier, else the base; the drafter is `model`: the run's saved drafter
    when it resumes (its recorded verifier must still be these files), else the base (copied when it also
    verifies)."""
    from orl.checkpoint import CheckpointError, load_checkpoint, portable_path, read_manifest, recorded_verifier
    from orl.train.convert_base import base_digest
    from orl.train.draft_only import draft_only_model

    where = cfg.verifier or cfg.base
    v_manifest = read_manifest(where) if cfg.verifier else base_manifest
    digest = base_digest(where, v_manifest)
    if resumed_manifest is not None and recorded_verifier(resumed_manifest).get("base_files_sha256") != digest:
        raise CheckpointError(f"{where}'s files changed since this run began (its drafter records another "
                              "verifier digest): the drafts trained so far were for other clean rows")
    if cfg.verifier:
        if v_manifest.get("objective") not in ("autoregressive", "block_diffusion"):
            raise CheckpointError(f"verifier {where} holds a {v_manifest.get('objective')} model: it must read out "
                                  "next tokens (an autoregressive or block-diffusion checkpoint)")
        if base_digest(where, v_manifest, "tokenizer") != base_digest(cfg.base, base_manifest, "tokenizer"):
            raise CheckpointError(f"verifier {where} and base {cfg.base} have different tokenizer files: drafts "
                                  "and verified tokens must be the same ids")
    if cfg.verifier or resumed_manifest is not None:
        teacher, drafter = load_checkpoint(where, device=device)[0], model
    else:  # a fresh run verified by the base: `model` is the base, and draft_only_model copies it as the drafter
        teacher, drafter = model, None
    split = draft_only_model(cfg, teacher, drafter, device)
    return split, {"verifier": {"base": portable_path(where), "base_files_sha256": digest}}


def train_draft(cfg: DraftConfig, out: str | Path, resume: bool = True, allow_config_change: bool = False,
                log=tqdm.write, device: str | None = None):
    from orl.checkpoint import load_checkpoint, read_manifest, recorded_verifier, require_objective
    from orl.engine.self_draft import check_self_draft

    cfg, dist, loop = start_run(cfg, out, resume, allow_config_change, log, "rolls out", device,
                                check_base=not cfg.draft_only)  # draft-only: split_model checks the verifier's files
    if dist.world > 1:
        raise ValueError("the draft recipe runs in one process (its rollouts decode one prompt at a time)")
    state = loop.state
    model, tok, manifest = load_checkpoint(loop.out if state else cfg.base, device=dist.device)
    require_objective(manifest, "block_diffusion", cfg.base)
    try:  # a mask token and the shifted read-out: a diffusion path to draft with, an AR path to verify
        check_self_draft(model, tok.mask_id, manifest.get("objective"), "fused")
    except ValueError as e:
        raise ValueError(f"the draft recipe cannot train {cfg.base}: {e}") from None
    base_manifest = read_manifest(cfg.base)
    layout = base_layout(base_manifest, DecodeConfig())  # what the checkpoint records, so the result decodes alike
    extra = {}
    if state and bool(recorded_verifier(manifest)) != cfg.draft_only:
        raise ValueError(f"{loop.out} was trained with draft_only {not cfg.draft_only}: draft_only cannot change on "
                         "resume (the saved weights and optimizer state are of the other form); start a new run")
    if cfg.draft_only:
        model, extra = split_model(cfg, model, manifest if state else None, base_manifest, dist.device)
    opt = make_optimizer(model, cfg.lr)
    if state:
        opt.load_state_dict(state["optimizer"])
    ids = special_ids(tok, model.args.vocab_size)
    ref = None
    if cfg.kl_weight > 0:  # the base, frozen: what the KL holds the AR path to (on resume too: cfg.base, not out)
        ref = load_checkpoint(cfg.base, device=dist.device)[0].eval().requires_grad_(False)
    dec = ARDecoder(model, tok, max_len=min(cfg.engine_max_len, model.args.max_seq_len), manifest=manifest)
    gen_tokens = state["generated_tokens"] if state else 0
    t0, idle = time.perf_counter(), 0
    for update in loop.steps():
        model.eval()
        samples = sample_prompts(cfg.tasks, cfg.prompts_per_update, f"draft|{cfg.seed}|{update}")
        rolls = roll_out(dec, samples, cfg, cfg.seed * 7919 + update)
        st = rollout_stats(rolls)
        gen_tokens += st["tokens"]
        kept = [(dec.encode(r.sample.prompt), r.gen.token_ids) for r in rolls if r.verified and r.gen.n_tokens >= 2]
        rec = {"update": update + 1, **{f"rollout_{k}": v for k, v in st.items()}, "kept": len(kept),
               "generated_tokens": gen_tokens}
        idle = 0 if kept else idle + 1
        if idle >= IDLE_LIMIT:
            raise RuntimeError(f"{IDLE_LIMIT} updates in a row kept no verified answer (of {cfg.prompts_per_update} "
                               f"prompts each): the run would train nothing; check the base, the tasks, keep_reward "
                               f"and max_new_tokens ({cfg.max_new_tokens})")
        if kept:
            model.train()
            rec.update(update_on(model, opt, kept, cfg, ids, dist, ref))
        done = update + 1
        if loop.due(done, cfg.eval_every):
            ev = heldout(dec, cfg, cfg.tasks)
            rec["eval"] = ev
            log(f"update {done}: acc {100 * mean_over_tasks(ev, 'acc'):.1f}% tpf {mean_over_tasks(ev, 'tpf'):.2f} "
                f"{json.dumps(ev)}")
        rec["wall_s"] = round(time.perf_counter() - t0, 1)
        loop.bar.set_postfix(reward=f"{st['reward']:.2f}", tpf=f"{st['tpf']:.2f}", loss=f"{rec.get('loss', float('nan')):.3f}")
        loop.write(rec)
        save_due(loop, drafter_of(model), tok, opt, "draft", layout, done, gen_tokens, cfg.base, base_manifest,
                 cfg.save_every, extra)
    loop.finish()
    model.eval()
    return model
