#!/bin/bash
# session 38: a draft-only training step in fp32 and under bf16 autocast on this CPU (AMD EPYC, avx512_bf16)
cd /work/main
R=~/.cache/orl/runs; O=$R/s38
for bf in false true; do
  OMP_NUM_THREADS=1 .venv/bin/python benchmarks/convert_profile.py --base ~/.cache/orl/gemma-3-270m --preset gemma_convert_short \
    --steps 4 --threads 1 --corpus ~/.cache/orl/corpus/b1a208dc9de66062 --set checkpointing=false --set draft_only=true \
    --set init_from=$R/gdonly450 --set draft_aux=1.0 --set draft_target=ar --set bf16=$bf > $O/prof-bf16-$bf.log 2>&1
done
