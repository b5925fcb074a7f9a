# usage: bash orl.sh NAME PRESET [--set k=v ...]; resumable (rerun the same command)
cd "$(dirname "$0")/../../.." && source .venv/bin/activate
export OMP_NUM_THREADS=1
NAME=$1; PRESET=$2; shift 2
D=~/.cache/orl/runs/g55/text4/seed0
orl train --recipe orl --preset $PRESET --base ~/.cache/orl/runs/g55/grid300-bf16 \
  $(for f in copy count upper reverse; do echo --tasks-file $f=$D/$f.jsonl; done) \
  --out ~/.cache/orl/runs/g55/$NAME --set updates=40 --set prompts_per_update=4 --set group_size=4 \
  --set rollout.max_new_tokens=40 --set eval_every=20 --set eval_samples=8 --set save_every=2 --set keep_every=24 --set threads=1 "$@"
