#!/bin/bash
# session 40: session 39's stage 2 (session 30's recipe, the stretch kept on) for one training seed, resumable;
# threads and save_every are resume-free. Seed 2 ran with THREADS=1 to step 8,700, then THREADS=2; seed 1 started
# with THREADS=2 at the end of the session.   bash docs/results-lengths/s40/stage2_40.sh SEED [THREADS]
source /work/main/.venv/bin/activate; cd /work/main
# STRETCH=0 (session 41): the same stage 2 without the stretch, from the same AR stage, into hint4st-7k-sSd0
R=~/.cache/orl/runs; s=${1:?seed}; t=${2:-1}; st=${STRETCH:-0.5}
d=$R/hint4st-7k-s${s}d; [ "$st" = 0.5 ] || d=${d}${st//./}
[ -d $d ] || cp -r $R/hint4st-7k-s$s $d
OMP_NUM_THREADS=$t orl train --recipe pretrain --preset tiny_base7h --out $d \
    --set tasks=long7xp,prog7xp,long7xph,prog7xph,long7xpf --set mix=12,12,6,6,6 --set ar_steps=7000 \
    --set diffusion_steps=3000 --set ar_aux=2.0 --set layout=absolute_grid --set eval_max_new_tokens=96 \
    --set eval_every=1000000 --set threads=$t --set save_every=50 --set model.attn_logn=false --set seed=$s \
    --set keep_every=500 --set pos_stretch=$st --set pos_stretch_max=2.0 --allow-config-change \
    >> $d.out 2>&1 < /dev/null
