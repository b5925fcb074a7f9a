#!/usr/bin/env bash
# Session 49: ORL with reference relabelling (orl.train.relabel) on the shipped tiny7 base, two arms side by side
# (one thread each): A = tiny_orl7_ref (tiny_orl7_arkl + relabel=reference), B = A with a stronger contraction.
#   bash docs/results-lengths/s49/ref.sh A|B      (rerun to resume)
set -euo pipefail
cd "$(dirname "$0")/../../.."
source .venv/bin/activate
export OMP_NUM_THREADS=1
R=${R:-$HOME/.cache/orl/runs}
case ${1:?A or B} in
  A) orl train --recipe orl --preset tiny_orl7_ref --base checkpoints/orl-tiny7-base --out "$R/tiny7-ref" \
       --set threads=1 --set keep_every=120 ;;
  B) orl train --recipe orl --preset tiny_orl7_ref --base checkpoints/orl-tiny7-base --out "$R/tiny7-ref-aec" \
       --set threads=1 --set keep_every=120 --set weights.lambda_aec=2.0 --set weights.rho=0.5 ;;
esac
