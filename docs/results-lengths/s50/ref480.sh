#!/usr/bin/env bash
# Session 50: session 49's run A (tiny7-ref, 360 updates; a copy kept as $R/tiny7-ref360) continued to 480 updates
# (constant learning rates: --set updates continues it exactly). It overwrites $R/tiny7-ref.
set -euo pipefail
cd "$(dirname "$0")/../../.."
source .venv/bin/activate
export OMP_NUM_THREADS=1
R=${R:-$HOME/.cache/orl/runs}
orl train --recipe orl --preset tiny_orl7_ref --base checkpoints/orl-tiny7-base --out "$R/tiny7-ref" \
  --set threads=1 --set keep_every=120 --set updates=480
