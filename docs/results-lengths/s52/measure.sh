#!/bin/bash
# session 52: the argmax ceiling and the threshold decoder at 0.9 (benchmarks/knowledge_tpf.py: both from one run,
# in range, test prompt seeds 0-2, 1,500 prompts) of a checkpoint under $R, into docs/results-lengths/s52/.
#   bash docs/results-lengths/s52/measure.sh NAME      (e.g. base7-more-at500)
set -euo pipefail
source /work/main/.venv/bin/activate; cd /work/main
R=~/.cache/orl/runs; n=${1:?name}
OMP_NUM_THREADS=1 python benchmarks/knowledge_tpf.py --model $R/$n --out docs/results-lengths/s52/knowledge-$n.json
