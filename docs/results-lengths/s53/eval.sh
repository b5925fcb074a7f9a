#!/bin/bash
# Session 53: one checkpoint (a directory, or a run name under $R) on the five families, 100 prompts a family, split
# and seed, one thread: the test prompt seeds 0-2 (records -> $R/eval/s53), or with VAL=1 the validation seeds 100-101
# (-> $R/eval/val-s53; checkpoint picks are made there, never on the test seeds). MODES as benchmarks/lengths_eval.sh.
#   bash docs/results-lengths/s53/eval.sh more-ref thr          VAL=1 bash docs/results-lengths/s53/eval.sh more-ref thr
set -euo pipefail
cd "$(dirname "$0")/../../.."
source .venv/bin/activate
export OMP_NUM_THREADS=1 TASKS=long7xp,prog7xp,split7xp,constr7xp,keysort7x
R=${R:-$HOME/.cache/orl/runs}
if [ -n "${VAL:-}" ]; then export SEEDS="100 101" E=${E:-$R/eval/val-s53}; else export E=${E:-$R/eval/s53}; fi
bash benchmarks/lengths_eval.sh "${1:?checkpoint}" "${@:2}"
