#!/bin/bash
# session 47: the two draft-only drafters (lr 5e-5, 2e-4) on validation prompt seeds 100 and 101 (in range, 40 a
# family), the choice of the one to ship made there and not on the test seeds 0-2
set -euo pipefail
source /work/main/.venv/bin/activate; cd /work/main
R=~/.cache/orl/runs
for m in tiny7-donly tiny7-donly-lr2e-4; do
  for seed in 100 101; do
    OMP_NUM_THREADS=1 orl eval --model $R/$m --tasks long7xp,prog7xp,split7xp,constr7xp,keysort7x --split heldout \
        --limit 40 --seed $seed --max-new-tokens 104 --batch-size 1 --spec-tokens 8 --spec-draft fused --spec-groups 3 \
        --out $R/eval/val/$m-fused.jsonl > /dev/null 2>&1
  done
done
python benchmarks/length_table.py $R/eval/val/tiny7-donly-fused.jsonl $R/eval/val/tiny7-donly-lr2e-4-fused.jsonl | grep " all "
