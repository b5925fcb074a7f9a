#!/usr/bin/env bash
# Session 50: every issue-21 evaluation of one run (threshold 0.9 on both splits, the 0.8/0.95/0.99 sweep and the
# factor / entropy rules in range, the fused decoder on both splits; test prompt seeds 0-2, 100 a family).
#   bash docs/results-lengths/s50/eval.sh tiny7-ref360      (a name under ~/.cache/orl/runs)
set -euo pipefail
cd "$(dirname "$0")/../../.."
source .venv/bin/activate
export OMP_NUM_THREADS=1 TASKS=long7xp,prog7xp,split7xp,constr7xp,keysort7x
bash benchmarks/lengths_eval.sh "${1:?run name}" ${MODES:-thr sweep rules fused}
