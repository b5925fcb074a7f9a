"""Base-model presets for the tiny character-level dLLM."""
from __future__ import annotations

from dataclasses import replace

from orl.eval.tasks import HELPERS, SUITE, SUITE_V5, SUITE_V7
from orl.model.args import ModelArgs
from orl.train.pretrain_config import PretrainConfig


def tiny_model() -> ModelArgs:
    # 2.4M parameters (9.7 MB in fp32): fits the 15 MB budget for shipped checkpoints.
    # The learned absolute positions make digit alignment easy for a model this small; the shifted
    # read-out keeps the AR stage's next-token skill through the conversion (docs/TRAINING.md).
    return ModelArgs(vocab_size=128, dim=192, n_layers=6, n_heads=6, n_kv_heads=2, head_dim=32, ffn_dim=512,
                     qk_norm=True, tie_embeddings=True, max_seq_len=160, learned_pos=True, shift_logits=True)


def tiny_model7() -> ModelArgs:
    # tiny_model with a context of 192: long7's `beyond` answers (28 digits) take 7 blocks after a
    # 36-token prompt, prog7's (10 assignments) 4 blocks after a 63-token prompt plus the eval's
    # 112-token answer budget. 6k more position rows: 2.41M parameters, 9.7 MB in fp32.
    return replace(tiny_model(), max_seq_len=192)


# Samples per step of split / keysort / prog / constr / long: the families slowest to learn (keysort,
# long) get more, split (digit-wise references) and constr (learned early) fewer. The runs behind these
# numbers: docs/history/CODE-NOTES.md.
MIX = (12, 14, 16, 14, 8)

# Samples per step of add / sort / prog / constr / long (tasks v5): the families a small model finds
# hard (carries, program values, constraint planning, mixed-width sorting) get most of the batch.
MIX_V5 = (16, 12, 16, 16, 4)


def tiny_base() -> PretrainConfig:
    """The shipped checkpoints/orl-tiny-base (tasks v6): AR stage, then block diffusion (block 16)."""
    return PretrainConfig(model=tiny_model(), block_len=16, ar_steps=3500, diffusion_steps=4000, tasks=SUITE,
                          mix=MIX, lr=3e-3, stage2_lr=1e-3, warmup=100, eval_every=500, save_every=250, bf16=False)


def tiny_base5() -> PretrainConfig:
    """The tasks v5 base (docs/history/RESULTS-history.md): the same recipe on add and sort."""
    return replace(tiny_base(), tasks=SUITE_V5, mix=MIX_V5)


# Tasks v7: tiny_base's MIX halved, long7 given as many as split7 (34 samples per step): its sizes
# now vary from 4 to 20 digits.
MIX7 = (6, 7, 8, 7, 6)


def tiny_base7() -> PretrainConfig:
    """Tasks v7 (SUITE_V7): every family at a range of sizes, for held-out lengths beyond the range.
    Half the rows start at a random position (pos_offset) so that every row of the learned position
    table is trained, not only those the training lengths reach (docs/TRAINING.md). A fraction of
    tiny_base's budget (2,400 steps of 34 samples instead of 7,500 of 64), sized for about 80 minutes
    of one CPU thread."""
    return replace(tiny_base(), model=tiny_model7(), tasks=SUITE_V7, mix=MIX7, ar_steps=1200, diffusion_steps=1200,
                   pos_offset=0.5, eval_every=500, eval_samples=20, eval_max_new_tokens=80, save_every=100)


# Tasks v7 with helpers: 72 rows a step, 57 for the families (MIX7 x ~1.6, long7 as many as split7) and
# 3 for each helper (one per family, drawn at sizes past the family's range; tasks/helpers.py): about
# tiny_base's 64 rows, so that the full budget costs about what the shipped base's did.
MIX7H = (10, 12, 13, 12, 10) + (3,) * len(HELPERS)


def tiny_base7h() -> PretrainConfig:
    """Tasks v7 at tiny_base's full budget (3,500 AR + 4,000 diffusion steps), RoPE only (no learned
    position table, no position shift), with each family's helper trained at longer sizes: length
    generalisation by association (docs/TRAINING.md, "Session 16: helpers")."""
    return replace(tiny_base7(), model=replace(tiny_model7(), learned_pos=False), pos_offset=0.0,
                   tasks=SUITE_V7 + tuple(h.name for h in HELPERS), mix=MIX7H, ar_steps=3500, diffusion_steps=4000,
                   eval_max_new_tokens=112)  # long7h's answers run to 95 characters


def tiny_base7h_control() -> PretrainConfig:
    """tiny_base7h without its helpers: the control that a beyond-range gain must beat before it can be
    credited to them. The families come first in tiny_base7h's task list and each step draws its rows
    task by task from one seeded stream, so this run trains on exactly the family rows (and, in stage
    2, the noise) of tiny_base7h at every step; only the helper rows are missing (so the family rows'
    share of each step's loss is larger here: the helpers take none of it)."""
    return replace(tiny_base7h(), tasks=SUITE_V7, mix=MIX7H[:len(SUITE_V7)])


def tiny_ar() -> PretrainConfig:
    """The shipped checkpoints/orl-tiny-ar: the AR peer of orl-tiny-base. Same layers and widths, same
    samples, steps and lr schedule; stage 2 stays autoregressive, and without the learned position table
    (1.3% of the weights) it exports to the HF Qwen3 layout."""
    return replace(tiny_base(), model=replace(tiny_model(), learned_pos=False, shift_logits=False), convert=False)


def smoke_base() -> PretrainConfig:
    """Seconds-long run for tests and CI: a very small model, a few steps of each stage."""
    model = ModelArgs(vocab_size=128, dim=32, n_layers=2, n_heads=2, n_kv_heads=1, head_dim=16, ffn_dim=64,
                      max_seq_len=160, learned_pos=True)
    return PretrainConfig(model=model, block_len=16, ar_steps=4, diffusion_steps=4, batch_size=8, warmup=2,
                          eval_every=4, eval_samples=2, save_every=4, bf16=False)
