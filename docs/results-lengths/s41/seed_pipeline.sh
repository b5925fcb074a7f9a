#!/bin/bash
# session 41: issue 21's whole pos_stretch pipeline for one training seed, each piece resumable, so rerunning the
# same command after a cut goes on where it stopped (orl train resumes; orl eval skips prompts a records file holds):
#   1. the 7,000-step AR stage with the stretch (session 39's launch39.sh, one seed)      -> runs/hint4st-7k-sS
#   2. its greedy AR evaluation (the baseline the stage-2 pairs are against)            -> eval/hint4st-7k-sS-ar.jsonl
#   3. stage 2 (docs/results-lengths/s40/stage2_40.sh S T: 3,000 block-diffusion steps)  -> runs/hint4st-7k-sSd
#   4. chain21.sh with M=hint4st-7k-sSd: fused + threshold evaluation, tiny_orl7, ORL's evaluation
#   bash docs/results-lengths/s41/seed_pipeline.sh SEED [THREADS]      (about 2 h + 1.5 h + 0.6 h on two threads)
set -euo pipefail
source /work/main/.venv/bin/activate; cd /work/main
R=~/.cache/orl/runs; s=${1:?seed}; t=${2:-2}; n=hint4st-7k-s$s
if ! grep -q '"step": 7000' $R/$n/train.log.jsonl 2>/dev/null; then
  OMP_NUM_THREADS=$t orl train --recipe pretrain --preset tiny_base7h --out $R/$n \
      --set tasks=long7xp,prog7xp,long7xph,prog7xph,long7xpf --set mix=12,12,6,6,6 --set ar_steps=7000 \
      --set diffusion_steps=0 --set threads=$t --set eval_max_new_tokens=100 --set model.attn_logn=false \
      --set pos_stretch=0.5 --set pos_stretch_max=2.0 --set keep_every=500 --set save_every=50 \
      --set seed=$s >> $R/$n.out 2>&1 < /dev/null
fi
echo "AR stage done $(date)"
OMP_NUM_THREADS=$t bash benchmarks/lengths_eval.sh $n ar > $R/s41-eval-$n-ar.log 2>&1
echo "AR eval done $(date)"
# STRETCH=0 (session 42: stage 2 without the stretch is as good beyond and better in range) -> ${n}d0
st=${STRETCH:-0.5}; d=${n}d; [ "$st" = 0.5 ] || d=${d}${st//./}
STRETCH=$st bash docs/results-lengths/s40/stage2_40.sh $s $t
M=$d bash docs/results-lengths/s40/chain21.sh
M=$d P=tiny_orl7_arkl S=orlarkl bash docs/results-lengths/s42/orl_ar.sh
