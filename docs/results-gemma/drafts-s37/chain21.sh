#!/usr/bin/env bash
# session 37: seed 2's no-KL draft arm (session 36 ran the KL arm), one core
set -u
cd /work/main && source .venv/bin/activate
export OMP_NUM_THREADS=1
R=~/.cache/orl/runs; E=$R/eval
orl train --recipe draft --preset tiny_draft7 --base $R/hint4-7k-s2v --out $R/draft7-s2-nokl --set threads=1 --set kl_weight=0 > $R/draft7-s2-nokl.out 2>&1 < /dev/null
echo "train rc $? $(date)"
bash benchmarks/lengths_eval.sh draft7-s2-nokl fused
echo "eval done $(date)"
python benchmarks/length_table.py $E/hint4-7k-s2v-fused.jsonl $E/draft7-s2-nokl-fused.jsonl --paired draft7-s2-nokl hint4-7k-s2v > $R/s37/nokl-vs-stage2.txt 2>&1
python benchmarks/length_table.py $E/draft7-s2-kl-fused.jsonl $E/draft7-s2-nokl-fused.jsonl --paired draft7-s2-nokl draft7-s2-kl > $R/s37/nokl-vs-kl.txt 2>&1
echo "chain done $(date)"
