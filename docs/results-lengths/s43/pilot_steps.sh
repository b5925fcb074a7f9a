#!/bin/bash
# session 43: one length pilot at a given number of steps (pilots.sh runs 1,500), one thread; a finished pilot is loaded.
#   bash docs/results-lengths/s43/pilot_steps.sh VARIANT FAMILY STEPS        e.g. hintsph split7 4000
source /work/main/.venv/bin/activate; cd /work/main
export OMP_NUM_THREADS=1
L=~/.cache/orl/runs/s43; mkdir -p $L
python benchmarks/length_pilot.py $1 $2 $3 > $L/pilot-$2-$1-$3.log 2>&1 < /dev/null
echo "$1 $2 $3 rc $? $(date)"
