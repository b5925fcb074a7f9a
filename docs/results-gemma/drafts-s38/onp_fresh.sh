#!/bin/bash
# session 38: fresh free-running prompts for the paired comparison: windows 64-127 of the same 128 held-out windows
# (every earlier free run used windows 0-63), gdonly450 and gdonly-onp side by side, one core each
cd /work/main
R=~/.cache/orl/runs; O=$R/s38
export OMP_NUM_THREADS=1
for d in gdonly450 gdonly-onp; do
  .venv/bin/python benchmarks/convert_eval.py --ar ~/.cache/orl/gemma-3-270m --dlm $R/$d \
    --corpus ~/.cache/orl/corpus/b1a208dc9de66062 --windows 128 --context 64 --block 4 --thresholds none \
    --free-tokens 32 --free-prompts 64 --free-offset 64 --spec 3 --spec-verifier ar --threads 1 --draft-vocab 32768 \
    --out $O/fresh-$d.json > $O/fresh-$d.log 2>&1 &
done
wait
.venv/bin/python docs/results-gemma/drafts-s38/paired_tpf.py $O/fresh-gdonly450.json $O/fresh-gdonly-onp.json
