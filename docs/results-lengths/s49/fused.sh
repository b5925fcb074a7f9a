#!/usr/bin/env bash
# Session 49: the fused self-speculative decoder (k 8, 3 groups) of one run on both splits, test prompt seeds given
# by SEEDS, records into $E (two jobs side by side write to two directories; cat them after).
#   SEEDS="0 1" E=~/.cache/orl/runs/eval/s49a bash docs/results-lengths/s49/fused.sh tiny7-ref
set -euo pipefail
cd "$(dirname "$0")/../../.."
source .venv/bin/activate
export OMP_NUM_THREADS=1 TASKS=long7xp,prog7xp,split7xp,constr7xp,keysort7x
bash benchmarks/lengths_eval.sh "${1:?run name}" fused
