#!/bin/bash
# Session 53: a drafter for the base trained 1,500 more stage-2 steps (base7-more/), as session 47's for the shipped
# base (docs/TRAINING.md "A drafter for the base"): the draft recipe's draft-only form (the base, frozen, verifies;
# a copy drafts and trains; outputs are the base's token for token), 240 updates, lr 2e-4, one thread, -> $R/NAME.
# Resumable: rerun the same command.
#   bash docs/results-lengths/s53/draft.sh draft-more
# Session 54 shipped base7-more as checkpoints/orl-tiny7-base (the same files), so these now read it from there (the
# records and manifests written before name it docs/results-lengths/s53/base7-more); BASE=DIR reads another copy, e.g.
# BASE=$R/base7-more when rebuilding the chain before step 7 of docs/TRAINING.md "Length-varied trio".
set -euo pipefail
cd "$(dirname "$0")/../../.."
source .venv/bin/activate
export OMP_NUM_THREADS=1
R=${R:-$HOME/.cache/orl/runs}
orl train --recipe draft --preset tiny_draft7_only --base "${BASE:-checkpoints/orl-tiny7-base}" --out "$R/${1:?run name}" \
  --set threads=1 --set lr=2e-4 "${@:2}"
