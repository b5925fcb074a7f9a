#!/bin/bash
# Session 54: orl bench on the shipped trio after the new base, ORL and drafter shipped (as session 47's
# docs/results-lengths/s47/bench.sh, second pass: system (l) = orl-tiny7-draft drafting for the base), batch 1, one
# thread, in range and beyond, 10 prompts a family and split; tables -> docs/results-lengths/s54/bench-{heldout,beyond}.md
set -euo pipefail
cd "$(dirname "$0")/../../.."
source .venv/bin/activate; export OMP_NUM_THREADS=1
for split in heldout beyond; do
  orl bench --base checkpoints/orl-tiny7-base --orl checkpoints/orl-tiny7-orl --ar checkpoints/orl-tiny7-ar \
    --tasks long7xp,prog7xp,split7xp,constr7xp,keysort7x --split $split --limit 10 --threshold 0.9 \
    --max-new-tokens 112 --ar-chunk-steps 1 --self-spec-tokens 8 --drafter checkpoints/orl-tiny7-draft \
    --out docs/results-lengths/s54/bench-$split.md > /dev/null
done
echo done $(date)
