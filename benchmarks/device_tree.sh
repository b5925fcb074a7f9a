#!/usr/bin/env bash
# Slim the working tree a device call carries, and restore it (docs/RESULTS-gemma.md, "The GPU route").
# A call carries the tracked and the untracked-not-ignored files, 64 MiB in all with what `carry` names.
# The shipped checkpoints and the report's images take 33 of this repository's 37 MB and no device run of the
# conversion reads them, so `slim` takes them out of the git index and ignores them locally (the files stay on
# disk, untouched); the calls then carry ~3 MiB of tree and pieces of 58 MiB instead of 26. `restore` puts the
# index back as HEAD has it and removes exactly the lines `slim` added. Never commit while slim.
#
#   bash benchmarks/device_tree.sh slim       # before the device calls
#   bash benchmarks/device_tree.sh restore    # after them (also safe when not slim)
#   bash benchmarks/device_tree.sh status     # slim or not
# Env: SLIM_PATHS (space-separated, default "checkpoints docs/report docs/results-gemma").
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
read -r -a PATHS <<< "${SLIM_PATHS:-checkpoints docs/report docs/results-gemma}"
EXCLUDE="$(git rev-parse --git-path info/exclude)"
MARK="# device_tree.sh slim"

is_slim() { [ -f "$EXCLUDE" ] && grep -qxF "$MARK" "$EXCLUDE"; }

case "${1:-}" in
  slim)
    if is_slim; then echo "already slim"; exit 0; fi
    # a staged change under these paths would be lost by `restore` (it resets them to HEAD): refuse
    if ! git diff --cached --quiet -- "${PATHS[@]}"; then
      echo "device_tree.sh: staged changes under ${PATHS[*]}: commit or unstage them first" >&2; exit 2
    fi
    mkdir -p "$(dirname "$EXCLUDE")"
    # a last line without its newline would swallow the marker (and restore would never find it)
    if [ -s "$EXCLUDE" ] && [ -n "$(tail -c1 "$EXCLUDE")" ]; then echo >> "$EXCLUDE"; fi
    { echo "$MARK"; for p in "${PATHS[@]}"; do echo "/$p/"; done; echo "$MARK end"; } >> "$EXCLUDE"
    git rm -r -q --cached --ignore-unmatch -- "${PATHS[@]}"
    echo "slim: ${PATHS[*]} out of the index and ignored; tracked files now" \
      "$(git ls-files -z | xargs -0 -r stat -c %s | awk '{ s += $1 } END { print s + 0 }') bytes"
    ;;
  restore)
    if ! is_slim; then echo "not slim: nothing to restore"; exit 0; fi
    # the paths slim took out, as it recorded them (not today's SLIM_PATHS)
    mapfile -t PATHS < <(awk -v m="$MARK" '$0 == m { on = 1; next } $0 == m " end" { on = 0 } on' "$EXCLUDE" |
                         sed -e 's|^/||' -e 's|/$||')
    [ "${#PATHS[@]}" -gt 0 ] && git reset -q -- "${PATHS[@]}"
    # drop the marked block, every other line of the exclude file as it was
    awk -v m="$MARK" '$0 == m { skip = 1; next } $0 == m " end" { skip = 0; next } !skip' "$EXCLUDE" > "$EXCLUDE.tmp"
    mv "$EXCLUDE.tmp" "$EXCLUDE"
    echo "restored: ${PATHS[*]} back in the index"
    ;;
  status)
    if is_slim; then echo "slim"; else echo "not slim"; fi
    ;;
  *)
    echo "usage: bash benchmarks/device_tree.sh slim|restore|status" >&2; exit 2
    ;;
esac
