#!/usr/bin/env bash
# `make eval`: rag's quality on its dev set (eval/sqlite/, questions over SQLite's own
# documentation, fetched by scripts/devset.sh). Ingests the corpus into a project under
# $EVAL_DIR (incremental after the first run), then runs `rag eval` on the tuning part and
# on the held-out part and prints both tables. JSON results are kept under $EVAL_DIR.
#
#   make eval                       retrieval only (about a minute after the first ingest)
#   ANSWERS=1 make eval             also generate and score every answer (small model)
#   ANSWERS=1 MODEL=large make eval the same with the large generator (MODEL=medium: the 0.5B;
#                                   both from scripts/setup.sh --large)
#   EVAL_ARGS="--min hit@5=0.9" make eval   extra flags for rag eval
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
target=${CARGO_TARGET_DIR:-$root/target}
rag=$target/release/rag
dir=${EVAL_DIR:-$HOME/.cache/rag/eval}
[ -x "$rag" ] || { echo "eval: build first (make build)" >&2; exit 1; }
"$root/scripts/devset.sh" "$dir/sqlite-doc"

# A project whose rag.toml is the repository's, with the models' paths made absolute.
sed "s#\"models/#\"$root/models/#" "$root/rag.toml" >"$dir/rag.toml"
(cd "$dir" && "$rag" ingest sqlite-doc)

args=()
[ -n "${ANSWERS:-}" ] && args+=(--answers --model "${MODEL:-small}")
# shellcheck disable=SC2206
args+=(${EVAL_ARGS:-})
tag=${MODEL:-small}
[ -n "${ANSWERS:-}" ] || tag=retrieval
status=0
for part in dev heldout; do
  echo "== eval/sqlite/$part.yaml =="
  (cd "$dir" && "$rag" eval "${args[@]}" --save-json "$dir/$part-$tag.json" "$root/eval/sqlite/$part.yaml") || status=$?
done
exit $status
