#!/bin/bash
# session 43: threshold sweep (0.8, 0.95, 0.99 in range; 0.9 is the `thr` records) of seed 2's stage-2 base without the
# stretch and of plain and KL-anchored ORL on it, for the speed-quality curve: does ORL beat lowering the threshold?
#   bash docs/results-lengths/s43/s2d0_sweep.sh
source /work/main/.venv/bin/activate; cd /work/main
export OMP_NUM_THREADS=1
for m in hint4st-7k-s2d0 hint4st-7k-s2d0-orlarkl hint4st-7k-s2d0-orl; do
  bash benchmarks/lengths_eval.sh $m sweep > ~/.cache/orl/runs/s43/sweep-$m.log 2>&1
  echo "$m sweep done $(date)"
done
