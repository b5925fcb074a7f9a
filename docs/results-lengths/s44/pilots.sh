#!/bin/bash
# session 44: AR-stage pilots (benchmarks/length_pilot.py), one thread each, one after the other; a finished pilot is
# loaded, not retrained. Each argument is VARIANT:FAMILY:STEPS[:OPTION[:OPTION]], the options the pilot's
# `init=CHECKPOINT` (a warm start: the trained checkpoint's weights, a fresh schedule) and `aux=HELPER`, e.g.
#   bash docs/results-lengths/s44/pilots.sh hintsph:split7:1500:aux=split7xps:init=$HOME/.cache/orl/runs/hint4st-7k-s2
# Logs: ~/.cache/orl/runs/s44/pilot-*.log (the lines that matter go to docs/results-lengths/s44/pilots.txt).
source /work/main/.venv/bin/activate; cd /work/main
export OMP_NUM_THREADS=1
L=~/.cache/orl/runs/s44; mkdir -p $L
for spec in "$@"; do
  IFS=: read -r v f n o1 o2 <<< "$spec"
  tag=$(echo "$f-$v-$n-$o1-$o2" | tr '=/' '__' | sed 's/_root_.cache_orl_runs_//')
  log=$L/pilot-$tag.log; [ -e "$log" ] && log=$L/pilot-$tag-$(date +%s).log  # a rerun never overwrites a record
  python benchmarks/length_pilot.py "$v" "$f" "$n" ${o1:+"$o1"} ${o2:+"$o2"} > "$log" 2>&1 < /dev/null
  echo "$spec rc $? $(date)"
done
