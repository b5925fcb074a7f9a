#!/bin/bash
# session 43: AR-stage pilots (benchmarks/length_pilot.py: one family, 1,500 steps of 32 rows, greedy AR on 80 held-out
# prompts per split) of the hinted multi-answer families, one thread, one after the other; a finished pilot is loaded,
# not retrained, so rerunning the script skips what is done. Plain-format baselines: `rope FAMILY 1500`.
#   bash docs/results-lengths/s43/pilots.sh [VARIANT:FAMILY ...]      (default: the three hinted pilots)
source /work/main/.venv/bin/activate; cd /work/main
export OMP_NUM_THREADS=1
L=~/.cache/orl/runs/s43; mkdir -p $L
for vf in ${@:-hintsp:constr7 hintsp:split7 hints:keysort7}; do
  v=${vf%%:*}; f=${vf##*:}
  python benchmarks/length_pilot.py $v $f 1500 > $L/pilot-$f-$v.log 2>&1 < /dev/null
  echo "$vf rc $? $(date)"
done
