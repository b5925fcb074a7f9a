#!/usr/bin/env bash
# Issue 21 on a lent GPU, in one device call: the hint4g3 recipe (docs/TRAINING.md: long7xp, prog7xp and their
# helpers; 3,500 AR steps, then 3,000 block-diffusion steps on the absolute grid with the next-token loss kept at
# weight 2) from scratch, once per variant, the variants trained side by side on the one GPU (one process each),
# then each evaluated on long7xp / prog7xp in range and beyond (prompt seeds SEEDS, LIMIT prompts per family and
# split): threshold 0.9 (batch 16) and the fused self-speculative decoder (k 8, 3 groups, batch 1). On these
# 2 CPU cores one variant takes a whole session, and how fast the GPU runs several side by side is not measured
# yet. A run still training at its limit stops there (it saves every 100 steps) and its last checkpoint is
# evaluated; log.txt names each run's step, and a run that did not reach AR_STEPS + DIFF_STEPS makes the exit
# status 1 (one still in its AR stage is decoded by the AR decoder whatever the threshold asks).
#
# A variant is RECIPE@SEED (the training seed; "@SEED" left out means 0). RECIPE is one of
#   plain   hint4g3's tasks: long7xp,prog7xp,long7xph,prog7xph,long7xpf, mix 12,12,6,6,6
#   logn    plain with model.attn_logn (scalable softmax)
#   pf      plain plus 6 rows of prog7xpf (prog7xp's distance helper, run hint6 in docs/TRAINING.md)
#   pflogn  pf with model.attn_logn
#   bal     plain with long7xp and prog7xp sharing their 24 rows by recent loss (balance=long7xp,prog7xp:
#           orl/train/mix.py), so the family that lags gets more of them
# The run of RECIPE@SEED is gpu-RECIPE-sSEED. Why several seeds: on the CPU (docs/TRAINING.md, "Session 27") one
# recipe's AR stage scored 90% and 16% on prog7xp in range with training seeds 0 and 1.
#
#   DEVICE=cuda DEADLINE_S=540 bash benchmarks/gpu_lengths.sh       (on the device; OUT is set there)
#   python benchmarks/length_table.py OUT/thr.jsonl --paired "gpu-pf-s0/threshold L16/0.9" "gpu-plain-s0/threshold L16/0.9"
#
# $OUT gets at most 8 files: log.txt; thr.jsonl and fused.jsonl (every run's eval records); logs.tgz (each run's
# manifest, training log and console output); run-gpu-RECIPE-sSEED.tar (weights, manifest, tokenizer: about
# 10 MB) for the first WEIGHTS runs listed (default and at most 4). Each call works in a new folder under WORK,
# so nothing of an earlier call on a warm machine is resumed, mixed in or removed. Exit 0 only when every run
# finished its steps and left threshold and fused records.
# Env: VARIANTS (default "plain@0 pf@0 plain@1 pf@1", pairs first so the weights that come back pair; at most 6),
# DEVICE (default cuda when torch sees one; pass it on the device so a machine without CUDA stops at once),
# DEADLINE_S (seconds from the start by which everything must be written; default 540), EVAL_RESERVE (kept for
# the evaluations, default 200), AR_STEPS (3500), DIFF_STEPS (3000), LIMIT (100), SEEDS ("0 1 2"), FUSED_SEEDS
# ("0": batch-1 decoding is the slow part), WEIGHTS (4), WORK (default /root/gpu_lengths), PYTHON (python3),
# EXTRA_SET (more `--set k=v` words, checked before anything trains), OMP_NUM_THREADS (default 2: the processes
# share the machine's cores).
# KEEP_EVERY (default 0: off) keeps every run's checkpoint each KEEP_EVERY steps (PretrainConfig.keep_every) and
# chooses one per run on validation prompts (prompt seeds VAL_SEEDS, default 100, VAL_LIMIT prompts per family
# and split, default LIMIT; threshold 0.9): the block-diffusion copies and the final checkpoint are evaluated, the
# best mean beyond is chosen (orl/eval/select.py), and the test evaluation (SEEDS) covers the chosen one beside
# the final one (the fused decoder: the final only). $OUT then also gets val.jsonl, so WEIGHTS is at most 3.
# benchmarks/select_checkpoint.py --val OUT/val.jsonl --test OUT/thr.jsonl --run ... reports the result.
# tests/test_gpu_lengths.py runs it on the CPU here with a few steps and prompts.
set -uo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
OUT="${OUT:-/tmp/gpu_lengths_out}"
VARIANTS="${VARIANTS:-plain@0 pf@0 plain@1 pf@1}"
DEADLINE_S="${DEADLINE_S:-540}"
EVAL_RESERVE="${EVAL_RESERVE:-200}"
AR_STEPS="${AR_STEPS:-3500}"
DIFF_STEPS="${DIFF_STEPS:-3000}"
LIMIT="${LIMIT:-100}"
SEEDS="${SEEDS:-0 1 2}"
FUSED_SEEDS="${FUSED_SEEDS:-0}"
WEIGHTS="${WEIGHTS:-4}"
EXTRA_SET="${EXTRA_SET:-}"
KEEP_EVERY="${KEEP_EVERY:-0}"
VAL_SEEDS="${VAL_SEEDS:-100}"
VAL_LIMIT="${VAL_LIMIT:-$LIMIT}"
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-2}"
mkdir -p "$OUT" "${WORK:-/root/gpu_lengths}"
WORK="$(mktemp -d "${WORK:-/root/gpu_lengths}/call-XXXXXX")"
exec > >(tee -a "$OUT/log.txt") 2>&1
TEE=$!
finish() { exec >&- 2>&-; wait "$TEE" 2>/dev/null; }  # log.txt complete before the call returns
trap finish EXIT
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
START=$(date +%s)
stamp() { echo "=== $* (t=$(( $(date +%s) - START ))s)"; }
left() { local l=$(( DEADLINE_S - ($(date +%s) - START) )); [ "$l" -lt 1 ] && l=1; echo "$l"; }
last_lines() { tr '\r' '\n' < "$1" | tail -n "$2" | cut -c1-300; }  # tqdm's bar has no newlines
# a bare `wait` would also wait for the log's tee (a process substitution, bash >= 5.1): never call it empty
wait_for() { [ -z "$*" ] || wait "$@"; }

