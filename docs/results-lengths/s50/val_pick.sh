#!/usr/bin/env bash
# Session 50: which of run A's checkpoints (240, 360, 480 updates) to ship, chosen on the validation prompt seeds
# (100, 101; never the test seeds 0-2) by the threshold decoder at 0.9 in range, the ORL target's decoder.
set -euo pipefail
cd "$(dirname "$0")/../../.."
source .venv/bin/activate
export OMP_NUM_THREADS=1 TASKS=long7xp,prog7xp,split7xp,constr7xp,keysort7x SEEDS="100 101"
R=${R:-$HOME/.cache/orl/runs}; export E=${E:-$R/eval/val-s50}
for m in tiny7-ref-at240 tiny7-ref360 tiny7-ref480; do bash benchmarks/lengths_eval.sh "$m" thr; done
python benchmarks/length_table.py --by-seed "$E"/tiny7-ref-at240-thr.jsonl "$E"/tiny7-ref360-thr.jsonl \
  "$E"/tiny7-ref480-thr.jsonl | grep -E "^model| all"   # the pooled rows
