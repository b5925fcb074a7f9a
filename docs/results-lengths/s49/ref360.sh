#!/usr/bin/env bash
# Session 49: run A (tiny7-ref) continued to 360 updates (the learning rates are constant: --set updates continues it
# exactly). It overwrites $R/tiny7-ref (the 240-update weights are checkpoints/orl-tiny7-orl); thr360.sh evaluates it.
set -euo pipefail
cd "$(dirname "$0")/../../.."
source .venv/bin/activate
export OMP_NUM_THREADS=1
R=${R:-$HOME/.cache/orl/runs}
orl train --recipe orl --preset tiny_orl7_ref --base checkpoints/orl-tiny7-base --out "$R/tiny7-ref" \
  --set threads=1 --set keep_every=120 --set updates=360
