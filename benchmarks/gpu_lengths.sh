#!/usr/bin/env bash
# Issue 21 on a lent GPU, in one device call: the hint4g3 recipe (docs/TRAINING.md: long7xp, prog7xp and their
# helpers; 3,500 AR steps, then 3,000 block-diffusion steps on the absolute grid with the next-token loss kept at
# weight 2) from scratch, once per variant, the variants trained side by side on the one GPU (one process each),
# then each evaluated on long7xp / prog7xp in range and beyond (prompt seeds SEEDS, LIMIT prompts per family and
# split): threshold 0.9 (batch 16) and the fused self-speculative decoder (k 8, 3 groups, batch 1). On these
# 2 CPU cores the pair takes a whole session per variant and runs do not survive between sessions; on a GPU the
# steps are cheap. A run still training at its limit stops there (it saves every 100 steps) and its last
# checkpoint is evaluated: each record names the model's step (orl.json's recipe.step) beside its id.
#
#   DEVICE=cuda DEADLINE_S=540 bash benchmarks/gpu_lengths.sh       (on the device; OUT is set there)
#   python benchmarks/length_table.py OUT/*.jsonl --paired "gpu-logn/threshold L16/0.9" "gpu-plain/threshold L16/0.9"
#
# $OUT gets at most 8 files: log.txt, per variant V run-V.tar (weights, manifest, tokenizer, training log:
# about 10 MB), thr-V.jsonl and fused-V.jsonl (eval records). Exit 0 only when every variant's evaluations ran.
# Env: VARIANTS (default "plain logn": logn sets model.attn_logn, scalable softmax), DEVICE (default cuda when
# torch sees one; pass it on the device so a machine without CUDA stops at once), DEADLINE_S (seconds from the
# start by which everything must be written; default 540), EVAL_RESERVE (kept for the evaluations, default 200),
# AR_STEPS (3500), DIFF_STEPS (3000), LIMIT (100), SEEDS ("0 1 2"), FUSED_SEEDS ("0": batch-1 decoding is the
# slow part), WORK (default /root/gpu_lengths), PYTHON (python3), EXTRA_SET (more `--set k=v` words).
# tests/test_gpu_lengths.py runs it on the CPU here with a few steps and prompts.
set -uo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
OUT="${OUT:-/tmp/gpu_lengths_out}"
WORK="${WORK:-/root/gpu_lengths}"
VARIANTS="${VARIANTS:-plain logn}"
DEADLINE_S="${DEADLINE_S:-540}"
EVAL_RESERVE="${EVAL_RESERVE:-200}"
AR_STEPS="${AR_STEPS:-3500}"
DIFF_STEPS="${DIFF_STEPS:-3000}"
LIMIT="${LIMIT:-100}"
SEEDS="${SEEDS:-0 1 2}"
FUSED_SEEDS="${FUSED_SEEDS:-0}"
EXTRA_SET="${EXTRA_SET:-}"
mkdir -p "$OUT" "$WORK"
exec > >(tee -a "$OUT/log.txt") 2>&1
TEE=$!
finish() { exec >&- 2>&-; wait "$TEE" 2>/dev/null; }  # log.txt complete before the call returns
trap finish EXIT
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
START=$(date +%s)
stamp() { echo "=== $* (t=$(( $(date +%s) - START ))s)"; }
left() { local l=$(( DEADLINE_S - ($(date +%s) - START) )); [ "$l" -lt 1 ] && l=1; echo "$l"; }

stamp "environment"
DEVICE="${DEVICE:-$("$PY" -c 'import torch; print("cuda" if torch.cuda.is_available() else "cpu")')}"
"$PY" -c "import sys, torch; print('torch', torch.__version__, '| device $DEVICE', '| cuda', torch.cuda.is_available())
sys.exit(0 if '$DEVICE' == 'cpu' or torch.cuda.is_available() else 3)" || { echo "DEVICE=$DEVICE but torch sees no CUDA"; exit 3; }

JOBS=""  # a bare `wait` would also wait for the log's tee (a process substitution, bash >= 5.1)
for v in $VARIANTS; do
  case "$v" in plain) logn=false ;; logn) logn=true ;; *) echo "unknown variant $v (plain | logn)"; exit 2 ;; esac
  # --fresh: a directory left by an earlier call on a warm machine is not resumed under other settings
  set -f  # EXTRA_SET's words are options, not globs
  # shellcheck disable=SC2086
  timeout "$(( $(left) - EVAL_RESERVE ))" "$PY" -m orl.cli train --recipe pretrain --preset tiny_base7h --fresh \
    --out "$WORK/gpu-$v" --device "$DEVICE" \
    --set tasks=long7xp,prog7xp,long7xph,prog7xph,long7xpf --set mix=12,12,6,6,6 --set ar_steps="$AR_STEPS" \
    --set diffusion_steps="$DIFF_STEPS" --set ar_aux=2.0 --set layout=absolute_grid --set eval_max_new_tokens=96 \
    --set eval_every=1000000 --set model.attn_logn=$logn $EXTRA_SET > "$WORK/train-$v.out" 2>&1 &
  JOBS="$JOBS $!"
  set +f
done
stamp "training ($VARIANTS) until done or $(( $(left) - EVAL_RESERVE )) s"
# shellcheck disable=SC2086
wait $JOBS
for v in $VARIANTS; do
  echo "--- gpu-$v: last lines"; tail -n 3 "$WORK/train-$v.out"
  "$PY" -c "import json, sys; print('gpu-$v step', json.load(open(sys.argv[1]))['recipe']['step'])" "$WORK/gpu-$v/orl.json" \
    || echo "gpu-$v has no checkpoint"
done

stamp "evaluations"
JOBS=""
for v in $VARIANTS; do
  [ -f "$WORK/gpu-$v/orl.json" ] || continue
  (for seed in $SEEDS; do for s in heldout beyond; do
     timeout "$(left)" "$PY" -m orl.cli eval --model "$WORK/gpu-$v" --tasks long7xp,prog7xp --split $s --limit "$LIMIT" \
       --max-new-tokens 104 --thresholds 0.9 --seed $seed --device "$DEVICE" --no-progress --out "$OUT/thr-$v.jsonl"
   done; done) > "$WORK/thr-$v.out" 2>&1 &
  JOBS="$JOBS $!"
  (for seed in $FUSED_SEEDS; do for s in heldout beyond; do
     timeout "$(left)" "$PY" -m orl.cli eval --model "$WORK/gpu-$v" --tasks long7xp,prog7xp --split $s --limit "$LIMIT" \
       --max-new-tokens 104 --batch-size 1 --spec-tokens 8 --spec-draft fused --spec-groups 3 --seed $seed \
       --device "$DEVICE" --no-progress --out "$OUT/fused-$v.jsonl"
   done; done) > "$WORK/fused-$v.out" 2>&1 &
  JOBS="$JOBS $!"
done
# shellcheck disable=SC2086
wait $JOBS
STATUS=0
for v in $VARIANTS; do
  for k in thr fused; do echo "--- $k-$v"; tail -n 4 "$WORK/$k-$v.out" 2>/dev/null; done
  [ -s "$OUT/thr-$v.jsonl" ] && [ -s "$OUT/fused-$v.jsonl" ] || STATUS=1
  [ -d "$WORK/gpu-$v" ] && tar -C "$WORK" -cf "$OUT/run-$v.tar" --exclude trainer_state.pt --exclude stage1 "gpu-$v"
done
stamp "done (status $STATUS)"
exit $STATUS