# everything is checked before anything trains: a typo must not cost a device call
RUNS=""
NV=0
for v in $VARIANTS; do
  recipe=${v%@*}; seed=0; [ "$v" != "$recipe" ] && seed=${v#*@}
  case "$recipe" in plain|logn|pf|pflogn|bal) ;; *) echo "unknown recipe in $v (plain | logn | pf | pflogn | bal)"; exit 2 ;; esac
  [[ "$seed" =~ ^[0-9]{1,6}$ ]] || { echo "bad seed in $v: RECIPE@SEED, SEED a whole number"; exit 2; }
  seed=$(( 10#$seed ))
  case " $RUNS " in *" gpu-$recipe-s$seed "*) echo "$v is listed twice"; exit 2 ;; esac
  RUNS="$RUNS gpu-$recipe-s$seed"
  NV=$(( NV + 1 ))
done
[ "$NV" -ge 1 ] || { echo "VARIANTS is empty"; exit 2; }
[ "$NV" -le 6 ] || { echo "$NV variants: at most 6 (thr.jsonl and logs.tgz must stay under 16 MiB)"; exit 2; }
[ "$WEIGHTS" -le 4 ] || { echo "WEIGHTS=$WEIGHTS: a device call brings back 8 files, 4 of them run tars at most"; exit 2; }
[[ "$KEEP_EVERY" =~ ^[0-9]{1,7}$ ]] || { echo "KEEP_EVERY=$KEEP_EVERY: a whole number of steps (0: off)"; exit 2; }
KEEP_EVERY=$(( 10#$KEEP_EVERY ))
if [ "$KEEP_EVERY" -gt 0 ]; then
  [ "$WEIGHTS" -le 3 ] || { echo "WEIGHTS=$WEIGHTS with KEEP_EVERY: val.jsonl takes a file, 3 run tars at most"; exit 2; }
  for s in $VAL_SEEDS; do for t in $SEEDS; do
    [ "$s" != "$t" ] || { echo "VAL_SEEDS ($VAL_SEEDS) and SEEDS ($SEEDS) share seed $s: validation would be test prompts"; exit 2; }
  done; done
fi
TRAIN_S=$(( DEADLINE_S - EVAL_RESERVE - 10 ))
[ "$TRAIN_S" -ge 30 ] && [ "$EVAL_RESERVE" -ge 30 ] \
  || { echo "DEADLINE_S=$DEADLINE_S EVAL_RESERVE=$EVAL_RESERVE: need 30 s or more for each of training and evaluation"; exit 2; }

stamp "environment"
DEVICE="${DEVICE:-$("$PY" -c 'import torch; print("cuda" if torch.cuda.is_available() else "cpu")')}"
"$PY" -c "import sys, torch; print('torch', torch.__version__, '| device $DEVICE', '| cuda', torch.cuda.is_available())
sys.exit(0 if '$DEVICE' == 'cpu' or torch.cuda.is_available() else 3)" || { echo "DEVICE=$DEVICE but torch sees no CUDA"; exit 3; }

train_args() {  # recipe seed -> the train command's settings
  local tasks=long7xp,prog7xp,long7xph,prog7xph,long7xpf mix=12,12,6,6,6 logn=false balance=""
  case "$1" in pf|pflogn) tasks=$tasks,prog7xpf; mix=$mix,6 ;; esac
  case "$1" in logn|pflogn) logn=true ;; esac
  case "$1" in bal) balance="--set balance=long7xp,prog7xp" ;; esac
  echo "--recipe pretrain --preset tiny_base7h --device $DEVICE --set seed=$2 --set tasks=$tasks --set mix=$mix \
--set ar_steps=$AR_STEPS --set diffusion_steps=$DIFF_STEPS --set ar_aux=2.0 --set layout=absolute_grid \
--set eval_max_new_tokens=96 --set eval_every=1000000 --set model.attn_logn=$logn --set keep_every=$KEEP_EVERY \
$balance $EXTRA_SET"
}
set -f  # the settings' words are options, not globs
# shellcheck disable=SC2046
"$PY" -m orl.cli train $(train_args plain 0) --show-config > "$WORK/config.txt" \
  || { echo "the training settings (EXTRA_SET: $EXTRA_SET) are refused: see above"; exit 2; }
