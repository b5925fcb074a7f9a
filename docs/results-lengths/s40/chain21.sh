#!/bin/bash
# session 40: after a stage-2 run M (default seed 2's pos_stretch one) ends: its evaluation (fused k8 g3 and threshold
# 0.9, test seeds 0-2) beside ORL on it (tiny_orl7, session 31's), then ORL's evaluation; one thread each.
#   M=hint4st-7k-s1d bash docs/results-lengths/s40/chain21.sh
source /work/main/.venv/bin/activate; cd /work/main
export OMP_NUM_THREADS=1
R=~/.cache/orl/runs; M=${M:-hint4st-7k-s2d}
while pgrep -f -- "--out $R/$M " > /dev/null; do sleep 20; done  # M's own training only, not another seed's
grep -q '"step": 10000' $R/$M/train.log.jsonl || { echo "stage 2 did not reach step 10000"; exit 1; }
echo "stage 2 done $(date)"
( bash benchmarks/lengths_eval.sh $M fused > $R/s40/eval-$M-fused.log 2>&1; bash benchmarks/lengths_eval.sh $M thr > $R/s40/eval-$M-thr.log 2>&1; echo "base evals done $(date)" ) &
orl train --recipe orl --preset tiny_orl7 --base $R/$M --out $R/$M-orl --set threads=1 > $R/s40/$M-orl.out 2>&1 < /dev/null
echo "orl done rc $? $(date)"
wait
bash benchmarks/lengths_eval.sh $M-orl fused > $R/s40/eval-$M-orl-fused.log 2>&1 &
bash benchmarks/lengths_eval.sh $M-orl thr > $R/s40/eval-$M-orl-thr.log 2>&1
wait
echo "all done $(date)"
