"""The convert recipe (issue 22 item 1): a pretrained AR checkpoint -> a block-diffusion LM.

The QwenDLM / Dream / Fast-dLLM v2 route: the converted model keeps the AR shift (ModelArgs
.shift_logits: the state at position i - 1 predicts token i, where AR pretraining put that skill) and
learns to fill masked blocks under the staircase training mask the pretrain recipe uses
(batches.diffusion_batch): clean context + answer blocks, then a noisy copy of every block, loss on
the masked positions only. Rows are windows of offline text (orl.train.corpus).

Layout (`layout`, recorded in the manifest so the engine decodes the way the rows trained):
  absolute_grid  (default; SDAR, Fast-dLLM v2, LLaDA2) block = position // block_len from position 0:
                 the context is block-causal in blocks of block_len, so an AR model's prompt states
                 change only inside each block of B tokens, and at block_len 1 nothing changes.
  prompt_block   the context is one bidirectional block (the first layout; kept for comparison).

What keeps a 262k-vocabulary model trainable on a CPU: the head runs only at the masked positions,
a chunk at a time with the gradients computed in the same pass (orl.train.chunked_ce), so no
[tokens, V] logits tensor ever exists; bf16 autocast; activation checkpointing per block (a knob);
optionally frozen embeddings (with tied embeddings that freezes the head too, a third fewer head
matmuls and no optimizer state for 168M of gemma-3-270m's 268M weights).

`ar_aux` > 0 adds, for every stream's rows, the same windows as causal rows with a next-token loss at
that weight (batches.next_token_batch): the lesson of issue 21 (hint4g2), where a next-token loss beside
the diffusion loss kept the AR path's skill through stage 2. The converted checkpoint then carries the
base's AR path as well as its new diffusion path, and can decode self-speculatively (`orl generate
--spec-draft fused`: the AR path's tokens, drafted by the diffusion path).

Resume, logs, cadence and atomic checkpoints are orl.train.loop.TrainLoop's; every batch and noise
draw is a pure function of (seed, step), so a resumed run continues bit for bit.
"""
from __future__ import annotations

import functools
import json
import time
from pathlib import Path

import torch
from torch.utils.checkpoint import checkpoint
from tqdm import tqdm

from orl.device import native_bf16
from orl.model.model import Transformer
from orl.model.row_split import draft_rows_from, drafter_of
from orl.model.vocab import special_ids
from orl.train.batches import Batch, diffusion_batch, next_token_batch
from orl.train.chunked_ce import chunked_ce_sum, chunked_predict, one_cast_per_head
from orl.train.convert_base import base_digest, load_base, to_diffusion
from orl.train.convert_config import ConvertConfig, lr_at
from orl.train.corpus import (STREAMS, build_corpus, corpus_key, corpus_summary, fixed_windows,
                              read_corpus, windows, with_bos)
from orl.train.dist import SINGLE, Dist, setup, shard_rows
from orl.train.draft_eval import draft_agreement
from orl.train.draft_lora import ADAPTER_FILE, adapter_bytes
from orl.train.draft_only import draft_only_model
from orl.train.draft_rows import corpus_draft_batch, with_ar_targets
from orl.train.fsdp import gathered
from orl.train.loop import TrainLoop, make_optimizer
from orl.train.orl import CARRIED


def checkpoint_blocks(model: Transformer) -> None:
    """Activation checkpointing per block: each block's forward is recomputed in backward. Set on the
    instances, so parameter names and checkpoints are unchanged."""
    for layer in model.model.layers:
        layer.forward = functools.partial(checkpoint, layer.forward, use_reentrant=False)


def masked_loss_sum(model, batch: Batch, chunk: int) -> torch.Tensor:
    """Sum of weight x CE over the positions with weight > 0 (the masked ones): the body runs on the
    whole row, the head only there, under the shifted read-out (batch.read_from)."""
    core = getattr(model, "module", model)
    h = model(batch.tokens, batch.pos, batch.mask, return_hidden=True)
    b, t = (batch.weight > 0).nonzero(as_tuple=True)  # one host sync per micro-batch (the count varies)
    src = batch.read_from[t] if core.args.shift_logits and batch.read_from is not None else t
    return chunked_ce_sum(h[b, src], core.lm_head.weight, batch.targets[b, t], batch.weight[b, t], chunk,
                          core.args.final_logit_softcap)


