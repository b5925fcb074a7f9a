#!/usr/bin/env bash
# Session 51, arm F: certainty forcing (weights.lambda_cf, DESIGN section 4) on the shipped ORL run. Its 360-update
# state (a copy of run A at 360 updates, $R/tiny7-ref360, with trainer_state.pt) continued to 480 updates with the
# term added; run A's own 360 -> 480 continuation (tiny7-ref480, session 50) is the same run without it (the same
# prompts, seeds and learning rate), so the two pair update for update. Then threshold 0.9 on both splits and the
# 0.8/0.95/0.99 sweep (test seeds 0-2).
#   bash docs/results-lengths/s51/cf.sh 1        # lambda_cf = 1 -> $R/tiny7-cf1 (~35 min + ~8 min, one thread)
set -euo pipefail
cd "$(dirname "$0")/../../.."
L=${1:?lambda_cf}; R=${R:-$HOME/.cache/orl/runs}
[ -d "$R/tiny7-cf$L" ] || cp -r "$R/tiny7-ref360" "$R/tiny7-cf$L"
bash docs/results-lengths/s50/run.sh "tiny7-cf$L" --set updates=480 --set weights.lambda_cf="$L" --allow-config-change
MODES="thr sweep" bash docs/results-lengths/s50/eval.sh "tiny7-cf$L"
