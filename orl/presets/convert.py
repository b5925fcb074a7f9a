"""Presets of the convert recipe (AR checkpoint -> block diffusion, orl.train.convert)."""
from __future__ import annotations

from orl.eval.tasks import SUITE
from orl.train.convert import ConvertConfig
from orl.train.corpus import CorpusConfig


def gemma_convert() -> ConvertConfig:
    """gemma-3-270m (`orl fetch gemma-3-270m`) at block 4 on one CPU: rows of 160 tokens (32 of context,
    32 blocks), 8 rows per step (6 code, 1 task text, 1 self-distilled), bf16, checkpointed blocks.
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


def smoke() -> ConvertConfig:
    """Seconds-long run for tests: a tiny base, a few hundred files' worth of tokens, a few steps."""
    corpus = CorpusConfig(train_tokens=20_000, heldout_tokens=4_000, heldout_frac=0.2, tasks=("constr",),
                          task_samples=20)
    return ConvertConfig(corpus=corpus, block_len=4, window=24, context=8, mix=(2, 1, 0), steps=4, lr=1e-3, warmup=0,
                         ce_chunk=16, eval_every=2, eval_windows=4, save_every=2, bf16=False)
