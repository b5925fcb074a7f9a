# The text families' files (benchmarks/text_tasks.py): 512 train rows a family (the same for every seed) and 50
# in-range held-out rows for each test seed 0-2 and the validation seed 100; 25 beyond rows a family and seed.
cd "$(dirname "$0")/../../.." && source .venv/bin/activate
D=~/.cache/orl/runs/g55/text4
for s in 0 1 2 100; do
  python benchmarks/text_tasks.py --out-dir $D/seed$s --train 512 --heldout 50 --seed $s
  python benchmarks/text_tasks.py --out-dir $D/beyond$s --heldout 25 --seed $s --beyond
done
