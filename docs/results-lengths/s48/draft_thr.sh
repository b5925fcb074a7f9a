#!/bin/bash
# session 48: does on-policy training of the diffusion path on its own AR path's verified answers (session 46's draft
# recipe with shared weights, tiny7-draft-kl) move the THRESHOLD decoder's accuracy-TPF curve, where ORL moved along
# it? Retrains session 46's run (its weights were in the lost cache), then the threshold decoder at 0.9 on both splits
# and 0.8 / 0.95 / 0.99 in range (test prompt seeds 0-2, 100 a family), beside the base's records from session 45-46.
set -euo pipefail
source /work/main/.venv/bin/activate; cd /work/main
R=~/.cache/orl/runs; n=tiny7-draft-kl; mkdir -p $R/s48
OMP_NUM_THREADS=1 orl train --recipe draft --preset tiny_draft7 --base checkpoints/orl-tiny7-base --out $R/$n \
    --set tasks=long7xp,prog7xp,split7xp,constr7xp,keysort7x --set threads=1 >> $R/s48/$n.out 2>&1 < /dev/null
echo "draft done $(date)"
TASKS=long7xp,prog7xp,split7xp,constr7xp,keysort7x OMP_NUM_THREADS=1 bash benchmarks/lengths_eval.sh $n thr sweep \
    > $R/s48/eval-$n.log 2>&1
echo "eval done $(date)"
