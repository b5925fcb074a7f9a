#!/bin/bash
# session 38: the same 40 draft-only steps from gdonly450 (same batches: the draw is a function of seed and step)
# in fp32 and under bf16 autocast; each run's step-40 eval (8 held-out windows) compared
cd /work/main
R=~/.cache/orl/runs; O=$R/s38
for bf in true false; do
  OMP_NUM_THREADS=1 .venv/bin/orl train --recipe convert --preset gemma_convert_short --base ~/.cache/orl/gemma-3-270m \
    --out $O/pair-bf16-$bf --set threads=1 --set steps=40 --set warmup=5 --set lr=3e-5 --set checkpointing=false \
    --set eval_every=40 --set eval_windows=8 --set save_every=40 --set draft_only=true --set init_from=$R/gdonly450 \
    --set draft_aux=1.0 --set draft_target=ar --set bf16=$bf > $O/pair-bf16-$bf.out 2>&1
done
