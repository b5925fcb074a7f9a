#!/bin/bash
# Session 53: keep session 52's validation pick (the shipped base + 1,500 stage-2 steps, $R/base7-more, retrained by
# `bash docs/results-lengths/s52/more.sh 1500`) in the repository, so that a lost cache no longer loses it:
# its config, weights, tokenizer and manifest (trainer_state.pt, the optimizer, left out of `files`) -> base7-more/
#   bash docs/results-lengths/s53/stage.sh
set -euo pipefail
cd "$(dirname "$0")/../../.."
source .venv/bin/activate
R=${R:-$HOME/.cache/orl/runs}; D=docs/results-lengths/s53/base7-more
mkdir "$D"
cp "$R/base7-more/"{config.json,model.safetensors,orl_tokenizer.json} "$D/"
python - "$R/base7-more/orl.json" "$D/orl.json" <<'PY'
import json, sys
m = json.load(open(sys.argv[1]))
m["files"].pop("trainer_state.pt", None)
json.dump(m, open(sys.argv[2], "w"), indent=1)
PY
orl info "$D" > /dev/null   # loads it and checks every listed file's sha256
