#!/usr/bin/env bash
# Session 50, arm C: tiny_orl7_ref with rollouts at threshold 0.7 (they commit more tokens a step, so the kept and
# relabelled states are the ones a faster decoder visits), 240 updates from the base; compared at 0.9 with run A.
set -euo pipefail
cd "$(dirname "$0")/../../.."
source .venv/bin/activate
export OMP_NUM_THREADS=1
R=${R:-$HOME/.cache/orl/runs}
orl train --recipe orl --preset tiny_orl7_ref --base checkpoints/orl-tiny7-base --out "$R/tiny7-ref-t07" \
  --set threads=1 --set keep_every=120 --set rollout.threshold=0.7
