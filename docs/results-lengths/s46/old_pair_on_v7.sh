#!/bin/bash
# session 46: the shipped tasks-v6 pair on the five length-varied families, in range (context 160: 96 new tokens)
source /work/main/.venv/bin/activate; cd /work/main; export OMP_NUM_THREADS=1
E=$HOME/.cache/orl/runs/eval/s46; mkdir -p $E
T=long7xp,prog7xp,split7xp,constr7xp,keysort7x
for m in orl-tiny-base orl-tiny-orl; do for seed in 0 1 2; do
  orl eval --model checkpoints/$m --tasks $T --split heldout --limit 100 --seed $seed --out $E/$m-thr.jsonl --max-new-tokens 96 --thresholds 0.9 --no-progress
  orl eval --model checkpoints/$m --tasks $T --split heldout --limit 100 --seed $seed --out $E/$m-fused.jsonl --max-new-tokens 96 --batch-size 1 --spec-tokens 8 --spec-draft fused --spec-groups 3 --no-progress
done; done
echo done $(date)
