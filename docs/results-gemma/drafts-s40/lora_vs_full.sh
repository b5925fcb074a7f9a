#!/bin/bash
# session 40: issue 22's low-rank drafter against the full-copy drafter, both one-stage from gemma-3-270m: N
# draft-only steps each, the full copy at the preset's lr 5e-5, rank R at 2e-4 (the session-39 pilot's), each then
# measured (lora_arm.sh). Resumable: rerun it.
#   bash docs/results-gemma/drafts-s40/lora_vs_full.sh [STEPS] [RANK] [WINDOWS] [PROMPTS]
N=${1:-100}; RANK=${2:-16}; W=${3:-64}; P=${4:-32}
D=$(dirname "$0")
bash $D/lora_arm.sh 0 5e-5 $N $W $P full && bash $D/lora_arm.sh $RANK 2e-4 $N $W $P lora$RANK
