# session 56, thread A: the relabelled arm's threshold sweep and the converted model's missing thresholds
cd "$(dirname "$0")"
R=~/.cache/orl/runs/g55
bash eval.sh ref $R/ref-at24 0.9,0.7 || exit 1
bash eval.sh conv $R/grid300-bf16 0.5,0.95 || exit 1
bash eval.sh ref $R/ref-at24 0.5,0.95 || exit 1
KIND=beyond bash eval.sh ref $R/ref-at24 0.9 || exit 1
