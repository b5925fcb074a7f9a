#!/bin/bash
# session 37: HumanEval (first 24 problems) by the AR original and by gdonly450 drafting for it (recorded verifier,
# draft vocabulary), batch 1, one core
cd /work/main
R=~/.cache/orl/runs; O=$R/s37/he; mkdir -p $O
export OMP_NUM_THREADS=1
.venv/bin/orl eval --model ~/.cache/orl/gemma-3-270m --tasks humaneval --limit 24 --prompt-style base --max-new-tokens 256 \
  --batch-size 1 --no-progress --out $O/ar.jsonl > $O/ar.log 2>&1
echo "ar rc $? $(date)"
.venv/bin/orl eval --model $R/gdonly450 --tasks humaneval --limit 24 --prompt-style base --max-new-tokens 256 \
  --batch-size 1 --spec-draft fused --spec-tokens 3 --draft-vocab $R/s37/dv32k.json --no-progress --out $O/donly450.jsonl > $O/donly450.log 2>&1
echo "drafter rc $? $(date)"
