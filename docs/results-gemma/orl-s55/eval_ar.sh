# The AR original on the text families (test seeds 0-2, in range and beyond); M / NAME choose another model
cd "$(dirname "$0")/../../.." && source .venv/bin/activate
export OMP_NUM_THREADS=1
D=~/.cache/orl/runs/g55/text4; O=~/.cache/orl/runs/g55/eval; mkdir -p $O
M=${M:-$HOME/.cache/orl/gemma-3-270m}; NAME=${NAME:-ar}; shift 0
for s in ${SEEDS:-0 1 2}; do
  for kind in seed beyond; do
    orl eval --model $M $(for f in copy count upper reverse; do echo --tasks-file $f=$D/$kind$s/$f.jsonl; done) \
      --limit 50 --max-new-tokens 64 --batch-size 8 --out $O/$NAME-$kind$s.jsonl --no-progress $EXTRA > $O/$NAME-$kind$s.log 2>&1
  done
done
