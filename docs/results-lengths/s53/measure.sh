#!/bin/bash
# Session 53: the retrained base7-more (base7-more/ here, session 52's validation pick retrained: its training log
# agrees with session 52's to the last printed digit at worst, 4e-5 in a loss, not bit for bit) measured again on the
# five families, test prompt seeds 0-2, 100 prompts a family, split and seed: MODES (default "thr fused"), one thread,
# records -> $R/eval/s53/base7-more-<mode>.jsonl (gzipped copies beside this script; orl-tiny7-base-<mode> since session 54).
#   bash docs/results-lengths/s53/measure.sh [thr] [fused]
# Session 54 shipped base7-more as checkpoints/orl-tiny7-base (the same files), so these now read it from there (the
# records and manifests written before name it docs/results-lengths/s53/base7-more); BASE=DIR reads another copy, e.g.
# BASE=$R/base7-more when rebuilding the chain before step 7 of docs/TRAINING.md "Length-varied trio".
set -euo pipefail
cd "$(dirname "$0")/../../.."
source .venv/bin/activate
export OMP_NUM_THREADS=1 TASKS=long7xp,prog7xp,split7xp,constr7xp,keysort7x
R=${R:-$HOME/.cache/orl/runs}; export E=${E:-$R/eval/s53}
bash benchmarks/lengths_eval.sh "${BASE:-checkpoints/orl-tiny7-base}" "${@:-thr fused}"
