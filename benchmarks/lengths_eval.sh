#!/usr/bin/env bash
# Issue 21's length evaluations of one checkpoint (docs/TRAINING.md, sessions 26-33): long7xp and prog7xp, 100
# prompts per family, split and prompt seed, appended to $E/<name>-<mode>.jsonl for benchmarks/length_table.py
# (per-size accuracy, paired McNemar) and `orl report`. The loops sessions 26-31 ran from ~/.cache/orl/runs
# (eval26.sh, eval30.sh, sweep31.sh, rules31.sh), kept here so that a fresh machine reruns them.
#
#   bash benchmarks/lengths_eval.sh MODEL [MODE ...]     MODEL: a directory, or a name under $R
#   modes: ar     greedy decoding as the checkpoint records it (an AR stage: AR), both splits  -> <name>-ar.jsonl
#          thr    the threshold decoder at 0.9, both splits                                    -> <name>-thr.jsonl
#          fused  the fused self-speculative decoder, k = 8, its 3 likeliest groups, both splits -> <name>-fused.jsonl
#          sweep  thresholds 0.8, 0.95, 0.99 in range (with thr: the curve for AUP)            -> <name>-sweep.jsonl
#          rules  the factor rule (f = 1) and the entropy rule (bound 0.5) in range             -> <name>-rules.jsonl
#   default modes: thr fused.  Env: R (runs, default ~/.cache/orl/runs), E (records, default $R/eval),
#   SEEDS (prompt seeds, default "0 1 2": the test; validation uses 100 101 and E=$R/eval/val), LIMIT (100),
#   DRY=1 prints the `orl eval` commands instead of running them, TASKS the families (default long7xp,prog7xp).
# Records are appended to files named after the checkpoint directory's basename (two runs named alike share a
# file: give them distinct names); `orl eval` skips prompts a file already holds for the same model id.
set -euo pipefail
M=${1:?usage: lengths_eval.sh MODEL [ar|thr|fused|sweep|rules ...]}
shift
MODES="$*"
[ -n "${MODES// /}" ] || MODES="thr fused"
R=${R:-$HOME/.cache/orl/runs}
E=${E:-$R/eval}
SEEDS=${SEEDS:-0 1 2}
LIMIT=${LIMIT:-100}
TASKS=${TASKS:-long7xp,prog7xp}
if [ -d "$M" ]; then DIR=$M; else DIR=$R/$M; fi
[ -f "$DIR/orl.json" ] || { echo "lengths_eval.sh: no checkpoint at $DIR (orl.json missing)" >&2; exit 2; }
NAME=$(basename "$DIR")
mkdir -p "$E"
ev() {  # split out extra-args...
  local split=$1 out=$2; shift 2
  for seed in $SEEDS; do
    ${DRY:+echo} orl eval --model "$DIR" --tasks "$TASKS" --split "$split" --limit "$LIMIT" --seed "$seed" \
        --out "$out" "$@"
  done
}
for mode in $MODES; do
  case $mode in
    ar)    for s in heldout beyond; do ev $s "$E/$NAME-ar.jsonl" --max-new-tokens 112; done ;;
    thr)   for s in heldout beyond; do ev $s "$E/$NAME-thr.jsonl" --max-new-tokens 104 --thresholds 0.9; done ;;
    fused) for s in heldout beyond; do ev $s "$E/$NAME-fused.jsonl" --max-new-tokens 104 --batch-size 1 \
               --spec-tokens 8 --spec-draft fused --spec-groups 3; done ;;
    sweep) ev heldout "$E/$NAME-sweep.jsonl" --max-new-tokens 104 --thresholds 0.8,0.95,0.99 ;;
    rules) ev heldout "$E/$NAME-rules.jsonl" --max-new-tokens 104 --rule factor --factor 1
           ev heldout "$E/$NAME-rules.jsonl" --max-new-tokens 104 --rule entropy --entropy-bound 0.5 ;;
    *) echo "lengths_eval.sh: unknown mode '$mode' (ar, thr, fused, sweep, rules)" >&2; exit 2 ;;
  esac
done
echo "lengths_eval.sh: $NAME [$MODES] -> $E"
