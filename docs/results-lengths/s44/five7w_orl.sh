#!/bin/bash
# session 44: after five7w.sh (the five-family stage 2 five7w-sS-d0), KL-anchored ORL on it (tiny_orl7_arkl: rollouts on the
# base's five families, train split, the helpers skipped) and the fused + threshold evaluations on the five families,
# test prompt seeds 0-2 (session 42's orl_ar.sh with TASKS). Resumable: rerun the same command.
#   bash docs/results-lengths/s44/five7w_orl.sh SEED        (env: NAME and FAMILIES as five7w.sh's)
set -euo pipefail
s=${1:?seed}
export TASKS=${FAMILIES:-long7xp,prog7xp,split7xp,constr7xp,keysort7x}
n=${NAME:-five7w}
M=$n-s${s}d0 P=tiny_orl7_arkl S=orlarkl bash /work/main/docs/results-lengths/s42/orl_ar.sh
OMP_NUM_THREADS=1 bash /work/main/benchmarks/lengths_eval.sh $n-s${s}d0 thr > ~/.cache/orl/runs/s44-eval-$n-s${s}d0-thr.log 2>&1
echo "base thr done $(date)"
