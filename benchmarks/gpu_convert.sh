#!/usr/bin/env bash
# The gemma-3-270m conversion on a lent GPU, in the one device call that follows the staging calls
# (docs/RESULTS-gemma.md, "The GPU route"): join the staged GGUF and corpus (benchmarks/device_stage.py),
# import the GGUF (fp32, as `orl fetch` does here), convert with `--preset gemma_convert_gpu` under
# torchrun (one process: the CUDA device) for at most TRAIN_S seconds, then the same measurements as
# the CPU runs: convert_eval at thresholds 0.9 / 0.5 / 0.3 and the held-out CE of convert_heldout
# (gemma_convert_short's windows), everything into $OUT.
#
#   STORE=/root/stage bash benchmarks/gpu_convert.sh        (on the device; OUT is set there)
#
# Env: STORE (pieces, default /root/stage), WORK (imported model, corpus, run; default /root/gpu_convert),
# TRAIN_S (training budget, default 240), PRESET (default gemma_convert_gpu), GGUF (file name in the
# split, default gemma-3-270m-q4_k_m.gguf), EXTRA_SET (more `--set k=v` words for the run),
# PYTHON (default python3), DEVICE (eval device; default cuda when torch sees one, else cpu: the CPU
# test of this script, tests/test_gpu_convert.py, runs it on a tiny GGUF).
set -uo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
OUT="${OUT:-/tmp/gpu_convert_out}"
STORE="${STORE:-/root/stage}"
WORK="${WORK:-/root/gpu_convert}"
TRAIN_S="${TRAIN_S:-240}"
PRESET="${PRESET:-gemma_convert_gpu}"
GGUF="${GGUF:-gemma-3-270m-q4_k_m.gguf}"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
mkdir -p "$OUT" "$WORK"
START=$(date +%s)
stamp() { echo "=== $* (t=$(( $(date +%s) - START ))s)"; }

stamp "environment" | tee -a "$OUT/log.txt"
"$PY" -c "import torch; print('torch', torch.__version__, 'cuda', torch.cuda.is_available(),
          torch.cuda.get_device_name(0) if torch.cuda.is_available() else '')" 2>&1 | tee -a "$OUT/log.txt"
DEVICE="${DEVICE:-$("$PY" -c 'import torch; print("cuda" if torch.cuda.is_available() else "cpu")')}"

stamp "join the staged files" | tee -a "$OUT/log.txt"
"$PY" benchmarks/device_stage.py join --store "$STORE" --to "$WORK/files" 2>&1 | tee -a "$OUT/log.txt" || exit 3
mkdir -p "$WORK/corpus"
for f in corpus.json tokens.safetensors; do
  [ -f "$WORK/corpus/$f" ] || cp "$WORK/files/$f" "$WORK/corpus/$f" || exit 3
done

stamp "import $GGUF" | tee -a "$OUT/log.txt"
[ -f "$WORK/base/orl.json" ] || "$PY" -m orl.cli import-gguf "$WORK/files/$GGUF" --out "$WORK/base" --dtype float32 \
  2>&1 | tee -a "$OUT/log.txt" || exit 4

stamp "convert ($PRESET, at most ${TRAIN_S}s of steps)" | tee -a "$OUT/log.txt"
# shellcheck disable=SC2086
"$PY" -m torch.distributed.run --standalone --nproc-per-node 1 -m orl.cli train --recipe convert --preset "$PRESET" \
  --base "$WORK/base" --out "$WORK/run" --set data_dir="$WORK/corpus" --set time_limit_s="$TRAIN_S" ${EXTRA_SET:-} \
  > "$OUT/train.out" 2>&1
rc=$?
tail -c 3000 "$OUT/train.out"
cp "$WORK/run/train.log.jsonl" "$OUT/" 2>/dev/null
[ $rc -eq 0 ] || { echo "training failed (rc $rc)"; exit 5; }

for t in 0.9 0.5 0.3; do
  stamp "convert_eval threshold $t" | tee -a "$OUT/log.txt"
  "$PY" benchmarks/convert_eval.py --ar "$WORK/base" --dlm "$WORK/run" --corpus "$WORK/corpus" --windows 32 \
    --context 64 --block 4 --threshold "$t" --free-tokens 32 --free-prompts 8 --device "$DEVICE" \
    --out "$OUT/eval_t${t/./}.json" > "$OUT/eval_t${t/./}.out" 2>&1 || { tail -5 "$OUT/eval_t${t/./}.out"; exit 6; }
done
stamp "held-out CE (gemma_convert_short windows)" | tee -a "$OUT/log.txt"
"$PY" benchmarks/convert_heldout.py --base "$WORK/base" --dlm "$WORK/run" --corpus "$WORK/corpus" \
  --layout absolute_grid --windows 32 --device "$DEVICE" --out "$OUT/heldout32.json" > "$OUT/heldout.out" 2>&1 \
  || { tail -5 "$OUT/heldout.out"; exit 7; }
stamp "done" | tee -a "$OUT/log.txt"
