#!/bin/bash
# session 42's sequencing of seed 2's no-stretch stage 2 (a record: it switched threads when the test suite ended,
# signalled by /tmp/suite_done), then its evaluation and stretch_loss.py. To rerun: STRETCH=0 stage2_40.sh 2 2, then the
# last block's commands.
source /work/main/.venv/bin/activate; cd /work/main
R=~/.cache/orl/runs; M=hint4st-7k-s2d0
step() { python3 -c "import json;print(json.load(open('$R/$M/orl.json'))['recipe']['step'])"; }
s0=$(step); while [ "$(step)" = "$s0" ]; do sleep 3; done
pkill -f "bash /tmp/s2d0_auto.sh"; pkill -f -- "--out $R/$M "; sleep 4
echo "restart 1 thread at $(step) $(date)"
(STRETCH=0 bash docs/results-lengths/s40/stage2_40.sh 2 1 &)
while [ ! -f /tmp/suite_done ]; do sleep 10; if ! pgrep -f -- "--out $R/$M " >/dev/null; then break; fi; done
if pgrep -f -- "--out $R/$M " >/dev/null; then
  s0=$(step); while [ "$(step)" = "$s0" ]; do sleep 3; done
  pkill -f -- "--out $R/$M "; sleep 4
  echo "restart 2 threads at $(step) $(date)"
  STRETCH=0 bash docs/results-lengths/s40/stage2_40.sh 2 2
fi
grep -q '"step": 10000' $R/$M/train.log.jsonl || { echo "not at 10000"; exit 1; }
echo "stage 2 done $(date)"
export OMP_NUM_THREADS=1
bash benchmarks/lengths_eval.sh $M fused > $R/s42/eval-$M-fused.log 2>&1 &
bash benchmarks/lengths_eval.sh $M thr > $R/s42/eval-$M-thr.log 2>&1
wait
echo "evals done $(date)"
python docs/results-lengths/s41/stretch_loss.py $R/$M-at7500 $R/$M-at8000 $R/$M-at8500 $R/$M-at9000 $R/$M-at9500 $R/$M --steps 8 --first 20000 > $R/s42/stretch_loss_s2d0.md 2>&1
echo "all done $(date)"
