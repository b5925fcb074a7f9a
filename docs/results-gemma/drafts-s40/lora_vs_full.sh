#!/bin/bash
# session 40: issue 22's low-rank drafter against the full-copy drafter, both one-stage from gemma-3-270m (no
# conversion stage first): N draft-only steps each (default corpus, its 64-prompt distill stream, bf16 on a CPU with
# AVX512-BF16), full copy at the preset's lr 5e-5, rank R at 2e-4 (the session-39 pilot's), warm-up 10, cosine;
# then both measured as sessions 36-38 measured drafters (the original verifies, fused k = 3, 30,764-id draft vocab).
# Resumable: rerun this script (each run continues from its last checkpoint; a finished measurement is kept).
#   bash docs/results-gemma/drafts-s40/lora_vs_full.sh [STEPS] [RANK] [WINDOWS] [PROMPTS]
cd /work/main
R=~/.cache/orl/runs/s40; mkdir -p $R
N=${1:-100}; RANK=${2:-16}; W=${3:-64}; P=${4:-32}
export OMP_NUM_THREADS=1
for v in full:0:5e-5 lora$RANK:$RANK:2e-4; do IFS=: read name rank lr <<< "$v"; run=$R/g40-$name-n$N
  .venv/bin/orl train --recipe convert --preset gemma_convert_short --base ~/.cache/orl/gemma-3-270m --out $run \
    --set threads=1 --set steps=$N --set warmup=10 --set lr=$lr --set checkpointing=false --set eval_every=50 \
    --set eval_windows=8 --set save_every=25 --set draft_only=true --set draft_aux=1.0 --set draft_target=ar \
    --set bf16=true --set draft_rank=$rank >> $run.out 2>&1 || { echo "train $name failed"; exit 1; }
done
for v in full lora$RANK; do run=$R/g40-$v-n$N; out=$R/w$W-p$P-$v-n$N.json
  [ -f $out ] || .venv/bin/python benchmarks/convert_eval.py --ar ~/.cache/orl/gemma-3-270m --dlm $run \
    --corpus ~/.cache/orl/corpus/b1a208dc9de66062 --windows $W --context 64 --block 4 --thresholds none \
    --free-tokens 32 --free-prompts $P --spec 3 --spec-verifier ar --threads 1 --draft-vocab 32768 \
    --out $out > $out.log 2>&1 || { echo "eval $v failed"; exit 1; }
done
echo "done $(date)"
