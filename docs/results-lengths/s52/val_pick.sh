#!/usr/bin/env bash
# Session 52: the longer-trained base's checkpoints (+1,000, +1,500 stage-2 steps) on the validation prompt seeds
# (100, 101; never the test seeds 0-2), threshold 0.9, both splits. One checkpoint per argument, run side by side:
#   bash docs/results-lengths/s52/val_pick.sh base7-more-at1000 & bash docs/results-lengths/s52/val_pick.sh base7-more
set -euo pipefail
cd "$(dirname "$0")/../../.."
source .venv/bin/activate
export OMP_NUM_THREADS=1 TASKS=long7xp,prog7xp,split7xp,constr7xp,keysort7x SEEDS="100 101"
R=${R:-$HOME/.cache/orl/runs}; export E=${E:-$R/eval/val-s52}
bash benchmarks/lengths_eval.sh "${1:?run name}" thr
