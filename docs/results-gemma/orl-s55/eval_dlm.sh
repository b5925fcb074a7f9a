# usage: bash eval_dlm.sh NAME MODEL_DIR  (test seeds 0-2: in range at thresholds 0.9,0.7; beyond at 0.9)
cd "$(dirname "$0")/../../.." && source .venv/bin/activate
export OMP_NUM_THREADS=1
NAME=$1; M=$2
D=~/.cache/orl/runs/g55/text4; O=~/.cache/orl/runs/g55/eval; mkdir -p $O
for s in ${SEEDS:-0 1 2}; do
  for kind in seed beyond; do
    TH=0.9,0.7; [ $kind = beyond ] && TH=0.9
    orl eval --model $M $(for f in copy count upper reverse; do echo --tasks-file $f=$D/$kind$s/$f.jsonl; done) \
      --limit 50 --max-new-tokens 64 --batch-size 8 --thresholds $TH --out $O/$NAME-$kind$s.jsonl --no-progress > $O/$NAME-$kind$s.log 2>&1
  done
done
