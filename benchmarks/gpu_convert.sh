#!/usr/bin/env bash
# The gemma-3-270m conversion on a lent GPU, in the one device call that follows the staging calls
# (docs/RESULTS-gemma.md, "The GPU route"): join the staged GGUF and corpus (benchmarks/device_stage.py),
# import the GGUF (fp32, as `orl fetch` does here), time 6 of the run's own steps (convert_profile.py
# --corpus: its micro-batches, batch building included; a 7th under torch.profiler) and size the schedule to
# the time left (with 4x the rows if the GPU idles and that is faster: ROWS_X), convert with `--preset
# gemma_convert_gpu` in one process on the GPU (`--device cuda`: no process group, no NCCL) with that time
# as its limit, pack the weights for the return calls (benchmarks/device_return.py), then the CPU runs'
# measurements: convert_heldout's held-out CE (gemma_convert_short's 32 windows), then convert_eval at
# thresholds 0.9 / 0.5 / 0.3 and self-speculative with k = SPEC_K drafts (one load; each result written as
# it comes). $OUT gets six files and a folder (a device call brings back eight files at most): log.txt,
# probe.jsonl, train.out, train.log.jsonl, heldout32.json, evals.json and p00/ (the first piece of the
# weights: piece + stage.json). Exit 0 only when training finished (its schedule or its time limit) and
# both results exist.
#
#   DEADLINE_S=540 DEVICE=cuda bash benchmarks/gpu_convert.sh    (on the device; OUT is set there)
#
# Env: DEADLINE_S (seconds from the script's start by which everything must be written: the call's
# timeout less a margin; default 0, no deadline: then TRAIN_S alone bounds training), TRAIN_S (the most
# training may take, default 300), EVAL_RESERVE (seconds kept for the evaluations and the pack, default
# 180), EVAL_WINDOWS (held-out windows of convert_eval, default 128: 32 proved too noisy in session 32),
# STEPS (the schedule's length; default: from the probe, 80% of the training time at its speed; given, it
# skips the probes, ROWS_X's too),
# STORE (pieces, and pylib/ with the gguf package the device lacks; default /root/stage), WORK
# (imported model, corpus, run; default /root/gpu_convert), PRESET (default gemma_convert_gpu), GGUF
# (file name in the split, default gemma-3-270m-q4_k_m.gguf), EXTRA_SET (more `--set k=v` words for
# the probe and the run, e.g. "--set ar_aux=0.5"), SPEC_K (self-speculative drafts in the evaluation,
# default 3), HELDOUT (a directory whose tokens.safetensors holds the code_heldout stream the
# evaluations read; default the staged corpus; benchmarks/heldout/gemma-s32 pins session 32's windows),
# ROWS_X (auto: when the profiled step keeps the GPU busy under half its wall time, probe 4x the rows
# and train at that mix if it gives ROWS_GAIN (default 1.2) times the window tokens/s; N: probe N x;
# 1: never), RETURN_PIECE_MIB (pieces of the
# weights, default 15), PYTHON (default python3), DEVICE
# (default cuda when torch sees one, else cpu; pass it on the device, so that a machine without CUDA
# stops at once instead of training on its CPU; tests/test_gpu_convert.py runs this script on a tiny
# GGUF, on the CPU here).
set -uo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
OUT="${OUT:-/tmp/gpu_convert_out}"
STORE="${STORE:-/root/stage}"
WORK="${WORK:-/root/gpu_convert}"
DEADLINE_S="${DEADLINE_S:-0}"
TRAIN_S="${TRAIN_S:-300}"
EVAL_RESERVE="${EVAL_RESERVE:-180}"
EVAL_WINDOWS="${EVAL_WINDOWS:-128}"
ROWS_X="${ROWS_X:-auto}"
ROWS_GAIN="${ROWS_GAIN:-1.2}"
PRESET="${PRESET:-gemma_convert_gpu}"
GGUF="${GGUF:-gemma-3-270m-q4_k_m.gguf}"
HELDOUT="${HELDOUT:-$WORK/corpus}"
set -f  # EXTRA_SET's words reach the commands unquoted: no glob may expand them
case "$DEADLINE_S" in ''|*[!0-9]*) echo "DEADLINE_S=$DEADLINE_S: whole seconds, please"; exit 2 ;; esac
mkdir -p "$OUT" "$WORK"
exec > >(tee -a "$OUT/log.txt") 2>&1
TEE=$!
finish() {  # the training log comes back whatever happened after it started; log.txt complete
  cp "$WORK/run/train.log.jsonl" "$OUT/" 2>/dev/null
  exec >&- 2>&-
  wait "$TEE" 2>/dev/null
}
trap finish EXIT
trap 'echo "stopped by a signal"; exit 9' TERM INT
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
[ -d "$STORE/pylib" ] && export PYTHONPATH="$PYTHONPATH:$STORE/pylib"
START=$(date +%s)
# a warm rerun: an earlier call's run and pack are moved aside (never evaluated, packed or returned as this
# call's, never deleted)
for d in run ret; do [ -e "$WORK/$d" ] && mv "$WORK/$d" "$WORK/$d.old-$START"; done
stamp() { echo "=== $* (t=$(( $(date +%s) - START ))s)"; }
left() {  # whole seconds to the deadline, at least 1 (`timeout 0` would mean none); 100000 without one
  if [ "$DEADLINE_S" -gt 0 ]; then
    local l=$(( DEADLINE_S - ($(date +%s) - START) )); [ "$l" -lt 1 ] && l=1; echo "$l"
  else echo 100000; fi
}
train_limit() {  # the time left less the evaluations' reserve, at most TRAIN_S (seconds, may be fractional)
  awk -v l="$(left)" -v r="$EVAL_RESERVE" -v t="$TRAIN_S" 'BEGIN { x = l - r; if (x > t) x = t; print x }'
}