def row_pairs(rows: torch.Tensor, context: int) -> list[tuple[list[int], list[int]]]:
    return [(r[:context].tolist(), r[context:].tolist()) for r in rows]


def make_batches(cfg: ConvertConfig, streams: dict, ids, step: int, bos: int | None = None) -> list[Batch]:
    """One micro-batch per stream with rows this step (each row starting with `bos`, if given); with
    ar_aux, then the same rows as causal next-token rows at that weight; with draft_aux, as draft rows
    (which carry the next-token term, so no separate causal rows)."""
    gen = torch.Generator().manual_seed(cfg.seed * 1_000_003 + step)
    out, aux = [], []
    for name, n in zip(STREAMS, cfg.mix):
        if n:
            rows = with_bos(windows(streams["code_train" if name == "code" else name], n, cfg.window, gen), bos)
            out.append(diffusion_batch(row_pairs(rows, cfg.context), cfg.block_len, ids, gen, cfg.noisy_copies,
                                       eos=False, grid=cfg.layout == "absolute_grid"))
            if cfg.draft_aux > 0:  # no draw from gen either
                aux.append(corpus_draft_batch(rows, cfg.context, cfg.draft_tokens, cfg.draft_stride, ids.mask,
                                              ids.pad, cfg.draft_aux, cfg.ar_aux))
            elif cfg.ar_aux > 0:  # no draw from gen: the diffusion rows stay those of a run without it
                b = next_token_batch(rows)
                b.weight *= cfg.ar_aux
                aux.append(b)
    return out + aux


def step_batches(cfg: ConvertConfig, streams: dict, ids, step: int, bos: int | None, model) -> list[Batch]:
    """make_batches, then (draft_target "ar") the draft batches' targets from `model`'s own AR path: a step's
    whole input, for the run and for benchmarks/convert_profile.py's timing alike."""
    batches = make_batches(cfg, streams, ids, step, bos)
    if cfg.draft_aux > 0 and cfg.draft_target == "ar":  # the draft batches come last, one per stream
        n = sum(1 for k in cfg.mix if k)
        dev = getattr(model, "module", model).lm_head.weight.device
        with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=cfg.bf16), one_cast_per_head():
            batches[-n:] = [with_ar_targets(model, b, cfg.window, cfg.ce_chunk) for b in batches[-n:]]
    return batches


def train_step(model, opt, batches: list[Batch], cfg: ConvertConfig, lr: float, dist: Dist = SINGLE) -> tuple[float, float]:
    """One optimizer step: the weighted mean masked CE over all micro-batches; (loss, grad norm)."""
    for g in opt.param_groups:
        g["lr"] = lr
    total_w = torch.stack([b.weight.sum() for b in batches]).sum().clamp(min=1e-6)
    opt.zero_grad(set_to_none=True)
    sums = []
    core = getattr(model, "module", model)
    with one_cast_per_head():  # the head changes only at opt.step(), after the scope
        for i, batch in enumerate(batches):
            rows = shard_rows(batch, dist)
            # every batch's first `window` rows are clean (orl.train.draft_only); a no-op without draft_only. The
            # backward too: activation checkpointing recomputes the forward there
            with dist.no_sync(model, skip=i < len(batches) - 1), draft_rows_from(core, cfg.window):
                with torch.autocast(dist.device.type, dtype=torch.bfloat16, enabled=cfg.bf16):
                    s = masked_loss_sum(model, rows, cfg.ce_chunk)
                (s * (dist.world / total_w)).backward()
            sums.append(s.detach())
    params = [p for p in getattr(model, "module", model).parameters() if p.requires_grad]
    norm = torch.nn.utils.clip_grad_norm_(params, cfg.grad_clip)
    opt.step()
    loss = dist.all_sum(torch.stack(sums)).sum() / total_w
    return float(loss), float(norm)


