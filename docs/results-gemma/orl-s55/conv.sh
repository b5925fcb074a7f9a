# gemma-3-270m -> block diffusion, 300 steps on the grid (session 14 recipe) with bf16 autocast: 24.8 min on this AVX512-BF16 CPU
cd "$(dirname "$0")/../../.." && source .venv/bin/activate
export OMP_NUM_THREADS=1
orl train --recipe convert --preset gemma_convert_short --base ~/.cache/orl/gemma-3-270m \
    --out ~/.cache/orl/runs/g55/grid300-bf16 --set threads=1 --set steps=300 --set warmup=10 \
    --set checkpointing=false --set eval_every=50 --set eval_windows=8 --set save_every=25 --set bf16=true
