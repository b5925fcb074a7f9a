#!/bin/bash
# session 43: issue 21's five-family hinted AR stage - every v7 family in its hinted format with its helpers, session
# 39's recipe otherwise (tiny_base7h, 7,000 AR steps, pos_stretch 0.5 up to 2x, checkpoints every 50 steps, a copy
# every 500) -> runs/five7-sS. Resumable: rerun the same command (orl train resumes from the last checkpoint).
#   bash docs/results-lengths/s43/five7.sh SEED [THREADS]
# Then, as for the two-family bases: the AR evaluation on all five families, stage 2 without the stretch
# (docs/results-lengths/s40/stage2_40.sh's recipe), ORL with the KL anchor (tiny_orl7_arkl).
set -euo pipefail
source /work/main/.venv/bin/activate; cd /work/main
R=~/.cache/orl/runs; s=${1:?seed}; t=${2:-2}; n=five7-s$s
T=${TASKS:-long7xp,prog7xp,split7xp,constr7xp,keysort7x,long7xph,prog7xph,long7xpf,split7xph,constr7xph,keysort7xh}
X=${MIX:-8,8,8,8,8,4,4,4,4,4,4}
OMP_NUM_THREADS=$t orl train --recipe pretrain --preset tiny_base7h --out $R/$n \
    --set tasks=$T --set mix=$X --set ar_steps=7000 --set diffusion_steps=0 --set threads=$t \
    --set eval_max_new_tokens=100 --set model.attn_logn=false --set pos_stretch=0.5 --set pos_stretch_max=2.0 \
    --set keep_every=500 --set save_every=50 --set seed=$s >> $R/$n.out 2>&1 < /dev/null
echo "AR stage done $(date)"
