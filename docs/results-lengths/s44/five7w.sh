#!/bin/bash
# session 44: issue 21's five-family hinted base as a curriculum stage: the two-family AR stage hint4st-7k-sS (7,000
# steps of long7xp, prog7xp and their helpers) is the init (PretrainConfig.init: its weights, a fresh schedule), then
# STEPS AR steps (default 3,000) of all five hinted families and their helpers (split7xps + split7xpc, not session 43's
# dup helper, whose N+N merged into answers), the stretch kept as in the AR stage; the AR evaluation on prompt seed 0; then stage 2 without the stretch (session 42's
# best: docs/results-lengths/s40/stage2_40.sh's recipe, STRETCH=0) and the fused evaluation on the five families.
# Every piece resumes: rerun the same command after a cut.
#   bash docs/results-lengths/s44/five7w.sh SEED [THREADS]        (env: STEPS, TRAIN_TASKS, MIX; NAME, the run's name
#   without -sSEED, default five7w; FAMILIES, the evaluated families: session 45's constr7xq recipe names its own)
set -euo pipefail
source /work/main/.venv/bin/activate; cd /work/main
R=~/.cache/orl/runs; s=${1:?seed}; t=${2:-2}; S=${STEPS:-3000}; n=${NAME:-five7w}-s$s
T=${TRAIN_TASKS:-long7xp,prog7xp,split7xp,constr7xp,keysort7x,long7xph,prog7xph,long7xpf,split7xps,split7xpc,constr7xph,keysort7xh}
X=${MIX:-8,8,8,8,8,4,4,4,2,2,4,4}
F=${FAMILIES:-long7xp,prog7xp,split7xp,constr7xp,keysort7x}
common="--recipe pretrain --preset tiny_base7h --set tasks=$T --set mix=$X --set threads=$t --set model.attn_logn=false
        --set keep_every=500 --set save_every=50 --set seed=$s --set eval_every=500 --set eval_max_new_tokens=100
        --set init=$R/hint4st-7k-s$s --set ar_steps=$S"
# a finished run is left as it is by orl train (nothing to do), so the stage is rerun rather than guessed from its log
OMP_NUM_THREADS=$t orl train $common --out $R/$n --set diffusion_steps=0 --set pos_stretch=0.5 \
    --set pos_stretch_max=2.0 >> $R/$n.out 2>&1 < /dev/null
echo "AR stage done $(date)"
SEEDS=0 TASKS=$F OMP_NUM_THREADS=$t bash benchmarks/lengths_eval.sh $n ar > $R/s44-eval-$n-ar.log 2>&1
echo "AR eval done $(date)"
d=${n}d0
[ -d $R/$d ] || { rm -rf $R/$d.tmp && cp -r $R/$n $R/$d.tmp && mv $R/$d.tmp $R/$d; }  # a cut copy is never a run
OMP_NUM_THREADS=$t orl train $common --out $R/$d --set diffusion_steps=3000 --set ar_aux=2.0 \
    --set layout=absolute_grid --set pos_stretch=0 --set eval_every=1000000 --set eval_max_new_tokens=96 --allow-config-change >> $R/$d.out 2>&1 < /dev/null
echo "stage 2 done $(date)"
TASKS=$F OMP_NUM_THREADS=$t bash benchmarks/lengths_eval.sh $d fused > $R/s44-eval-$d-fused.log 2>&1
echo "fused eval done $(date)"
