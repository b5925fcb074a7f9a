#!/usr/bin/env bash
# Session 49's tables: the relabelled runs against the base (five7w-s2d0 = checkpoints/orl-tiny7-base) and session
# 46's ORL (five7w-s2d0-orlarkl = checkpoints/orl-tiny7-orl), threshold decoder, paired over the same prompts.
set -euo pipefail
cd "$(dirname "$0")/../../.."
source .venv/bin/activate
E=${E:-$HOME/.cache/orl/runs/eval}; T=$(mktemp -d)
zcat docs/results-lengths/s45/five7w-s2d0-thr.jsonl.gz > $T/base-thr.jsonl
zcat docs/results-lengths/s46/five7w-s2d0-sweep.jsonl.gz > $T/base-sweep.jsonl
zcat docs/results-lengths/s46/five7w-s2d0-orlarkl-thr.jsonl.gz > $T/orl-thr.jsonl
zcat docs/results-lengths/s46/five7w-s2d0-orlarkl-sweep.jsonl.gz > $T/orl-sweep.jsonl
runs=("$@")
python benchmarks/length_table.py --by-seed $T/base-thr.jsonl $T/orl-thr.jsonl "${runs[@]/#/$E/}"
for r in "${runs[@]}"; do
  n=${r%-thr.jsonl}
  python benchmarks/length_table.py --paired "$n" five7w-s2d0 $T/base-thr.jsonl "$E/$r"
  python benchmarks/length_table.py --paired "$n" five7w-s2d0-orlarkl $T/orl-thr.jsonl "$E/$r"
done
