#!/bin/bash
# session 48: the AR peer's drafter at 240 (= checkpoints/orl-tiny7-ardraft), 480 and 720 updates on validation prompt
# seeds 100 and 101 (in range, 40 a family): the one to ship is chosen here, not on the test seeds 0-2.
#   bash docs/results-lengths/s48/val_pick.sh NAME ...     (run directories under ~/.cache/orl/runs)
set -euo pipefail
source /work/main/.venv/bin/activate; cd /work/main
R=~/.cache/orl/runs
for m in "$@"; do
  for seed in 100 101; do
    OMP_NUM_THREADS=1 orl eval --model $R/$m --tasks long7xp,prog7xp,split7xp,constr7xp,keysort7x --split heldout \
        --limit 40 --seed $seed --max-new-tokens 104 --batch-size 1 --spec-tokens 8 --spec-draft fused --spec-groups 3 \
        --out $R/eval/val/$m-fused.jsonl > /dev/null 2>&1
  done
  python benchmarks/length_table.py $R/eval/val/$m-fused.jsonl | grep " all "
done
