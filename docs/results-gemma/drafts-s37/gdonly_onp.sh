#!/bin/bash
# session 37 -> 38: draft-only steps on the original's own continuations (a distill stream of 1,024 prompts instead
# of 64: the states free-running decoding visits), from gdonly450; resumable: rerun this script
cd /work/main
R=~/.cache/orl/runs
OMP_NUM_THREADS=1 .venv/bin/orl train --recipe convert --preset gemma_convert_short --base ~/.cache/orl/gemma-3-270m \
  --out $R/gdonly-onp --set threads=1 --set steps=300 --set warmup=10 --set lr=3e-5 --set checkpointing=false \
  --set eval_every=50 --set eval_windows=8 --set save_every=25 --set draft_only=true --set init_from=$R/gdonly450 \
  --set draft_aux=1.0 --set draft_target=ar --set corpus.distill_prompts=1024 --set mix=1,1,2
