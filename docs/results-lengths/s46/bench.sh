#!/bin/bash
# session 46: issue 21 item 5 on the length-varied trio, batch 1, one thread, in range and beyond
source /work/main/.venv/bin/activate; cd /work/main; export OMP_NUM_THREADS=1
for split in heldout beyond; do
  orl bench --base checkpoints/orl-tiny7-base --orl checkpoints/orl-tiny7-orl --ar checkpoints/orl-tiny7-ar \
    --tasks long7xp,prog7xp,split7xp,constr7xp,keysort7x --split $split --limit 10 --threshold 0.9 \
    --max-new-tokens 112 --ar-chunk-steps 1 --self-spec-tokens 8 --out docs/results-lengths/s46/bench-$split.md
done
echo done $(date)
