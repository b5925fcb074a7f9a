# usage: [SEEDS="0 1 2"] [KIND=seed|beyond] bash eval.sh NAME MODEL_DIR THRESHOLDS   (e.g. 0.5,0.95)
# Appends to ~/.cache/orl/runs/g55/eval/NAME-KINDs.jsonl, the files benchmarks/text_table.py reads; the same settings
# as session 55's eval_dlm.sh (50 questions a family, 64 new tokens, batch 8), one thread.
cd "$(dirname "$0")/../../.." && source .venv/bin/activate
export OMP_NUM_THREADS=1
NAME=$1; M=$2; TH=$3; KIND=${KIND:-seed}
D=~/.cache/orl/runs/g55/text4; O=~/.cache/orl/runs/g55/eval; mkdir -p $O
for s in ${SEEDS:-0 1 2}; do
  orl eval --model $M $(for f in copy count upper reverse; do echo --tasks-file $f=$D/$KIND$s/$f.jsonl; done) \
    --limit 50 --max-new-tokens 64 --batch-size 8 --thresholds $TH --out $O/$NAME-$KIND$s.jsonl --no-progress \
    > $O/$NAME-$KIND$s.$TH.log 2>&1 || exit 1
done
