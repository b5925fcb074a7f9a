#!/bin/bash
# session 40: one draft-only run from gemma-3-270m (rank 0: a full drafter copy; rank R: the low-rank drafter), then
# its measurement as sessions 36-38 measured drafters (the original verifies, fused k = 3, 30,764-id draft vocab).
# bf16 on a CPU with AVX512-BF16, the default corpus (its 64-prompt distill stream), warm-up 10, cosine.
# Resumable: rerun it (the run continues from its last checkpoint; a finished measurement is kept).
#   bash docs/results-gemma/drafts-s40/lora_arm.sh RANK LR [STEPS] [WINDOWS] [PROMPTS] [NAME]
cd /work/main
R=~/.cache/orl/runs/s40; mkdir -p $R
RANK=${1:?rank}; LR=${2:?lr}; N=${3:-100}; W=${4:-64}; P=${5:-32}; name=${6:-lora$RANK-lr$LR}
export OMP_NUM_THREADS=1
run=$R/g40-$name-n$N; out=$R/w$W-p$P-$name-n$N.json
.venv/bin/orl train --recipe convert --preset gemma_convert_short --base ~/.cache/orl/gemma-3-270m --out $run \
  --set threads=1 --set steps=$N --set warmup=10 --set lr=$LR --set checkpointing=false --set eval_every=50 \
  --set eval_windows=8 --set save_every=25 --set draft_only=true --set draft_aux=1.0 --set draft_target=ar \
  --set bf16=true --set draft_rank=$RANK >> $run.out 2>&1 || { echo "train $name failed"; exit 1; }
[ -f $out ] || .venv/bin/python benchmarks/convert_eval.py --ar ~/.cache/orl/gemma-3-270m --dlm $run \
  --corpus ~/.cache/orl/corpus/b1a208dc9de66062 --windows $W --context 64 --block 4 --thresholds none \
  --free-tokens 32 --free-prompts $P --spec 3 --spec-verifier ar --threads 1 --draft-vocab 32768 \
  --out $out > $out.log 2>&1 || { echo "eval $name failed"; exit 1; }
echo "done $(date)"
