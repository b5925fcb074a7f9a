#!/usr/bin/env bash
# Session 50's tables: one relabelled run's records (every mode of eval.sh) against the base (five7w-s2d0 =
# checkpoints/orl-tiny7-base) and session 49's shipped ORL (tiny7-ref at 240 updates), paired over the same prompts.
#   bash docs/results-lengths/s50/tables.sh RUN_NAME [RECORDS_DIR]    (records RUN_NAME-{thr,sweep,rules,fused}.jsonl[.gz])
set -euo pipefail
cd "$(dirname "$0")/../../.."
source .venv/bin/activate
N=${1:?run name}; D=${2:-docs/results-lengths/s50}; T=$(mktemp -d)
get() { if [ -f "$1.gz" ]; then zcat "$1.gz"; else cat "$1"; fi; }
for m in thr sweep rules fused; do
  get "$D/$N-$m.jsonl" > $T/run-$m.jsonl
  zcat docs/results-lengths/s49/tiny7-ref-$m.jsonl.gz > $T/ref240-$m.jsonl
done
zcat docs/results-lengths/s45/five7w-s2d0-thr.jsonl.gz > $T/base-thr.jsonl
zcat docs/results-lengths/s46/five7w-s2d0-sweep.jsonl.gz > $T/base-sweep.jsonl
zcat docs/results-lengths/s46/five7w-s2d0-rules.jsonl.gz > $T/base-rules.jsonl
zcat docs/results-lengths/s45/five7w-s2d0-fused.jsonl.gz > $T/base-fused.jsonl
for r in base ref240 run; do cat $T/$r-{thr,sweep,rules}.jsonl > $T/$r.jsonl; done
python benchmarks/length_table.py --by-seed $T/base.jsonl $T/ref240.jsonl $T/run.jsonl
python benchmarks/length_table.py --by-seed $T/base-fused.jsonl $T/ref240-fused.jsonl $T/run-fused.jsonl
for m in thr fused; do  # paired McNemar, threshold 0.9 and fused (the sweep's points: the per-seed rows above)
  python benchmarks/length_table.py --paired "$N" five7w-s2d0 $T/base-$m.jsonl $T/run-$m.jsonl
  python benchmarks/length_table.py --paired "$N" tiny7-ref $T/ref240-$m.jsonl $T/run-$m.jsonl
done
