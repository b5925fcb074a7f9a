#!/usr/bin/env bash
# Session 50's ORL runs: tiny_orl7_ref from the shipped base into $R/NAME, one thread, a checkpoint kept every 120
# updates; the settings after NAME go to `orl train` (a run already in $R/NAME resumes; constant learning rates, so
# --set updates=N continues it exactly).
#   bash docs/results-lengths/s50/run.sh tiny7-ref --set updates=480                # run A, 360 -> 480 updates
#   bash docs/results-lengths/s50/run.sh tiny7-ref-t07 --set rollout.threshold=0.7  # arm C, 240 updates
set -euo pipefail
cd "$(dirname "$0")/../../.."
source .venv/bin/activate
export OMP_NUM_THREADS=1
R=${R:-$HOME/.cache/orl/runs}
orl train --recipe orl --preset tiny_orl7_ref --base checkpoints/orl-tiny7-base --out "$R/${1:?run name}" \
  --set threads=1 --set keep_every=120 "${@:2}"
