#!/bin/bash
# session 47: tiny7-ardraft (240 updates) continued to 480 in a copy of its run directory
#   cp -r ~/.cache/orl/runs/tiny7-ardraft ~/.cache/orl/runs/tiny7-ardraft-480 && bash docs/results-lengths/s47/ardraft480.sh
set -euo pipefail
source /work/main/.venv/bin/activate; cd /work/main
R=~/.cache/orl/runs; n=tiny7-ardraft-480
OMP_NUM_THREADS=1 orl train --recipe draft --preset tiny_draft7_only --base checkpoints/orl-tiny7-base --out $R/$n \
    --set threads=1 --set verifier=checkpoints/orl-tiny7-ar --set lr=2e-4 --set updates=480 >> $R/s47/$n.out 2>&1 < /dev/null
echo "draft done $(date)"
TASKS=long7xp,prog7xp,split7xp,constr7xp,keysort7x OMP_NUM_THREADS=1 bash benchmarks/lengths_eval.sh $n fused > $R/s47/eval-$n.log 2>&1
echo "eval done $(date)"
