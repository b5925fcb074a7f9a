#!/bin/bash
# session 40 -> 41: seed 1's stage 2 on both cores (threads and save_every are resume-free), resumable
source /work/main/.venv/bin/activate; cd /work/main
R=~/.cache/orl/runs; s=1
[ -d $R/hint4st-7k-s${s}d ] || cp -r $R/hint4st-7k-s$s $R/hint4st-7k-s${s}d
OMP_NUM_THREADS=2 orl train --recipe pretrain --preset tiny_base7h --out $R/hint4st-7k-s${s}d \
    --set tasks=long7xp,prog7xp,long7xph,prog7xph,long7xpf --set mix=12,12,6,6,6 --set ar_steps=7000 \
    --set diffusion_steps=3000 --set ar_aux=2.0 --set layout=absolute_grid --set eval_max_new_tokens=96 \
    --set eval_every=1000000 --set threads=2 --set save_every=50 --set model.attn_logn=false --set seed=$s --set keep_every=500 \
    --set pos_stretch=0.5 --set pos_stretch_max=2.0 --allow-config-change >> $R/hint4st-7k-s${s}d.out 2>&1 < /dev/null
