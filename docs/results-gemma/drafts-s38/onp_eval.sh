#!/bin/bash
# session 38: the on-policy distill drafter (runs/gdonly-onp, session 37's gdonly_onp.sh) measured as gdonly450 was:
# 128 held-out windows / 64 free-running prompts (fused k3, the original verifies, the 30,764-id draft vocabulary),
# and HumanEval's first 24 problems through `orl eval` (batch 1); the two side by side, one core each
cd /work/main
R=~/.cache/orl/runs; O=$R/s38; mkdir -p $O
export OMP_NUM_THREADS=1
.venv/bin/python benchmarks/convert_eval.py --ar ~/.cache/orl/gemma-3-270m --dlm $R/gdonly-onp \
  --corpus ~/.cache/orl/corpus/b1a208dc9de66062 --windows 128 --context 64 --block 4 --thresholds none \
  --free-tokens 32 --free-prompts 64 --spec 3 --spec-verifier ar --threads 1 --draft-vocab 32768 \
  --out $O/w128-onp-v32k.json > $O/w128-onp-v32k.log 2>&1 &
.venv/bin/orl eval --model $R/gdonly-onp --tasks humaneval --limit 24 --prompt-style base --max-new-tokens 256 \
  --batch-size 1 --spec-draft fused --spec-tokens 3 --draft-vocab $R/s37/dv32k.json --no-progress \
  --out $O/he-onp.jsonl > $O/he-onp.log 2>&1
echo "humaneval rc $? $(date)"
wait
echo "done $(date)"
# then, for tokens/s under the same load (the evaluation above still running beside it), the AR original again:
#   orl eval --model ~/.cache/orl/gemma-3-270m --tasks humaneval --limit 24 --prompt-style base --max-new-tokens 256 \
#     --batch-size 1 --no-progress --out $O/he-ar.jsonl
# pairing: python docs/results-gemma/drafts-s37/he_compare.py $O/he-ar.jsonl $O/he-onp.jsonl
