#!/usr/bin/env bash
# Issue 21 on a lent GPU, in one device call: the hint4g3 recipe (docs/TRAINING.md: long7xp, prog7xp and their
# helpers; 3,500 AR steps, then 3,000 block-diffusion steps on the absolute grid with the next-token loss kept at
# weight 2) from scratch, once per variant, the variants trained side by side on the one GPU (one process each),
# then each evaluated on long7xp / prog7xp in range and beyond (prompt seeds SEEDS, LIMIT prompts per family and
# split): threshold 0.9 (batch 16) and the fused self-speculative decoder (k 8, 3 groups, batch 1). On these
# 2 CPU cores one variant takes a whole session and runs do not survive between sessions; on a GPU the steps are
# cheap. A run still training at its limit stops there (it saves every 100 steps) and its last checkpoint is
# evaluated: each record names the model's step (orl.json's recipe.step) beside its id.
#
# A variant is RECIPE@SEED (the training seed; "@SEED" left out means 0). RECIPE is one of
#   plain   hint4g3's tasks: long7xp,prog7xp,long7xph,prog7xph,long7xpf, mix 12,12,6,6,6
#   logn    plain with model.attn_logn (scalable softmax)
#   pf      plain plus 6 rows of prog7xpf (prog7xp's distance helper, run hint6 in docs/TRAINING.md)
#   pflogn  pf with model.attn_logn
# The run of RECIPE@SEED is gpu-RECIPE-sSEED. Why several seeds: on the CPU (session 27) the same recipe moved
# prog7xp in range from 16% to 90% between training seeds, more than any recipe change did.
#
#   DEVICE=cuda DEADLINE_S=540 bash benchmarks/gpu_lengths.sh       (on the device; OUT is set there)
#   python benchmarks/length_table.py OUT/thr.jsonl --paired "gpu-pf-s0/threshold L16/0.9" "gpu-plain-s0/threshold L16/0.9"
#
# $OUT gets at most 8 files: log.txt; thr.jsonl and fused.jsonl (every variant's eval records); logs.tar (each
# run's manifest, training log and console output); run-RECIPE-sSEED.tar (weights, manifest, tokenizer: about
# 10 MB) for the first WEIGHTS variants listed (default and most 4: a device call brings back 8 files). Exit 0 only
# when every variant's evaluations ran.
# Env: VARIANTS (default "plain@0 plain@1 plain@2 pf@0 pf@1 pf@2"), DEVICE (default cuda when torch sees one;
# pass it on the device so a machine without CUDA stops at once), DEADLINE_S (seconds from the start by which
# everything must be written; default 540), EVAL_RESERVE (kept for the evaluations, default 200), AR_STEPS
# (3500), DIFF_STEPS (3000), LIMIT (100), SEEDS ("0 1 2"), FUSED_SEEDS ("0": batch-1 decoding is the slow part),
# WEIGHTS (4), WORK (default /root/gpu_lengths), PYTHON (python3), EXTRA_SET (more `--set k=v` words),
# OMP_NUM_THREADS (default 2: the processes share the machine's cores).
# tests/test_gpu_lengths.py runs it on the CPU here with a few steps and prompts.
set -uo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
OUT="${OUT:-/tmp/gpu_lengths_out}"
WORK="${WORK:-/root/gpu_lengths}"
VARIANTS="${VARIANTS:-plain@0 plain@1 plain@2 pf@0 pf@1 pf@2}"
DEADLINE_S="${DEADLINE_S:-540}"
EVAL_RESERVE="${EVAL_RESERVE:-200}"
AR_STEPS="${AR_STEPS:-3500}"
DIFF_STEPS="${DIFF_STEPS:-3000}"
LIMIT="${LIMIT:-100}"
SEEDS="${SEEDS:-0 1 2}"
FUSED_SEEDS="${FUSED_SEEDS:-0}"
WEIGHTS="${WEIGHTS:-4}"
EXTRA_SET="${EXTRA_SET:-}"
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-2}"
mkdir -p "$OUT" "$WORK"
exec > >(tee -a "$OUT/log.txt") 2>&1
TEE=$!
finish() { exec >&- 2>&-; wait "$TEE" 2>/dev/null; }  # log.txt complete before the call returns
trap finish EXIT
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
START=$(date +%s)
stamp() { echo "=== $* (t=$(( $(date +%s) - START ))s)"; }
left() { local l=$(( DEADLINE_S - ($(date +%s) - START) )); [ "$l" -lt 1 ] && l=1; echo "$l"; }

# every variant is checked before anything trains: a typo must not cost a device call
RUNS=""
for v in $VARIANTS; do
  recipe=${v%@*}; seed=0; [ "$v" != "$recipe" ] && seed=${v#*@}
  case "$recipe" in plain|logn|pf|pflogn) ;; *) echo "unknown recipe in $v (plain | logn | pf | pflogn)"; exit 2 ;; esac
  [[ "$seed" =~ ^[0-9]+$ ]] || { echo "bad seed in $v: RECIPE@SEED, SEED a whole number"; exit 2; }
  case " $RUNS " in *" gpu-$recipe-s$seed "*) echo "$v is listed twice"; exit 2 ;; esac
  RUNS="$RUNS gpu-$recipe-s$seed"
