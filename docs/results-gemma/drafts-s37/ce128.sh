#!/bin/bash
# session 37: a drafter on 128 held-out windows / 64 free-running prompts, fused k3, the original verifies;
# $1 = drafter dir, $2 = label, rest = extra flags (e.g. --draft-vocab 32768)
cd /work/main
D=$1; L=$2; shift 2
OMP_NUM_THREADS=1 .venv/bin/python benchmarks/convert_eval.py --ar ~/.cache/orl/gemma-3-270m --dlm $D \
  --corpus ~/.cache/orl/corpus/b1a208dc9de66062 --windows 128 --context 64 --block 4 --thresholds none \
  --free-tokens 32 --free-prompts 64 --spec 3 --spec-verifier ar --threads 1 "$@" --out ~/.cache/orl/runs/s37/ce/w128-$L.json
