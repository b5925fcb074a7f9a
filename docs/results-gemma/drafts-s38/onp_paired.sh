#!/bin/bash
# session 38: gdonly450 and gdonly-onp decoded again on the same 128 windows / 64 prompts, now with per-prompt
# forwards (convert_eval's free_running.per_prompt), side by side, one core each; then the paired comparison
cd /work/main
R=~/.cache/orl/runs; O=$R/s38
export OMP_NUM_THREADS=1
for d in gdonly450 gdonly-onp; do
  .venv/bin/python benchmarks/convert_eval.py --ar ~/.cache/orl/gemma-3-270m --dlm $R/$d \
    --corpus ~/.cache/orl/corpus/b1a208dc9de66062 --windows 128 --context 64 --block 4 --thresholds none \
    --free-tokens 32 --free-prompts 64 --spec 3 --spec-verifier ar --threads 1 --draft-vocab 32768 \
    --out $O/pp-$d.json > $O/pp-$d.log 2>&1 &
done
wait
.venv/bin/python docs/results-gemma/drafts-s38/paired_tpf.py $O/pp-gdonly450.json $O/pp-gdonly-onp.json