@torch.no_grad()
def evaluate(model: Transformer, streams: dict, cfg: ConvertConfig, ids, bos: int | None = None,
             batch_rows: int = 4) -> dict:
    """Held-out code windows, every answer block fully masked: the mean CE and the one-shot prediction
    (argmax of every position from one forward) per token and per whole block. A training-time curve;
    the engine's iterative decoding is measured by benchmarks/convert_eval.py."""
    was, dev = model.training, model.lm_head.weight.device
    model.eval()
    rows = with_bos(fixed_windows(streams["code_heldout"], cfg.eval_windows, cfg.window), bos)
    ce_sum, hits, n, blocks_hit, n_blocks = 0.0, 0, 0, 0, 0
    for k in range(0, len(rows), batch_rows):
        b = diffusion_batch(row_pairs(rows[k:k + batch_rows], cfg.context), cfg.block_len, ids,
                            torch.Generator().manual_seed(0), 1, eos=False, grid=cfg.layout == "absolute_grid")
        start = b.tokens.shape[1] - (cfg.window - cfg.context)   # the noisy copies, one per block
        b.tokens[:, start:] = ids.mask
        b = Batch(*(None if x is None else x.to(dev) for x in (b.tokens, b.pos, b.mask, b.targets, b.weight,
                                                                b.read_from)))
        with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=cfg.bf16):
            h = model(b.tokens, b.pos, b.mask, return_hidden=True)
        src = b.read_from[start:] if model.args.shift_logits else torch.arange(start, b.tokens.shape[1], device=dev)
        hs = h[:, src].flatten(0, 1)
        tgt = b.targets[:, start:].flatten()
        ce, top = chunked_predict(hs, model.lm_head.weight, tgt, cfg.ce_chunk, model.args.final_logit_softcap)
        ok = (top == tgt).view(len(b.tokens), -1, cfg.block_len)
        ce_sum, hits, n = ce_sum + float(ce.sum()), hits + int(ok.sum()), n + ok.numel()
        blocks_hit, n_blocks = blocks_hit + int(ok.all(-1).sum()), n_blocks + ok.shape[0] * ok.shape[1]
    with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=cfg.bf16):  # the fused decoder's drafts, estimated
        drafts = draft_agreement(model, rows, cfg.context, cfg.draft_tokens, cfg.draft_stride, ids.mask, ids.pad,
                                 cfg.ce_chunk)
    model.train(was)
    return {"heldout_loss": round(ce_sum / n, 4), "oneshot_token_acc": round(hits / n, 4),
            "oneshot_block_match": round(blocks_hit / n_blocks, 4), "windows": len(rows), "drafts": drafts}


