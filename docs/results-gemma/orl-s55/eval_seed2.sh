# usage: bash eval_seed2.sh NAME MODEL_DIR: test seed 2 at threshold 0.9 only (in range and beyond), as the ORL and
# no-AEC arms were measured in session 55 (eval_dlm.sh gives seeds 0-1; rerun it with SEEDS="0 1")
cd "$(dirname "$0")/../../.." && source .venv/bin/activate
export OMP_NUM_THREADS=1
NAME=$1; M=$2
O=~/.cache/orl/runs/g55/eval; D=~/.cache/orl/runs/g55/text4; mkdir -p $O
for kind in seed beyond; do
  orl eval --model $M $(for f in copy count upper reverse; do echo --tasks-file $f=$D/${kind}2/$f.jsonl; done) \
    --limit 50 --max-new-tokens 64 --batch-size 8 --thresholds 0.9 --out $O/$NAME-${kind}2.jsonl --no-progress > $O/$NAME-${kind}2.log 2>&1
done
