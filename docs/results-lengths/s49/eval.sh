#!/usr/bin/env bash
# Session 49: the threshold decoder at 0.9 on both splits and 0.8 / 0.95 / 0.99 in range (test prompt seeds 0-2, 100
# a family) of one ORL run, beside the base's and session 46's ORL records (docs/results-lengths/s45, s46).
#   bash docs/results-lengths/s49/eval.sh tiny7-ref        (a name under ~/.cache/orl/runs)
set -euo pipefail
cd "$(dirname "$0")/../../.."
source .venv/bin/activate
export OMP_NUM_THREADS=1 TASKS=long7xp,prog7xp,split7xp,constr7xp,keysort7x
bash benchmarks/lengths_eval.sh "${1:?run name}" thr sweep
