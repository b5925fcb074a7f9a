#!/bin/bash
# session 47: orl bench on the tiny7 trio with each shipped drafter as system (l), batch 1, one thread, in range and
# beyond (the machine otherwise idle); tables appended to docs/results-lengths/s47/bench-{heldout,beyond}.md
source /work/main/.venv/bin/activate; cd /work/main; export OMP_NUM_THREADS=1
for drafter in orl-tiny7-ardraft orl-tiny7-draft; do
  for split in heldout beyond; do
    orl bench --base checkpoints/orl-tiny7-base --orl checkpoints/orl-tiny7-orl --ar checkpoints/orl-tiny7-ar \
      --tasks long7xp,prog7xp,split7xp,constr7xp,keysort7x --split $split --limit 10 --threshold 0.9 \
      --max-new-tokens 112 --ar-chunk-steps 1 --self-spec-tokens 8 --drafter checkpoints/$drafter \
      --out docs/results-lengths/s47/bench-$split.md > /dev/null
  done
done
echo done $(date)