done
[ "$WEIGHTS" -le 4 ] || { echo "WEIGHTS=$WEIGHTS: a device call brings back 8 files, 4 of them run tars at most"; exit 2; }

stamp "environment"
DEVICE="${DEVICE:-$("$PY" -c 'import torch; print("cuda" if torch.cuda.is_available() else "cpu")')}"
"$PY" -c "import sys, torch; print('torch', torch.__version__, '| device $DEVICE', '| cuda', torch.cuda.is_available())
sys.exit(0 if '$DEVICE' == 'cpu' or torch.cuda.is_available() else 3)" || { echo "DEVICE=$DEVICE but torch sees no CUDA"; exit 3; }

JOBS=""  # a bare `wait` would also wait for the log's tee (a process substitution, bash >= 5.1)
for v in $VARIANTS; do
  recipe=${v%@*}; seed=0; [ "$v" != "$recipe" ] && seed=${v#*@}
  tasks=long7xp,prog7xp,long7xph,prog7xph,long7xpf; mix=12,12,6,6,6; logn=false
  case "$recipe" in pf|pflogn) tasks=$tasks,prog7xpf; mix=$mix,6 ;; esac
  case "$recipe" in logn|pflogn) logn=true ;; esac
  run=gpu-$recipe-s$seed
  # --fresh: a directory left by an earlier call on a warm machine is not resumed under other settings
  set -f  # EXTRA_SET's words are options, not globs
  # shellcheck disable=SC2086
  timeout "$(( $(left) - EVAL_RESERVE ))" "$PY" -m orl.cli train --recipe pretrain --preset tiny_base7h --fresh \
    --out "$WORK/$run" --device "$DEVICE" --set seed="$seed" \
    --set tasks=$tasks --set mix=$mix --set ar_steps="$AR_STEPS" \
    --set diffusion_steps="$DIFF_STEPS" --set ar_aux=2.0 --set layout=absolute_grid --set eval_max_new_tokens=96 \
    --set eval_every=1000000 --set model.attn_logn=$logn $EXTRA_SET > "$WORK/train-$run.out" 2>&1 &
  JOBS="$JOBS $!"
  set +f
done
stamp "training ($VARIANTS) until done or $(( $(left) - EVAL_RESERVE )) s"
# shellcheck disable=SC2086
wait $JOBS
for run in $RUNS; do
  echo "--- $run: last lines"; tail -n 3 "$WORK/train-$run.out"
  "$PY" -c "import json, sys; print('$run step', json.load(open(sys.argv[1]))['recipe']['step'])" "$WORK/$run/orl.json" \
    || echo "$run has no checkpoint"
done

stamp "evaluations"
JOBS=""
for run in $RUNS; do
  [ -f "$WORK/$run/orl.json" ] || continue
  # each process writes its own file; they are joined below (concurrent appends to one file could interleave)
  (for seed in $SEEDS; do for s in heldout beyond; do
     timeout "$(left)" "$PY" -m orl.cli eval --model "$WORK/$run" --tasks long7xp,prog7xp --split $s --limit "$LIMIT" \
       --max-new-tokens 104 --thresholds 0.9 --seed $seed --device "$DEVICE" --no-progress --out "$WORK/thr-$run.jsonl"
   done; done) > "$WORK/thr-$run.out" 2>&1 &
  JOBS="$JOBS $!"
  (for seed in $FUSED_SEEDS; do for s in heldout beyond; do
     timeout "$(left)" "$PY" -m orl.cli eval --model "$WORK/$run" --tasks long7xp,prog7xp --split $s --limit "$LIMIT" \
       --max-new-tokens 104 --batch-size 1 --spec-tokens 8 --spec-draft fused --spec-groups 3 --seed $seed \
       --device "$DEVICE" --no-progress --out "$WORK/fused-$run.jsonl"
   done; done) > "$WORK/fused-$run.out" 2>&1 &
  JOBS="$JOBS $!"
done
# shellcheck disable=SC2086
wait $JOBS
STATUS=0
: > "$OUT/thr.jsonl"; : > "$OUT/fused.jsonl"
LOGS=""
n=0
for run in $RUNS; do
  for k in thr fused; do
    echo "--- $k-$run"; tail -n 4 "$WORK/$k-$run.out" 2>/dev/null
    if [ -s "$WORK/$k-$run.jsonl" ]; then cat "$WORK/$k-$run.jsonl" >> "$OUT/$k.jsonl"; else STATUS=1; fi
  done
  LOGS="$LOGS train-$run.out"
  for f in orl.json train.log.jsonl; do [ -f "$WORK/$run/$f" ] && LOGS="$LOGS $run/$f"; done
  [ -d "$WORK/$run" ] || continue
  n=$(( n + 1 ))
  if [ "$n" -le "$WEIGHTS" ]; then
    tar -C "$WORK" -cf "$OUT/run-$run.tar" --exclude trainer_state.pt --exclude stage1 "$run"
  else
    echo "$run: weights left on the device (WEIGHTS=$WEIGHTS); its manifest and logs are in logs.tar"
  fi
done
# shellcheck disable=SC2086
tar -C "$WORK" -cf "$OUT/logs.tar" $LOGS
stamp "done (status $STATUS)"
exit $STATUS
