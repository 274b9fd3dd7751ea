#!/usr/bin/env bash
# `make eval`: rag's quality on its three dev sets, each over a real manual nobody here wrote:
# eval/sqlite/ (SQLite's documentation, HTML, scripts/eval/devset.sh), eval/python/ (the Python 3.11
# documentation's reST sources, scripts/eval/devset-python.sh) and eval/bash/ (the Bash reference
# manual, one text file per section, scripts/eval/devset-bash.sh). Each corpus is ingested into its
# own project under $EVAL_DIR (incremental after the first run), then `rag eval` runs on the
# tuning part and on the held-out part of each set. JSON results are kept in each project.
#
#   make eval                       retrieval only (about a minute after the first ingest)
#   ANSWERS=1 make eval             also generate and score every answer (the default route,
#                                   auto: the best generator that fits llm.answer_budget_s)
#   ANSWERS=1 MODEL=large make eval the same with the large generator (MODEL=small: the 135M,
#                                   MODEL=medium: the 0.5B, from make models FETCH_FLAGS=--large)
#   SETS=python make eval           one set (sqlite, python, bash; default all three)
#   PARTS=dev make eval             one part (dev, dev2, heldout, heldout2; default all a set
#                                   has: dev2, a second tuning part, and heldout2, a second
#                                   held-out part, only SQLite and Bash)
#   TAG=k5 make eval                name the saved runs PART-TAG.json (default: MODEL, or
#                                   retrieval without ANSWERS)
#   EVAL_ARGS="--min hit@5=0.9" make eval   extra flags for rag eval
#
# The last run also draws every part side by side (rag eval --report --report-with):
# $EVAL_DIR/report-TAG.html (TAG: retrieval, or the MODEL answers came from).
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
target=${CARGO_TARGET_DIR:-$root/target}
rag=$target/release/rag
dir=${EVAL_DIR:-$HOME/.cache/rag/eval}
# SETS="sqlite python bash" (the default) picks the dev sets; each is its own project.
sets=${SETS:-sqlite python bash}

args=()
[ -n "${ANSWERS:-}" ] && args+=(--answers --model "${MODEL:-auto}")
# shellcheck disable=SC2206
args+=(${EVAL_ARGS:-})
tag=${MODEL:-auto}
[ -n "${ANSWERS:-}" ] || tag=retrieval
tag=${TAG:-$tag}
parts=${PARTS:-dev dev2 heldout heldout2}
# A name that is no set or part is a mistake (a typo would otherwise run nothing and pass);
# a known part that one set lacks (Python has no dev2) is skipped for that set.
for set in $sets; do
  case $set in sqlite | python | bash) ;; *) echo "eval: unknown set '$set' in SETS (sqlite, python, bash)" >&2; exit 2 ;; esac
done
for part in $parts; do
  case $part in dev | dev2 | heldout | heldout2) ;; *) echo "eval: unknown part '$part' in PARTS (dev, dev2, heldout, heldout2)" >&2; exit 2 ;; esac
done
[ -n "${sets// /}" ] && [ -n "${parts// /}" ] || { echo "eval: SETS and PARTS may not be empty" >&2; exit 2; }
[ -x "$rag" ] || { echo "eval: build first (make build)" >&2; exit 1; }
status=0
saved=()
last_set=${sets##* }
for set in $sets; do
  # The SQLite project is $dir itself (its results keep their names: dev-large.json, which
  # scripts/analysis/route_table.py reads); the others are $dir/python and $dir/bash.
  case $set in
    sqlite) project=$dir corpus=sqlite-doc fetch=devset.sh ;;
    python) project=$dir/python corpus=python-doc fetch=devset-python.sh ;;
    bash) project=$dir/bash corpus=bash-doc fetch=devset-bash.sh ;;
  esac
  mkdir -p "$project"
  "$root/scripts/eval/$fetch" "$project/$corpus"
  # A project whose rag.toml is the repository's, with the models' paths made absolute.
  sed "s#\"models/#\"$root/models/#" "$root/rag.toml" >"$project/rag.toml"
  (cd "$project" && "$rag" ingest "$corpus")
  set_parts=()
  for part in $parts; do [ -f "$root/eval/$set/$part.yaml" ] && set_parts+=("$part"); done
  for part in "${set_parts[@]}"; do
    echo "== eval/$set/$part.yaml =="
    report=()
    if [ "$set" = "$last_set" ] && [ "$part" = "${set_parts[-1]}" ] && ((${#saved[@]})); then
      report=(--report "$dir/report-$tag.html")
      for s in "${saved[@]}"; do [ -f "$s" ] && report+=(--report-with "$s"); done
    fi
    (cd "$project" && "$rag" eval "${args[@]}" "${report[@]}" --save-json "$project/$part-$tag.json" "$root/eval/$set/$part.yaml") || status=$?
    saved+=("$project/$part-$tag.json")
  done
done
((${#saved[@]} < 2)) || echo "eval: every part side by side in $dir/report-$tag.html"
exit $status
