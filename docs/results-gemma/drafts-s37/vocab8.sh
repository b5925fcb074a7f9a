#!/bin/bash
# session 37: draft vocabulary and draft groups on 8 windows / 8 prompts (a pilot; the 128 / 64 run follows)
# vocab8h.sh (after orl.model.head, same session) ran this loop over "hbase::" "hv32k:--draft-vocab 32768:" "hv32k-g2:--draft-vocab 32768:--spec-groups 2"
cd /work/main
R=~/.cache/orl/runs; O=$R/s37/ce
for v in "base::" "v32k:--draft-vocab 32768:" "g2::--spec-groups 2" "v32k-g2:--draft-vocab 32768:--spec-groups 2" "v8k:--draft-vocab 8192:"; do
  n=${v%%:*}; rest=${v#*:}; a=${rest%%:*}; b=${rest#*:}
  OMP_NUM_THREADS=1 .venv/bin/python benchmarks/convert_eval.py --ar ~/.cache/orl/gemma-3-270m --dlm $R/gdonly150-s150 \
    --corpus ~/.cache/orl/corpus/b1a208dc9de66062 --windows 8 --context 64 --block 4 --thresholds none \
    --free-tokens 32 --free-prompts 8 --spec 3 --spec-verifier ar --threads 1 $a $b --out $O/w8-$n.json > $O/w8-$n.log 2>&1
  echo "$n done $(date)"
done
