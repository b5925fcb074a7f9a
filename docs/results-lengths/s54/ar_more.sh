#!/bin/bash
# Session 54: the AR peer at the new base's budget (issue 21 item 5). The shipped base is now the old base + 1,500
# stage-2 steps (docs/results-lengths/s52/more.sh); this gives the AR peer the same 1,500 steps: the shipped peer
# (checkpoints/orl-tiny7-ar as of git d5eb2ad, 3,000 AR steps after the AR stage five7w-s2) continued for STEPS
# next-token steps with its own tasks, mix and position stretch, from its weights (a fresh optimizer and cosine
# schedule), the base continuation's data seed (12) and peak lr (3e-4). One thread; resumable (rerun the same command).
# -> $R/ar7-more (+ an -at500 / -at1000 copy)
#   bash docs/results-lengths/s54/ar_more.sh [STEPS]
set -euo pipefail
cd "$(dirname "$0")/../../.."
source .venv/bin/activate
R=${R:-$HOME/.cache/orl/runs}; S=${1:-1500}; INIT=${INIT:-checkpoints/orl-tiny7-ar}
OMP_NUM_THREADS=1 orl train --recipe pretrain --preset tiny_base7h --out $R/ar7-more \
    --set tasks=long7xp,prog7xp,split7xp,constr7xp,keysort7x,long7xph,prog7xph,long7xpf,split7xps,split7xpc,constr7xph,keysort7xh \
    --set mix=8,8,8,8,8,4,4,4,2,2,4,4 --set threads=1 --set model.attn_logn=false --set init=$INIT \
    --set ar_steps=$S --set diffusion_steps=0 --set lr=3e-4 --set warmup=50 --set ar_aux=0 \
    --set layout=prompt_block --set pos_stretch=0.5 --set pos_stretch_max=2.0 --set seed=12 --set eval_every=1000000 \
    --set eval_max_new_tokens=100 --set save_every=50 --set keep_every=500
