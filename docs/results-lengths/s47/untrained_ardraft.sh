#!/bin/bash
# session 47: the base as an untrained drafter for the AR peer (the AR peer's weights verify, --spec-verifier), on the
# test prompts of lengths_eval.sh's fused mode: the starting point of tiny7-ardraft's training
set -euo pipefail
source /work/main/.venv/bin/activate; cd /work/main
E=~/.cache/orl/runs/eval/s47-untrained; mkdir -p $E
for split in heldout beyond; do for seed in 0 1 2; do
  OMP_NUM_THREADS=1 orl eval --model checkpoints/orl-tiny7-base --spec-verifier checkpoints/orl-tiny7-ar \
      --tasks long7xp,prog7xp,split7xp,constr7xp,keysort7x --split $split --limit 100 --seed $seed \
      --max-new-tokens 104 --batch-size 1 --spec-tokens 8 --spec-draft fused --spec-groups 3 \
      --out $E/base-for-ar-fused.jsonl > /dev/null 2>&1
done; done
echo "done $(date)"
