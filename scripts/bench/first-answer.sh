#!/usr/bin/env bash
# From nothing to the first answer with a wheel, timed step by step (#42's goal: under 3
# minutes with the models on disk): a new venv, `pip install WHEEL` (onnxruntime from the
# index or pip's cache), `rag models fetch --from MODELS` (copied and checked, not fetched),
# `rag ingest` of DOCS in an empty folder, `rag ask`. Everything happens under a temporary
# HOME and XDG_DATA_HOME, removed at the end; nothing of the checkout is on PATH.
#
#   scripts/bench/first-answer.sh WHEEL [MODELS [DOCS]]    (defaults: models/ and corpus/ here)
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
[ $# -ge 1 ] || { echo "usage: scripts/bench/first-answer.sh WHEEL [MODELS [DOCS]]" >&2; exit 2; }
wheel=$(realpath "$1") models=$(realpath "${2:-$root/models}") docs=$(realpath "${3:-$root/corpus}")
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export PIP_CACHE_DIR=${PIP_CACHE_DIR:-$HOME/.cache/pip}
export HOME=$tmp/home XDG_DATA_HOME=$tmp/data
mkdir -p "$HOME" "$tmp/work"
cp -R "$docs" "$tmp/work/docs"
now() { date +%s.%N; }
t0=$(now)
python3 -m venv "$tmp/venv"
"$tmp/venv/bin/pip" install -q "$wheel"
t1=$(now)
export PATH=$tmp/venv/bin:/usr/bin:/bin
cd "$tmp/work"
rag models fetch --from="$models" >/dev/null
t2=$(now)
rag ingest docs >/dev/null
t3=$(now)
rag ask --stats "What does the KV cache store?"
t4=$(now)
awk -v a="$t0" -v b="$t1" -v c="$t2" -v d="$t3" -v e="$t4" 'BEGIN {
  printf "first-answer: pip install %.1f s, models fetch %.1f s, ingest %.1f s, first answer %.1f s: %.1f s in all\n", b - a, c - b, d - c, e - d, e - a }'
