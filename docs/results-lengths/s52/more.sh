#!/bin/bash
# session 52: does more stage-2 training raise the argmax ceiling (benchmarks/knowledge_tpf.py) at this size?
# The base shipped until session 54 (checkpoints/orl-tiny7-base at git a2a43e7, 3,000 stage-2 steps) continued for STEPS more block-diffusion steps
# with its own tasks, mix and next-token loss, from its weights (a fresh optimizer and cosine schedule: its trainer
# state is not shipped), a new data seed (12; the base used 2), a lower peak lr (3e-4; the base's stage 2: 1e-3).
# One thread; resumable (rerun the same command). -> $R/base7-more (+ -at500, -at1000 copies)
#   bash docs/results-lengths/s52/more.sh [STEPS]
set -euo pipefail
cd "$(dirname "$0")/../../.."; source .venv/bin/activate
R=~/.cache/orl/runs; S=${1:-1500}
# the base this continues: checkpoints/orl-tiny7-base as it was until session 54 (git a2a43e7). Since session 54 that
# path holds this run's result, so from a later checkout give the old one (that checkout's file, not a rebuilt
# $R/five7w-s2d0, so that ship.sh can name it in the shipped manifest):
#   git worktree add /tmp/orl-a2a43e7 a2a43e7 && INIT=/tmp/orl-a2a43e7/checkpoints/orl-tiny7-base bash .../more.sh 1500
INIT=${INIT:-checkpoints/orl-tiny7-base}
if grep -q '"init_git_commit"\|"init": ".*checkpoints/orl-tiny7-base"' "$INIT/orl.json"; then  # a continuation itself: what this script makes
  echo "more.sh: $INIT is already a continuation (session 54's shipped base); set INIT to the base at git a2a43e7" >&2
  exit 2
fi
OMP_NUM_THREADS=1 orl train --recipe pretrain --preset tiny_base7h --out $R/base7-more \
    --set tasks=long7xp,prog7xp,split7xp,constr7xp,keysort7x,long7xph,prog7xph,long7xpf,split7xps,split7xpc,constr7xph,keysort7xh \
    --set mix=8,8,8,8,8,4,4,4,2,2,4,4 --set threads=1 --set model.attn_logn=false --set init=$INIT \
    --set ar_steps=0 --set diffusion_steps=$S --set stage2_lr=3e-4 --set warmup=50 --set ar_aux=2.0 \
    --set layout=absolute_grid --set pos_stretch=0 --set seed=12 --set eval_every=1000000 --set eval_max_new_tokens=96 \
    --set save_every=50 --set keep_every=500
