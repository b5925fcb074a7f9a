#!/bin/bash
# session 46: the draft recipe on the shipped tiny7 base without its next-token term (ar_weight 0; KL anchor kept),
# then the fused evaluation on the five families (test prompt seeds 0-2). Resumable: rerun the same command.
# the tiny7 draft recipe with its next-token term (ar_weight 0.5, the preset): the same command without --set ar_weight=0, --out $R/tiny7-draft-kl
set -euo pipefail
source /work/main/.venv/bin/activate; cd /work/main
R=~/.cache/orl/runs; n=tiny7-draft-kl-noar; mkdir -p $R/s46
OMP_NUM_THREADS=1 orl train --recipe draft --preset tiny_draft7 --base checkpoints/orl-tiny7-base --out $R/$n \
    --set tasks=long7xp,prog7xp,split7xp,constr7xp,keysort7x --set threads=1 --set ar_weight=0 >> $R/s46/$n.out 2>&1 < /dev/null
echo "draft done $(date)"
TASKS=long7xp,prog7xp,split7xp,constr7xp,keysort7x OMP_NUM_THREADS=1 bash benchmarks/lengths_eval.sh $n fused > $R/s46/eval-$n.log 2>&1
echo "eval done $(date)"
