#!/bin/bash
# session 37: 300 more draft-only steps from session 36's step-150 drafter, a fresh warm-up + cosine from 5e-5
cd /work/main
R=~/.cache/orl/runs
OMP_NUM_THREADS=1 .venv/bin/orl train --recipe convert --preset gemma_convert_short --base ~/.cache/orl/gemma-3-270m \
  --out $R/gdonly450 --set threads=1 --set steps=300 --set warmup=10 --set checkpointing=false --set eval_every=50 \
  --set eval_windows=8 --set save_every=25 --set draft_only=true --set init_from=$R/gdonly150-s150 --set draft_aux=1.0 \
  --set draft_target=ar
