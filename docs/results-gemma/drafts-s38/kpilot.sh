#!/bin/bash
# session 38: the fused decoder's k for gdonly450 chosen on code_train windows (never the held-out split)
cd /work/main
R=~/.cache/orl/runs; C=~/.cache/orl/corpus/b1a208dc9de66062; O=$R/s38; mkdir -p $O
for k in 3 4 5; do
  OMP_NUM_THREADS=1 .venv/bin/python benchmarks/convert_eval.py --ar ~/.cache/orl/gemma-3-270m --dlm ${1:-$R/gdonly450} \
    --corpus $C --stream code_train --windows 16 --context 64 --block 4 --thresholds none --free-tokens 32 \
    --free-prompts 16 --spec $k --spec-verifier ar --threads 1 --draft-vocab 32768 --out $O/kpilot-${2:-d450}-k$k.json > $O/kpilot-${2:-d450}-k$k.log 2>&1
done
