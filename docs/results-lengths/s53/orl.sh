#!/bin/bash
# Session 53: tiny_orl7_ref (the shipped ORL's recipe, docs/TRAINING.md "Sessions 49-50") on the base trained 1,500
# more stage-2 steps (base7-more/, session 52's pick) into $R/NAME; one thread, a checkpoint kept every 120 updates;
# the settings after NAME go to `orl train` (a run already in $R/NAME resumes).
#   bash docs/results-lengths/s53/orl.sh more-ref --set updates=240
# Session 54 shipped base7-more as checkpoints/orl-tiny7-base (the same files), so these now read it from there (the
# records and manifests written before name it docs/results-lengths/s53/base7-more); BASE=DIR reads another copy, e.g.
# BASE=$R/base7-more when rebuilding the chain before step 7 of docs/TRAINING.md "Length-varied trio".
set -euo pipefail
cd "$(dirname "$0")/../../.."
source .venv/bin/activate
export OMP_NUM_THREADS=1
R=${R:-$HOME/.cache/orl/runs}
orl train --recipe orl --preset tiny_orl7_ref --base "${BASE:-checkpoints/orl-tiny7-base}" --out "$R/${1:?run name}" \
  --set threads=1 --set keep_every=120 "${@:2}"