stamp "environment"
# one torch import (seconds each on the device): the versions on stderr, the device torch sees on stdout;
# gguf is the GGUF reader of the import (carried in STORE/pylib where the machine lacks it)
SEEN=$("$PY" -c "import sys, torch, gguf
cuda = torch.cuda.is_available()
print('torch', torch.__version__, '| gguf', gguf.__file__, '|', torch.cuda.get_device_name(0) if cuda else 'no cuda',
      file=sys.stderr)
print('cuda' if cuda else 'cpu')") || { echo "torch or gguf is not importable"; exit 2; }
DEVICE="${DEVICE:-$SEEN}"
echo "device $DEVICE"

stamp "join the staged files"
"$PY" benchmarks/device_stage.py join --store "$STORE" --to "$WORK/files" || exit 3
mkdir -p "$WORK/corpus"
for f in corpus.json tokens.safetensors; do
  if [ -f "$WORK/corpus/$f" ]; then
    cmp -s "$WORK/files/$f" "$WORK/corpus/$f" || { echo "$WORK/corpus/$f differs from the staged one"; exit 3; }
  else
    cp "$WORK/files/$f" "$WORK/corpus/$f" || exit 3
  fi
done

stamp "import $GGUF"
[ -f "$WORK/base/orl.json" ] || "$PY" -m orl.cli import-gguf "$WORK/files/$GGUF" --out "$WORK/base" --dtype float32 || exit 4

# shellcheck disable=SC2086
if [ -z "${STEPS:-}" ]; then
  stamp "probe: 6 steps of $PRESET, a 7th under torch.profiler (its 15 costliest ops in probe.jsonl)"
  timeout "$(left)" "$PY" benchmarks/convert_profile.py --base "$WORK/base" --preset "$PRESET" --corpus "$WORK/corpus" \
    --steps 6 --profile 15 --device "$DEVICE" ${EXTRA_SET:-} > "$OUT/probe.jsonl" || { tail -5 "$OUT/probe.jsonl"; exit 5; }
  tail -1 "$OUT/probe.jsonl"
  # more rows per step when the GPU idles through most of a step (launch-bound at the preset's 64 rows?): a
  # second, short probe at ROWS_X times the mix; kept only when it gives ROWS_GAIN times the window tokens/s
  X=$("$PY" - "$OUT/probe.jsonl" "$ROWS_X" <<'EOF'
import json, sys
lines = [json.loads(x) for x in open(sys.argv[1]).read().splitlines()]
if sys.argv[2] != "auto":
    print(int(sys.argv[2]))
    sys.exit()
prof = next((x["profile"] for x in lines if "profile" in x), None)
step_s = lines[-1]["summary"]["s_per_step"]  # unprofiled: the profiled step's wall time carries the profiler's cost
busy = prof["self_total_ms"] / 1e3 / step_s if prof and prof["clock"] == "device" else 1.0
print(f"GPU busy {busy:.2f} of a step", file=sys.stderr)
print(4 if busy < 0.5 else 1)
EOF
  ) || X=1
  if [ "$X" -gt 1 ]; then
    MIX=$("$PY" -c "import json, sys; m = json.loads(open(sys.argv[1]).readline())['mix']
print(','.join(str(int(sys.argv[2]) * v) for v in m))" "$OUT/probe.jsonl" "$X")
    stamp "probe: ${X}x the rows (mix $MIX), 3 steps"
    # shellcheck disable=SC2086
    if timeout "$(left)" "$PY" benchmarks/convert_profile.py --base "$WORK/base" --preset "$PRESET" \
         --corpus "$WORK/corpus" --steps 3 --device "$DEVICE" ${EXTRA_SET:-} --set mix="$MIX" > "$WORK/probe_x.jsonl"; then
      tail -1 "$WORK/probe_x.jsonl"
      # kept when faster by ROWS_GAIN and, on a GPU, at most 80% of its memory (a late out-of-memory loses the run)
      if "$PY" -c "import json, sys; a, b = (json.loads(open(p).read().splitlines()[-1])['summary'] for p in sys.argv[1:3])
roomy = b.get('max_gpu_gib', 0) <= 0.8 * b.get('gpu_total_gib', float('inf'))
sys.exit(not (roomy and b['window_tok_s'] > float(sys.argv[3]) * a['window_tok_s']))" "$OUT/probe.jsonl" \
           "$WORK/probe_x.jsonl" "$ROWS_GAIN"; then
        cat "$WORK/probe_x.jsonl" >> "$OUT/probe.jsonl"  # its summary last: the schedule is sized from it
        # a step now holds X times the rows: warm-up, evaluations and saves come X times as often in steps
        EVERY=$("$PY" -c "import json, sys; h, x = json.loads(open(sys.argv[1]).readline()), int(sys.argv[2])
print(' '.join(f'--set {k}={max(1, h[k] // x)}' for k in ('warmup', 'eval_every', 'save_every')))" \
          "$OUT/probe.jsonl" "$X")
        EXTRA_SET="${EXTRA_SET:-} --set mix=$MIX $EVERY"
        echo "training at mix $MIX ($EVERY)"
      else
        echo "not ${ROWS_GAIN}x as fast (or over 80% of the GPU's memory): training at the preset's mix"
      fi
    else
      echo "the ${X}x probe failed (memory?): training at the preset's mix"
    fi
  fi
  # 80% of the time left after ~30 s of loading: evals every 100 steps and saves fall inside the limit
  STEPS=$("$PY" -c "import json, sys; s = json.loads(open(sys.argv[1]).read().splitlines()[-1])['summary']
print(max(3, int(0.8 * (float(sys.argv[2]) - 30) / s['s_per_step'])))" "$OUT/probe.jsonl" "$(train_limit)") || exit 5
fi
LIMIT=$(train_limit)
awk -v x="$LIMIT" 'BEGIN { exit !(x > 0) }' || { echo "no time left to train (limit ${LIMIT}s)"; exit 5; }

stamp "convert: $PRESET, $STEPS steps, time limit ${LIMIT}s"
# --fresh: $WORK/run is this script's own; a warm rerun must not resume a run of another length
# its own limit stops it between steps; `timeout` (the limit + 90 s for the last step, the in-run evaluation and
# the save; never past 20 s before the deadline) stops a hang, so that the pack and the evaluations still run
HARD=$(awk -v x="$LIMIT" -v l="$(left)" 'BEGIN { h = int(x) + 90; if (h > l - 20) h = l - 20; if (h < 1) h = 1; print h }')
# shellcheck disable=SC2086
timeout -k 10 "$HARD" "$PY" -m orl.cli train --recipe convert --preset "$PRESET" --base "$WORK/base" --out "$WORK/run" \
  --device "$DEVICE" --fresh --set data_dir="$WORK/corpus" ${EXTRA_SET:-} --set steps="$STEPS" \
  --set time_limit_s="$LIMIT" > "$OUT/train.out" 2>&1
rc=$?
tail -c 2000 "$OUT/train.out" | tr '\r' '\n' | tail -8
cp "$WORK/run/train.log.jsonl" "$OUT/" 2>/dev/null  # now as well as on exit: a kill at the call's limit runs no trap
if [ $rc -ne 0 ]; then
  echo "training failed (rc $rc)"
  [ -f "$WORK/run/orl.json" ] || exit 6
  echo "evaluating its last checkpoint"
fi

# the weights for the return calls (benchmarks/device_return.py), before the evaluations (a pack is ~15 s;
# an evaluation cut off by the deadline must not cost the weights): the run's changed tensors in bf16 and its
# small files, cut into pieces of RETURN_PIECE_MIB; the first piece comes back with this call (its 7th and
# 8th files), the rest with `cp -r $WORK/ret/p/pNN ... $OUT/` calls, four pieces each (docs/RESULTS-gemma.md)
PIECE_MIB="${RETURN_PIECE_MIB:-15}"
awk -v x="$PIECE_MIB" 'BEGIN { exit !(x > 0 && x <= 15.9) }' || { echo "RETURN_PIECE_MIB=$PIECE_MIB: a returned file must stay under 16 MiB; using 15"; PIECE_MIB=15; }
if [ -f "$WORK/run/orl.json" ] && [ "$(left)" -gt 15 ]; then
  stamp "pack the weights for the return calls"
  if timeout "$(left)" "$PY" benchmarks/device_return.py pack "$WORK/run" --base "$WORK/base" --out "$WORK/ret" &&
     timeout "$(left)" "$PY" benchmarks/device_stage.py split "$WORK/ret/delta.safetensors" "$WORK/ret/return.json" \
       --out "$WORK/ret/p" --piece-mib "$PIECE_MIB"; then
    first=$(ls "$WORK/ret/p" | head -1)
    if [ -n "$first" ] && cp -r "$WORK/ret/p/$first" "$OUT/"; then
      echo "return pieces: $(ls "$WORK/ret/p" | tr '\n' ' ')($first in this call's files)"
    else
      echo "no piece to return with this call"
    fi
  else
    echo "packing the weights failed: the numbers above stand; nothing to bring back"
  fi
else
  echo "no time left to pack the weights"
fi
stamp "held-out CE (gemma_convert_short windows)"
timeout "$(left)" "$PY" benchmarks/convert_heldout.py --base "$WORK/base" --dlm "$WORK/run" --corpus "$HELDOUT" \
  --layout absolute_grid --windows 32 --device "$DEVICE" --out "$OUT/heldout32.json" || echo "held-out CE failed"
stamp "convert_eval at 0.9, 0.5, 0.3 and self-speculative (the AR path verifying k = ${SPEC_K:-3} drafts)"
timeout "$(left)" "$PY" benchmarks/convert_eval.py --ar "$WORK/base" --dlm "$WORK/run" --corpus "$HELDOUT" --windows "$EVAL_WINDOWS" \
  --context 64 --block 4 --thresholds 0.9,0.5,0.3 --free-tokens 32 --free-prompts 8 --device "$DEVICE" \
  --spec "${SPEC_K:-3}" --out "$OUT/evals.json" > /dev/null || echo "convert_eval failed"
"$PY" - "$OUT" <<'EOF'
import json, sys
from pathlib import Path
out = Path(sys.argv[1])
if (out / "evals.json").exists():
    for r in json.loads((out / "evals.json").read_text()):
        if r.get("error"):
            print(f"step {r['dlm_recipe_step']} {r['decoder']}: failed ({r['error'][:200]})")
            continue
        nb, fr = r["next_block"], r["free_running"]
        how = f"tau {r['threshold']}" if r["threshold"] is not None else r["decoder"]
        print(f"step {r['dlm_recipe_step']} {how}: next-block exact dlm {nb['dlm']['block_exact']:.3f} "
              f"ar {nb['ar']['block_exact']:.3f}, TPF {nb['dlm_tpf']:.2f}; free run agreement "
              f"{fr['position_agreement']:.3f}, TPF {fr['dlm_tpf']:.2f}")
EOF
[ -f "$OUT/evals.json" ] && [ -f "$OUT/heldout32.json" ] || exit 7
[ $rc -eq 0 ] || exit 6
stamp "done"
