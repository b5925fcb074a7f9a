#!/bin/bash
# session 40: one more low-rank arm beside lora_vs_full.sh's two (same recipe, same measurement), to separate the
# rank's effect from the learning rate's. Resumable: rerun it.
#   bash docs/results-gemma/drafts-s40/lora_arm.sh RANK LR [STEPS] [WINDOWS] [PROMPTS]
cd /work/main
R=~/.cache/orl/runs/s40; mkdir -p $R
RANK=${1:?rank}; LR=${2:?lr}; N=${3:-100}; W=${4:-64}; P=${5:-32}
export OMP_NUM_THREADS=1
name=lora$RANK-lr$LR; run=$R/g40-$name-n$N; out=$R/w$W-p$P-$name-n$N.json
.venv/bin/orl train --recipe convert --preset gemma_convert_short --base ~/.cache/orl/gemma-3-270m --out $run \
  --set threads=1 --set steps=$N --set warmup=10 --set lr=$LR --set checkpointing=false --set eval_every=50 \
  --set eval_windows=8 --set save_every=25 --set draft_only=true --set draft_aux=1.0 --set draft_target=ar \
  --set bf16=true --set draft_rank=$RANK >> $run.out 2>&1 || { echo "train $name failed"; exit 1; }
[ -f $out ] || .venv/bin/python benchmarks/convert_eval.py --ar ~/.cache/orl/gemma-3-270m --dlm $run \
  --corpus ~/.cache/orl/corpus/b1a208dc9de66062 --windows $W --context 64 --block 4 --thresholds none \
  --free-tokens 32 --free-prompts $P --spec 3 --spec-verifier ar --threads 1 --draft-vocab 32768 \
  --out $out > $out.log 2>&1 || { echo "eval $name failed"; exit 1; }
echo "done $(date)"
