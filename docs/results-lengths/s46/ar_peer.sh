#!/bin/bash
# session 46: a same-budget AR peer for issue 21 item 5: the AR stage five7w-s2 continued for the 3,000 steps the base
# spent on block diffusion (stage 2's lr 1e-3, its tasks and mix, the AR stage's position stretch), then greedy AR on
# the five families (test prompt seeds 0-2). Resumable: rerun the same command.
set -euo pipefail
source /work/main/.venv/bin/activate; cd /work/main
R=~/.cache/orl/runs; n=five7w-s2-ar6k; mkdir -p $R/s46
T=long7xp,prog7xp,split7xp,constr7xp,keysort7x,long7xph,prog7xph,long7xpf,split7xps,split7xpc,constr7xph,keysort7xh
OMP_NUM_THREADS=1 orl train --recipe pretrain --preset tiny_base7h --set tasks=$T --set mix=8,8,8,8,8,4,4,4,2,2,4,4 \
    --set threads=1 --set model.attn_logn=false --set keep_every=500 --set save_every=50 --set seed=2 \
    --set eval_every=1000000 --set eval_max_new_tokens=100 --set init=$R/five7w-s2 --set ar_steps=3000 --set lr=0.001 \
    --set diffusion_steps=0 --set pos_stretch=0.5 --set pos_stretch_max=2.0 --out $R/$n >> $R/$n.out 2>&1 < /dev/null
echo "AR continuation done $(date)"
TASKS=long7xp,prog7xp,split7xp,constr7xp,keysort7x OMP_NUM_THREADS=1 bash benchmarks/lengths_eval.sh $n ar > $R/s46/eval-$n-ar.log 2>&1
echo "AR eval done $(date)"
