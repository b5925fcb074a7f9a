#!/bin/bash
# session 47: the draft recipe's draft-only form on the shipped tiny7 base (the base, frozen, verifies; a copy drafts
# and trains: the outputs are the base's token for token), then the fused evaluation on the five families (test
# prompt seeds 0-2, 1,500 prompts a split). Resumable: rerun the same command.
#   bash docs/results-lengths/s47/draft_only.sh NAME [--set k=v ...]     e.g. tiny7-donly (the preset, lr 5e-5)
set -euo pipefail
source /work/main/.venv/bin/activate; cd /work/main
R=~/.cache/orl/runs; n=${1:?usage: draft_only.sh NAME [--set k=v ...]}; shift; mkdir -p $R/s47
OMP_NUM_THREADS=1 orl train --recipe draft --preset tiny_draft7_only --base checkpoints/orl-tiny7-base --out $R/$n \
    --set threads=1 "$@" >> $R/s47/$n.out 2>&1 < /dev/null
echo "draft done $(date)"
TASKS=long7xp,prog7xp,split7xp,constr7xp,keysort7x OMP_NUM_THREADS=1 bash benchmarks/lengths_eval.sh $n fused > $R/s47/eval-$n.log 2>&1
echo "eval done $(date)"
