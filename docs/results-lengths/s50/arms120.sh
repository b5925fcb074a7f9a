#!/usr/bin/env bash
# Session 50, arms at 120 updates from the base against run A's 120-update checkpoint (tiny7-ref-at120), threshold
# decoder (0.9 both splits, the sweep in range), test seeds 0-2:
#   D: keep=fastest (one verified rollout a prompt, the one with the fewest forwards), relabelling on
#   E: lambda_aec=0 (no Adjacent Entropy Contraction), relabelling on
#   bash docs/results-lengths/s50/run.sh tiny7-fast120 --set keep=fastest --set updates=120
#   bash docs/results-lengths/s50/run.sh tiny7-noaec120 --set weights.lambda_aec=0 --set updates=120
#   for n in tiny7-ref-at120 tiny7-fast120 tiny7-noaec120; do MODES="thr sweep" bash docs/results-lengths/s50/eval.sh $n; done
#   bash docs/results-lengths/s50/arms120.sh [RECORDS_DIR]
set -euo pipefail
cd "$(dirname "$0")/../../.."
source .venv/bin/activate
D=${1:-docs/results-lengths/s50}; T=$(mktemp -d)
get() { if [ -f "$1.gz" ]; then zcat "$1.gz"; else cat "$1"; fi; }
for n in tiny7-ref-at120 tiny7-fast120 tiny7-noaec120; do
  get "$D/$n-thr.jsonl" > $T/$n-thr.jsonl; get "$D/$n-sweep.jsonl" > $T/$n-sweep.jsonl
done
python benchmarks/length_table.py --by-seed $T/*-thr.jsonl $T/*-sweep.jsonl | grep -v "@seed"
for n in tiny7-fast120 tiny7-noaec120; do
  python benchmarks/length_table.py --paired $n tiny7-ref-at120 $T/tiny7-ref-at120-thr.jsonl $T/$n-thr.jsonl
done
