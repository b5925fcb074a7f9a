#!/bin/bash
# Session 54: ship issue 21's next trio together (run once, from a checkout of session 53's main):
#   checkpoints/orl-tiny7-base  <- docs/results-lengths/s53/base7-more (the old base + 1,500 stage-2 steps, session 52's pick)
#   checkpoints/orl-tiny7-draft <- docs/results-lengths/s53/draft-more (its draft-only drafter)
#   checkpoints/orl-tiny7-orl   <- PICK: the ORL run on it picked on validation seeds 100-101 (a directory in this
#                                  repository, or a run name under $R, staged without its optimizer state)
# Every manifest path to base7-more becomes checkpoints/orl-tiny7-base. The base's own `init` stays
# checkpoints/orl-tiny7-base: its `init_git_commit` (a2a43e7) names the commit that holds the old base it started from.
#   bash docs/results-lengths/s54/ship.sh more-ref-at480
set -euo pipefail
cd "$(dirname "$0")/../../.."
source .venv/bin/activate
R=${R:-$HOME/.cache/orl/runs}
PICK=${1:?usage: ship.sh PICK (a directory here or a run name under \$R)}
S=docs/results-lengths/s53
# everything checked before the first change: the staged base and drafter, the pick, and that the drafter's recorded
# verifier digest is the staged base's (a base staged after the drafter trained on its run directory differs)
for d in "$S/base7-more" "$S/draft-more"; do [ -f "$d/orl.json" ] || { echo "ship.sh: no staged $d" >&2; exit 2; }; done
[ -f "$PICK/orl.json" ] || [ -f "$R/$PICK/orl.json" ] || { echo "ship.sh: no checkpoint $PICK here or in $R" >&2; exit 2; }
python - "$S" <<'PY'
import json, sys
from orl.train.convert_base import base_digest
s = sys.argv[1]
base = json.load(open(f"{s}/base7-more/orl.json"))
base["files"].pop("trainer_state.pt", None)
want = json.load(open(f"{s}/draft-more/orl.json"))["recipe"]["verifier"]["base_files_sha256"]
if base_digest(f"{s}/base7-more", base) != want:
    sys.exit("ship.sh: draft-more was trained against another copy of the base (its verifier digest differs): "
             "train it on the staged base (BASE=docs/results-lengths/s53/base7-more)")
PY
git rm -rq checkpoints/orl-tiny7-base checkpoints/orl-tiny7-draft checkpoints/orl-tiny7-orl
move() {  # a staged directory, tracked (as in session 54) or not (stage.sh does not `git add`)
  mv "$1" "$2" && git rm -rq --cached --ignore-unmatch "$1"
}
move "$S/base7-more" checkpoints/orl-tiny7-base
move "$S/draft-more" checkpoints/orl-tiny7-draft
if [ -d "$PICK" ]; then
  move "$PICK" checkpoints/orl-tiny7-orl
else
  mkdir checkpoints/orl-tiny7-orl
  cp "$R/$PICK/"{config.json,model.safetensors,orl_tokenizer.json,orl.json} checkpoints/orl-tiny7-orl/
  chmod 644 checkpoints/orl-tiny7-orl/*
fi
python - "$PWD" "$R" <<'PY'
import json, sys
root, runs = sys.argv[1], sys.argv[2]
staged = {"docs/results-lengths/s53/base7-more", f"{runs}/base7-more"}  # where step 6 may have read the base
def walk(v, f):
    if isinstance(v, dict):
        return {k: walk(x, f) for k, x in v.items()}
    if isinstance(v, list):
        return [walk(x, f) for x in v]
    return f(v)
def rel(v):  # absolute paths into this checkout -> repository-relative; the staged base -> its shipped place
    if isinstance(v, str) and v.startswith(root + "/"):
        v = v[len(root) + 1:]
    return "checkpoints/orl-tiny7-base" if isinstance(v, str) and v.rstrip("/") in staged else v
for name in ("base", "draft", "orl"):
    path = f"{root}/checkpoints/orl-tiny7-{name}/orl.json"
    m = walk(json.load(open(path)), rel)
    m["files"].pop("trainer_state.pt", None)
    init = m["recipe"]["config"].get("init") or ""
    if name == "base" and init.endswith("/checkpoints/orl-tiny7-base"):  # the old base, read from a worktree (step 5)
        m["recipe"]["config"]["init"] = "checkpoints/orl-tiny7-base"
        m["recipe"].setdefault("init_git_commit", "a2a43e7")
    json.dump(m, open(path, "w"), indent=1)
PY
for n in base draft orl; do orl info checkpoints/orl-tiny7-$n > /dev/null; done
grep -n "docs/results-lengths/s53\|\"/" checkpoints/orl-tiny7-{base,draft,orl}/orl.json && { echo "a staged or absolute path is left" >&2; exit 1; }
git add checkpoints/orl-tiny7-base checkpoints/orl-tiny7-draft checkpoints/orl-tiny7-orl
echo "shipped: base7-more, draft-more, $PICK"
