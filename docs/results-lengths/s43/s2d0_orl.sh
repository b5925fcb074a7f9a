#!/bin/bash
# session 43: seed 2's stage-2 base without the stretch (hint4st-7k-s2d0): KL-anchored ORL (tiny_orl7_arkl) and plain ORL
# (tiny_orl7) on it, each followed by its fused k8 g3 and threshold-0.9 evaluation (test seeds 0-2), one thread,
# one after the other so that a second job (the seed-0 pipeline) keeps the other core. Resumable: rerun it.
#   bash docs/results-lengths/s43/s2d0_orl.sh
source /work/main/.venv/bin/activate; cd /work/main
export OMP_NUM_THREADS=1
R=~/.cache/orl/runs; M=hint4st-7k-s2d0; mkdir -p $R/s43
M=$M P=tiny_orl7_arkl S=orlarkl bash docs/results-lengths/s42/orl_ar.sh
M=$M P=tiny_orl7 S=orl bash docs/results-lengths/s42/orl_ar.sh
echo "s2d0 done $(date)"
