#!/usr/bin/env bash
# Session 49: the factor (f = 1) and entropy (0.5) rules in range for one run (test prompt seeds 0-2, 100 a family).
#   bash docs/results-lengths/s49/rules.sh tiny7-ref
set -euo pipefail
cd "$(dirname "$0")/../../.."
source .venv/bin/activate
export OMP_NUM_THREADS=1 TASKS=long7xp,prog7xp,split7xp,constr7xp,keysort7x
bash benchmarks/lengths_eval.sh "${1:?run name}" rules
