#!/bin/bash
# session 39: the low-rank drafter (draft_rank, orl/train/draft_lora.py) against the full-copy drafter on gemma-3-270m:
# N draft-only steps of each from the original (no conversion stage first), bf16 on a CPU with AVX512-BF16, the
# default corpus (64-prompt distill stream); prints seconds per step from each run's log. Resumable per run.
#   bash docs/results-gemma/drafts-s39/lora_pilot.sh [STEPS] [RANK]
cd /work/main
R=~/.cache/orl/runs/s39; mkdir -p $R
N=${1:-6}; RANK=${2:-16}
export OMP_NUM_THREADS=1
for v in full:0 lora$RANK:$RANK; do name=${v%%:*}; rank=${v##*:}
  .venv/bin/orl train --recipe convert --preset gemma_convert_short --base ~/.cache/orl/gemma-3-270m \
    --out $R/pilot-$name-n$N --set threads=1 --set steps=$N --set warmup=1 --set checkpointing=false \
    --set eval_every=1000 --set save_every=1000 --set draft_only=true --set draft_aux=1.0 --set draft_target=ar \
    --set bf16=true --set draft_rank=$rank $( [ "$rank" != 0 ] && echo --set lr=2e-4 ) > $R/pilot-$name-n$N.out 2>&1
  .venv/bin/python - "$R/pilot-$name-n$N/train.log.jsonl" "$name" <<'PY'
import json, sys, statistics
rows = [json.loads(l) for l in open(sys.argv[1]) if '"tok_s"' in l]
dt = [r["tokens_seen"] / r["step"] / r["tok_s"] for r in rows[1:]]   # seconds a step, the first (warm-up) left out
print(f"{sys.argv[2]}: steps {len(rows)}, median {statistics.median(dt):.2f} s a step, losses {[r['loss'] for r in rows]}")
PY
done
