#!/bin/bash
# session 38: gdonly450 and gdonly-onp decoded on the same 128 held-out windows, free runs with per-prompt forwards
# (convert_eval's free_running.per_prompt), side by side, one core each; then the paired comparison.
#   bash onp_paired.sh       free runs from windows 0-63 (the prompts of sessions 36-37) -> pp-*.json
#   bash onp_paired.sh 64    windows 64-127, fresh prompts (never a free-run prompt before) -> fresh-*.json
cd /work/main
R=~/.cache/orl/runs; O=$R/s38; OFF=${1:-0}
P=$([ "$OFF" = 0 ] && echo pp || echo fresh)
export OMP_NUM_THREADS=1
for d in gdonly450 gdonly-onp; do
  .venv/bin/python benchmarks/convert_eval.py --ar ~/.cache/orl/gemma-3-270m --dlm $R/$d \
    --corpus ~/.cache/orl/corpus/b1a208dc9de66062 --windows 128 --context 64 --block 4 --thresholds none \
    --free-tokens 32 --free-prompts 64 --free-offset $OFF --spec 3 --spec-verifier ar --threads 1 --draft-vocab 32768 \
    --out $O/$P-$d.json > $O/$P-$d.log 2>&1 &
done
wait
.venv/bin/python docs/results-gemma/drafts-s38/paired_tpf.py $O/$P-gdonly450.json $O/$P-gdonly-onp.json