JOBS=""
for run in $RUNS; do
  recipe=${run#gpu-}; recipe=${recipe%-s*}; seed=${run##*-s}  # the names were checked above
  # shellcheck disable=SC2046
  timeout "$TRAIN_S" "$PY" -m orl.cli train $(train_args "$recipe" "$seed") --out "$WORK/$run" \
    > "$WORK/train-$run.out" 2>&1 &
  JOBS="$JOBS $!"
done
set +f
stamp "training ($VARIANTS) in $WORK until done or t=${TRAIN_S}s"
# shellcheck disable=SC2086
wait_for $JOBS
STATUS=0
for run in $RUNS; do
  echo "--- $run: last lines"; last_lines "$WORK/train-$run.out" 3
  step=$("$PY" -c "import json, sys; print(json.load(open(sys.argv[1]))['recipe']['step'])" "$WORK/$run/orl.json" 2>/dev/null)
  if [ -z "$step" ]; then echo "$run has no checkpoint"; STATUS=1
  elif [ "$step" -lt $(( AR_STEPS + DIFF_STEPS )) ]; then
    echo "$run step $step: CUT SHORT (planned $(( AR_STEPS + DIFF_STEPS )))"; STATUS=1
  else echo "$run step $step"; fi
done

thr_eval() {  # checkpoint-dir seeds limit records: threshold 0.9 on long7xp / prog7xp, both splits
  for seed in $2; do for s in heldout beyond; do
    [ "$(left)" -gt 5 ] || return
    timeout "$(left)" "$PY" -m orl.cli eval --model "$1" --tasks long7xp,prog7xp --split $s --limit "$3" \
      --max-new-tokens 104 --thresholds 0.9 --seed $seed --device "$DEVICE" --no-progress --out "$4"
  done; done
}
if [ "$KEEP_EVERY" -gt 0 ]; then
  stamp "validation (prompt seeds $VAL_SEEDS) of the block-diffusion copies and the final checkpoints"
  JOBS=""
  for run in $RUNS; do
    [ -f "$WORK/$run/orl.json" ] || continue
    (for d in "$WORK/$run"-at* "$WORK/$run"; do
       [ -d "$d" ] || continue  # no copies: the glob's own text
       step=${d##*-at}; [ "$d" = "$WORK/$run" ] || { [[ "$step" =~ ^[0-9]+$ ]] && [ "$step" -gt "$AR_STEPS" ]; } || continue
       thr_eval "$d" "$VAL_SEEDS" "$VAL_LIMIT" "$WORK/val-$run.jsonl"
     done) > "$WORK/val-$run.out" 2>&1 &
    JOBS="$JOBS $!"
  done
  # shellcheck disable=SC2086
  wait_for $JOBS
fi
stamp "evaluations"
JOBS=""
for run in $RUNS; do
  [ -f "$WORK/$run/orl.json" ] || continue
  chosen=$run
  if [ "$KEEP_EVERY" -gt 0 ]; then
    "$PY" benchmarks/select_checkpoint.py --val "$WORK/val-$run.jsonl" --kept "$WORK/$run" || STATUS=1
    chosen=$("$PY" benchmarks/select_checkpoint.py --val "$WORK/val-$run.jsonl" --kept "$WORK/$run" --names-only \
             2>/dev/null | cut -d' ' -f2)
    [ -n "$chosen" ] || { echo "$run: no checkpoint chosen (validation incomplete); the final one is evaluated"; chosen=$run; }
    echo "$run: chosen on validation: $chosen"
  fi
  (thr_eval "$WORK/$run" "$SEEDS" "$LIMIT" "$WORK/thr-$run.jsonl"
   [ "$chosen" = "$run" ] || thr_eval "$WORK/$chosen" "$SEEDS" "$LIMIT" "$WORK/thr-$run.jsonl") > "$WORK/thr-$run.out" 2>&1 &
  JOBS="$JOBS $!"
  (for seed in $FUSED_SEEDS; do for s in heldout beyond; do
     [ "$(left)" -gt 5 ] || break 2
     timeout "$(left)" "$PY" -m orl.cli eval --model "$WORK/$run" --tasks long7xp,prog7xp --split $s --limit "$LIMIT" \
       --max-new-tokens 104 --batch-size 1 --spec-tokens 8 --spec-draft fused --spec-groups 3 --seed $seed \
       --device "$DEVICE" --no-progress --out "$WORK/fused-$run.jsonl"
   done; done) > "$WORK/fused-$run.out" 2>&1 &
  JOBS="$JOBS $!"
done
# shellcheck disable=SC2086
wait_for $JOBS
# each process wrote its own file (concurrent appends to one could interleave); joined here
: > "$OUT/thr.jsonl"; : > "$OUT/fused.jsonl"
if [ "$KEEP_EVERY" -gt 0 ]; then
  : > "$OUT/val.jsonl"
  for run in $RUNS; do
    echo "--- val-$run"; last_lines "$WORK/val-$run.out" 4 2>/dev/null
    if [ -s "$WORK/val-$run.jsonl" ]; then cat "$WORK/val-$run.jsonl" >> "$OUT/val.jsonl"; else STATUS=1; fi
  done
fi
LOGS="config.txt"
n=0
for run in $RUNS; do
  for k in thr fused; do
    echo "--- $k-$run"; last_lines "$WORK/$k-$run.out" 4 2>/dev/null
    if [ -s "$WORK/$k-$run.jsonl" ]; then cat "$WORK/$k-$run.jsonl" >> "$OUT/$k.jsonl"; else STATUS=1; fi
  done
  LOGS="$LOGS train-$run.out"
  for f in orl.json train.log.jsonl; do [ -f "$WORK/$run/$f" ] && LOGS="$LOGS $run/$f"; done
  [ -d "$WORK/$run" ] || continue
  n=$(( n + 1 ))
  if [ "$n" -le "$WEIGHTS" ]; then
    tar -C "$WORK" -cf "$OUT/run-$run.tar" --exclude trainer_state.pt --exclude stage1 "$run" || STATUS=1
  else
    echo "$run: weights left on the device (WEIGHTS=$WEIGHTS); its manifest and logs are in logs.tgz"
  fi
done
# shellcheck disable=SC2086
tar -C "$WORK" -czf "$OUT/logs.tgz" $LOGS || STATUS=1
for f in "$OUT"/*; do  # a file over 16 MiB does not come back from a device call
  [ "$(stat -c %s "$f")" -le $(( 16 * 1024 * 1024 )) ] || { echo "$f is over 16 MiB and will not come back"; STATUS=1; }
done
stamp "done (status $STATUS)"
exit $STATUS
