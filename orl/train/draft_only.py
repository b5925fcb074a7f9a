"""Draft-only conversion (`ConvertConfig.draft_only`): the base's weights, frozen, run every clean row; a trained
copy runs the noisy and draft rows (orl.model.row_split).

Why: self-speculative decoding emits exactly the AR path of whatever scores the clean rows. A whole-model
conversion moves that path (gemma-3-270m, 300 CPU steps: next-block exact match 27/128 -> 17/128), so its
lossless output is no longer the base's. With the base on the clean rows the output is the base's greedy
continuation by construction, and training only has to make the drafts agree with it: the draft rows learn
against the base's own K/V (what they attend to at decode time) and, with draft_target "ar", the base's own
greedy tokens. Every batch of the recipe puts its `window` clean tokens first (staircase rows: the clean copy,
then the noisy blocks; draft rows: the clean sequence, then the mask groups), so row `window` is where the
drafter starts, in the forward and in the backward that recomputes it (activation checkpointing).

Costs: twice the weights in memory; no gradient reaches the clean rows (their weights and inputs are
frozen), so the backward runs over the noisy rows only. The loss reads the head off the clean rows'
weights (Transformer.read_out through RowSplit.weight), so the embeddings must stay frozen, where the two
heads are equal. The run saves the drafter alone (orl.model.row_split.drafter_of) and records its verifier;
decode it with its base as verifier (benchmarks/convert_eval.py --spec-verifier ar).
"""
from __future__ import annotations

import copy

import torch

from orl.model.model import Transformer
from orl.model.row_split import params_outside_units, verify_with


def draft_only_problems(cfg) -> list[str]:
    """ConvertConfig.__post_init__'s checks of the draft-only fields."""
    if not cfg.draft_only:
        return (["init_from is for draft_only runs (it starts the drafter)"] if cfg.init_from else []) + \
            draft_rank_problems(cfg)
    problems = draft_rank_problems(cfg)
    if not cfg.freeze_embeddings:
        problems.append("draft_only needs freeze_embeddings: the loss reads the head off the frozen base's rows, "
                        "which equals the drafter's only while the (tied) embeddings stay frozen")
    if cfg.ar_aux > 0:
        problems.append(f"draft_only trains no clean row (the frozen base runs them): ar_aux {cfg.ar_aux} would "
                        "weigh a loss nothing can learn from; set ar_aux=0")
    if cfg.parallel != "ddp":
        problems.append("draft_only runs without sharding (parallel ddp)")
    return problems


def draft_rank_problems(cfg) -> list[str]:
    if type(cfg.draft_rank) is not int:  # a bool is an int to isinstance
        return [f"draft_rank must be a whole number, got {cfg.draft_rank!r}"]
    return ["draft_rank is for draft_only runs (a low-rank delta on the base's linears)"] \
        if cfg.draft_rank and not cfg.draft_only else []


def draft_only_model(cfg, teacher: Transformer, resumed: Transformer | None, device,
                     resume_dir=None) -> Transformer:
    """The split model: `teacher` (the base, frozen) on the clean rows; on the others the resumed run's
    drafter, else cfg.init_from's, else a copy of the base with the shifted read-out. With cfg.draft_rank the
    draft rows' linears are the base's plus a trained rank-r delta (orl.train.draft_lora), whose factors a
    resumed run reads back from `resume_dir`."""
    from orl.checkpoint import CheckpointError, load_checkpoint
    from orl.train.convert_base import to_diffusion

    teacher.requires_grad_(False)
    if resumed is not None:
        drafter = resumed
    elif cfg.init_from:
        drafter, _, manifest = load_checkpoint(cfg.init_from, device=device, dtype=torch.float32)
        if manifest.get("objective") != "block_diffusion":
            raise CheckpointError(f"init_from {cfg.init_from} is not a block-diffusion checkpoint (a conversion of "
                                  f"{cfg.base})")
    else:
        drafter = to_diffusion(copy.deepcopy(teacher))
    drafter.requires_grad_(True)
    if cfg.freeze_embeddings:
        # the loss reads the head off the clean rows' unit (RowSplit.weight), so the drafter's head (tied or not)
        # must be the base's and stay so (module docstring)
        for name in ("model.embed_tokens.weight", "lm_head.weight"):
            mine, theirs = drafter.get_parameter(name), teacher.get_parameter(name)
            mine.requires_grad_(False)
            if not torch.equal(mine, theirs):
                raise CheckpointError(f"init_from {cfg.init_from}'s {name} differs from the base's: draft_only trains "
                                      "with the base's (frozen) embeddings and head; start from a conversion that "
                                      "froze them")
    model = verify_with(drafter, teacher, share_equal=False)
    for p in params_outside_units(model):  # they run on the clean rows too: trained, the verifier would move
        p.requires_grad_(False)
    if cfg.draft_rank:
        from pathlib import Path

        from orl.train.draft_lora import ADAPTER_FILE, adapter_shapes, read_factors, trainable_low_rank

        factors = None
        if resume_dir is not None:
            if not (Path(resume_dir) / ADAPTER_FILE).is_file():
                raise CheckpointError(f"{resume_dir} has no {ADAPTER_FILE}: it was not saved by a draft_rank "
                                      f"{cfg.draft_rank} run, so its optimizer state does not fit these factors")
            factors = read_factors(resume_dir, adapter_shapes(model, cfg.draft_rank), cfg.draft_rank)
        model.low_rank_info = trainable_low_rank(model, cfg.draft_rank, cfg.seed, factors)
    return model
