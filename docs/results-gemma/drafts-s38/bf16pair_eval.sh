#!/bin/bash
# session 38: the two 40-step runs of bf16pair.sh scored the same way, in fp32 (teacher-forced draft acceptance
# against the original, 32 held-out windows), then the bf16 step timed again with the head cast once per step
cd /work/main
R=~/.cache/orl/runs; O=$R/s38
OMP_NUM_THREADS=1 .venv/bin/python benchmarks/draft_accept.py --corpus ~/.cache/orl/corpus/b1a208dc9de66062 \
  --dlm $O/pair-bf16-false $O/pair-bf16-true --verifier ~/.cache/orl/gemma-3-270m --windows 32 --window 96 --context 32 \
  --k 3 --stride 4 --threads 1 --out $O/pair-accept.json > $O/pair-accept.log 2>&1
OMP_NUM_THREADS=1 .venv/bin/python benchmarks/convert_profile.py --base ~/.cache/orl/gemma-3-270m --preset gemma_convert_short \
  --steps 4 --threads 1 --corpus ~/.cache/orl/corpus/b1a208dc9de66062 --set checkpointing=false --set draft_only=true \
  --set init_from=$R/gdonly450 --set draft_aux=1.0 --set draft_target=ar --set bf16=true > $O/prof-bf16-scoped.log 2>&1