def convert(cfg: ConvertConfig, out: str | Path, resume: bool = True, allow_config_change: bool = False,
            log=tqdm.write, device: str | None = None) -> Transformer:
    from orl.checkpoint import load_checkpoint, portable_path
    from orl.fetch import cache_dir

    dist = setup(device)
    loop = TrainLoop(cfg, out, cfg.steps, "step", resume=resume, allow_config_change=allow_config_change, log=log,
                     inputs={"--base": cfg.base}, dist=dist)
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    if not cfg.bf16 and dist.device.type == "cpu" and native_bf16("cpu"):
        log("note: this CPU runs bf16 matmuls natively (AVX512-BF16 / AMX): --set bf16=true trains ~1.4x faster "
            "(docs/TRAINING.md); a run keeps the precision it began with")

    def read_base():
        teacher, tok, manifest, mask = load_base(cfg, dist.device)
        files = base_digest(cfg.base, manifest)
        key = corpus_key(cfg.corpus, base_digest(cfg.base, manifest, "tokenizer"), files, cfg.seed)
        return teacher, tok, manifest, mask, files, key

    # every rank reads the base, the corpus and a resumed checkpoint; one that cannot (its node does not
    # see them) stops them all at once, naming itself and its error (Dist.on_every)
    teacher, tok, base_manifest, mask, base_files, key = dist.on_every(read_base)
    data_dir = Path(cfg.data_dir) if cfg.data_dir else cache_dir() / "corpus" / key
    # rank 0 builds the corpus (distilling with its teacher) while the others wait; then all read it
    dist.on_main(lambda: build_corpus(tok, cfg.corpus, data_dir, model=teacher, seed=cfg.seed, log=log))
    streams = dist.on_every(lambda: read_corpus(data_dir))
    model = dist.on_every(lambda: load_checkpoint(loop.out, device=dist.device)[0] if loop.state
                          else None if cfg.draft_only else to_diffusion(teacher))
    if cfg.draft_only:
        model = draft_only_model(cfg, teacher, model, dist.device, resume_dir=loop.out if loop.state else None)
        if cfg.draft_rank:
            log(f"low-rank drafter: {json.dumps(model.low_rank_info)}")
    del teacher
    if cfg.freeze_embeddings and not cfg.draft_only:
        model.model.embed_tokens.weight.requires_grad_(False)
    if cfg.checkpointing:
        checkpoint_blocks(model)
    ids, bos = special_ids(tok, model.args.vocab_size), getattr(tok, "bos_id", None)
    extra = {"base": cfg.base, "base_files_sha256": base_files, "mask_token": mask, "corpus": corpus_summary(data_dir)}
    if cfg.draft_only:  # the saved drafter decodes with this verifier (orl.train.draft_only)
        extra["verifier"] = {"base": portable_path(cfg.base), "base_files_sha256": base_files,
                             "init_from": cfg.init_from or None}
    model.train()
    ddp = dist.wrap(model, parallel=cfg.parallel, bf16=cfg.bf16)
    opt = make_optimizer(model, cfg.lr, cfg.weight_decay)  # on the parameters as they train (maybe sharded)
    if loop.state:
        loop.load_optimizer(model, opt)
    t_last, tokens_since, done = time.perf_counter(), 0, loop.start
    for step in loop.steps():
        batches = step_batches(cfg, streams, ids, step, bos, ddp)
        loss, norm = train_step(ddp, opt, batches, cfg, lr_at(cfg, step), dist)
        done = step + 1
        tokens_since += cfg.rows_per_step * cfg.window
        dt = time.perf_counter() - t_last
        rec = {"step": done, "loss": round(loss, 5), "lr": lr_at(cfg, step), "grad_norm": round(norm, 4),
               "tokens_seen": done * cfg.rows_per_step * cfg.window, "tok_s": round(tokens_since / dt, 1)}
        t_last, tokens_since = time.perf_counter(), 0
        loop.bar.set_postfix(loss=f"{loss:.4f}", tok_s=f"{rec['tok_s']:.0f}")
        if loop.due(done, cfg.eval_every):
            with gathered(model):  # sharded weights: every rank gathers them, rank 0 evaluates
                with draft_rows_from(model, cfg.window):
                    heldout = dist.on_main(lambda: evaluate(model, streams, cfg, ids, bos))
            if dist.main:
                rec["heldout"] = heldout
                log(f"step {done} held-out {json.dumps(heldout)}")
        loop.write(rec)
        stop = loop.out_of_time(cfg.time_limit_s)
        if loop.due(done, cfg.save_every) or stop:
            model.eval()
            # the base's EOS / end-of-turn ids stay (the converted model ends a turn as its base does)
            manifest = {**{k: base_manifest[k] for k in CARRIED if k in base_manifest},
                        "objective": "block_diffusion", "block_len": cfg.block_len, "layout": cfg.layout,
                        "residual_mode": "off", "mask_token": mask["token"],
                        "recipe": {"name": "convert", "config": loop.config, "step": done,
                                   "tokens_seen": rec["tokens_seen"], "heldout": rec.get("heldout"), **extra}}
            files = {ADAPTER_FILE: adapter_bytes(model, cfg.draft_rank, base_files)} if cfg.draft_rank else None
            loop.save(drafter_of(model), tok, manifest, opt, done, files=files)
            model.train()
        if stop:
            break
    loop.finish(done)
    model.eval()
    return model
