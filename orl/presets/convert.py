"""Presets of the convert recipe (AR checkpoint -> block diffusion, orl.train.convert)."""
from __future__ import annotations

from orl.eval.tasks import SUITE
from orl.train.convert_config import ConvertConfig
from orl.train.corpus import CorpusConfig


def gemma_convert() -> ConvertConfig:
    """gemma-3-270m (`orl fetch gemma-3-270m`) at block 4 on one CPU: rows of 160 tokens (32 of context,
    32 blocks), 8 rows per step (6 code, 1 task text, 1 self-distilled), checkpointed blocks, fp32 (bf16 off on this CPU: see below).
    The run is sized to be resumed across sessions: rerun the same command to continue."""
    corpus = CorpusConfig(tasks=SUITE, task_samples=2000, distill_prompts=64, distill_prompt_tokens=48,
                          distill_new_tokens=64)
    # bf16=False: on CPUs without AVX512-BF16 / AMX (this one: AVX2) a bf16 matmul runs ~7x slower than
    # fp32 (docs/RESULTS-gemma.md); on a GPU pass --set bf16=true
    return ConvertConfig(corpus=corpus, block_len=4, window=160, context=32, mix=(6, 1, 1), steps=4000, lr=2e-5,
                         warmup=50, ce_chunk=128, eval_every=100, eval_windows=16, save_every=25, bf16=False)


def gemma_convert16() -> ConvertConfig:
    """gemma_convert at block 16 (the block size the engine defaults to)."""
    from dataclasses import replace

    return replace(gemma_convert(), block_len=16)


def gemma_convert_short() -> ConvertConfig:
    """A first conversion that fits one session on a shared 2-core CPU (docs/RESULTS-gemma.md): the
    gemma_convert corpus, rows of 96 tokens (32 of context, 16 blocks of 4), 4 rows per step (2 code,
    1 task text, 1 self-distilled), frozen embeddings (tied: the head too), a whole cosine schedule
    over 24 steps (about 0.6 TFLOP each)."""
    from dataclasses import replace

    return replace(gemma_convert(), window=96, context=32, mix=(2, 1, 1), steps=24, warmup=3, lr=5e-5,
                   freeze_embeddings=True, eval_every=12, eval_windows=8, save_every=6)


def gemma_convert_gpu() -> ConvertConfig:
    """gemma_convert on one lent GPU in one device call (benchmarks/gpu_convert.sh, which sizes `steps` to
    the lease from a probe of the step time): 64 rows a step (56 code, 8 task text; no distill rows: the
    CPU-built corpus holds 6k distilled tokens, which 8 rows a step would repeat hundreds of times), bf16
    autocast, no recomputation, frozen embeddings as in the grid runs, a checkpoint every 250 steps (a
    crash late in the lease still leaves one to evaluate); `time_limit_s` stops it at the lease."""
    from dataclasses import replace

    return replace(gemma_convert(), mix=(56, 8, 0), steps=600, warmup=30, lr=5e-5, bf16=True, checkpointing=False,
                   freeze_embeddings=True, eval_every=100, eval_windows=32, save_every=250)


def smoke() -> ConvertConfig:
    """Seconds-long run for tests: a tiny base, a few hundred files' worth of tokens, a few steps."""
    corpus = CorpusConfig(train_tokens=20_000, heldout_tokens=4_000, heldout_frac=0.2, tasks=("constr",),
                          task_samples=20)
    return ConvertConfig(corpus=corpus, block_len=4, window=24, context=8, mix=(2, 1, 0), steps=4, lr=1e-3, warmup=0,
                         ce_chunk=16, eval_every=2, eval_windows=4, save_every=2, bf16=False)


def qwen3_convert() -> ConvertConfig:
    """A Qwen3 Hugging Face checkpoint (Qwen3-0.6B / 1.7B / 4B, base or instruct: config.json +
    safetensors + tokenizer) on GPUs, e.g. `torchrun --nproc-per-node 8`: the QwenDLM route.

    Block 16: the published QwenDLM-4B + ORL reaches TPF 11.1 on HumanEval (as published), and a
    forward commits at most one block, so TPF <= block length: blocks of 4 or 8 could not give that
    number; 16 is the smallest power of two that can, the engine's default, and Fast-dLLM v2's
    sub-block limit of 8 divides it. Qwen3 has no mask token: `<|MASK|>` is added at id 151669
    (SDAR's token and id), one of the padded embedding rows (orl.train.convert_base).
    Rows of 1088 tokens (64 of context, 64 blocks of 16), 64 rows per step in total (48 code, 8 task
    text, 8 self-distilled: 8 per process on 8 GPUs), bf16 autocast over fp32 master weights,
    checkpointed blocks, 3000 steps (~209M tokens). The sizes are scaled from gemma_convert, not
    measured on GPUs (none here): with AdamW and DDP, Qwen3-4B needs ~80 GB per GPU before
    activations (H200 / B200 class; on 80 GB cards start from 1.7B)."""
    corpus = CorpusConfig(tasks=SUITE, task_samples=2000, train_tokens=50_000_000, heldout_tokens=500_000,
                          distill_prompts=1024, distill_prompt_tokens=64, distill_new_tokens=256)
    return ConvertConfig(corpus=corpus, mask_token="<|MASK|>", block_len=16, window=1088, context=64,
                         mix=(48, 8, 8), steps=3000, lr=1e-5, warmup=100, ce_chunk=1024, eval_every=100,
                         eval_windows=64, save_every=250, bf16=True)
