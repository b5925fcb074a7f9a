#!/bin/bash
# Session 53: keep runs of $R in the repository, so that a lost cache no longer loses them: each NAME's config,
# weights, tokenizer and manifest (trainer_state.pt, the optimizer, left out of `files`) -> docs/results-lengths/s53/NAME
# (default: base7-more, session 52's validation pick: the base then shipped + 1,500 stage-2 steps, retrained by
# `bash docs/results-lengths/s52/more.sh 1500`). A path in the manifest under this repository becomes relative to it.
#   bash docs/results-lengths/s53/stage.sh [NAME ...]
set -euo pipefail
cd "$(dirname "$0")/../../.."
source .venv/bin/activate
R=${R:-$HOME/.cache/orl/runs}
for n in "${@:-base7-more}"; do
  D=docs/results-lengths/s53/$n
  mkdir "$D"
  cp "$R/$n/"{config.json,model.safetensors,orl_tokenizer.json} "$D/"
  chmod 644 "$D"/*
  python - "$R/$n/orl.json" "$D/orl.json" "$PWD" <<'PY'
import json, sys
m = json.load(open(sys.argv[1]))
m["files"].pop("trainer_state.pt", None)
def rel(v):  # absolute paths into this checkout -> repository-relative (any clone finds them)
    if isinstance(v, dict):
        return {k: rel(x) for k, x in v.items()}
    return v[len(sys.argv[3]) + 1:] if isinstance(v, str) and v.startswith(sys.argv[3] + "/") else v
json.dump(rel(m), open(sys.argv[2], "w"), indent=1)
PY
  orl info "$D" > /dev/null   # loads it
done
