#!/bin/bash
# session 42: ORL with an AR-path anchor on a stage-2 base M, then its evaluation (fused k8 g3 and threshold 0.9, test
# seeds 0-2), for pairing with tiny_orl7 on the same base. P: the preset, S: the run's suffix.
#   M=hint4st-7k-s1d bash docs/results-lengths/s42/orl_ar.sh                                  (tiny_orl7_ar -> M-orlar)
#   M=hint4st-7k-s1d P=tiny_orl7_arkl S=orlarkl bash docs/results-lengths/s42/orl_ar.sh      (resumable: rerun it)
source /work/main/.venv/bin/activate; cd /work/main
export OMP_NUM_THREADS=1
R=~/.cache/orl/runs; M=${M:-hint4st-7k-s1d}; P=${P:-tiny_orl7_ar}; S=${S:-orlar}; mkdir -p $R/s42
orl train --recipe orl --preset $P --base $R/$M --out $R/$M-$S --set threads=1 >> $R/s42/$M-$S.out 2>&1 < /dev/null
echo "orl done rc $? $(date)"
bash benchmarks/lengths_eval.sh $M-$S fused > $R/s42/eval-$M-$S-fused.log 2>&1
bash benchmarks/lengths_eval.sh $M-$S thr > $R/s42/eval-$M-$S-thr.log 2>&1
echo "all done $(date)"
