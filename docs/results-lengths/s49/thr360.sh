#!/usr/bin/env bash
# Session 49: the threshold decoder at 0.9 in range (test prompt seeds SEEDS, 100 a family) of the run continued to 360
# updates (ref360.sh), into $E/tiny7-ref360-thr.jsonl (two jobs side by side: distinct E, cat after).
#   SEEDS="0 1" E=~/.cache/orl/runs/eval/s49c bash docs/results-lengths/s49/thr360.sh
set -euo pipefail
cd "$(dirname "$0")/../../.."
source .venv/bin/activate
export OMP_NUM_THREADS=1
R=${R:-$HOME/.cache/orl/runs}; E=${E:-$R/eval}; mkdir -p "$E"
for seed in ${SEEDS:-0 1 2}; do
  orl eval --model "$R/tiny7-ref" --tasks long7xp,prog7xp,split7xp,constr7xp,keysort7x --split heldout --limit 100 \
    --seed "$seed" --max-new-tokens 104 --thresholds 0.9 --out "$E/tiny7-ref360-thr.jsonl"
done
