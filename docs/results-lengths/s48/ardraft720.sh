#!/bin/bash
# session 48: the AR peer's drafter (session 47's tiny7-ardraft recipe: draft-only, verifier orl-tiny7-ar, lr 2e-4)
# trained to 720 updates, with copies kept at 240 and 480 (keep_every), one thread. The learning rate is constant, so
# the copy at 240 is the shipped orl-tiny7-ardraft's run and the one at 480 session 47's continued run (the data of an
# update depends on the seed and its index only). Resumable: rerun the same command.
set -euo pipefail
source /work/main/.venv/bin/activate; cd /work/main
R=~/.cache/orl/runs; n=tiny7-ardraft-720; mkdir -p $R/s48
OMP_NUM_THREADS=1 orl train --recipe draft --preset tiny_draft7_only --base checkpoints/orl-tiny7-base --out $R/$n \
    --set threads=1 --set verifier=checkpoints/orl-tiny7-ar --set lr=2e-4 --set updates=720 --set keep_every=240 \
    >> $R/s48/$n.out 2>&1 < /dev/null
echo "draft done $(date)"
