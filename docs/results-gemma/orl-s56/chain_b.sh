# session 56, thread B: the relabelled arm's ablations, 24 updates each, evaluated at threshold 0.9 on seeds 0-2
cd "$(dirname "$0")"
R=~/.cache/orl/runs/g55
bash ../orl-s55/orl.sh ref_no_residual gemma_orl_no_residual --set relabel=reference --set updates=24 || exit 1
bash eval.sh ref_no_aec $R/ref_no_aec-at24 0.9 || exit 1
bash eval.sh ref_no_residual $R/ref_no_residual 0.9 || exit 1
bash ../orl-s55/orl.sh ref_stale gemma_orl_stale --set relabel=reference --set updates=24 || exit 1
bash eval.sh ref_stale $R/ref_stale 0.9 || exit 1
