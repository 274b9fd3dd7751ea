#!/usr/bin/env bash
# Prints the file a model of rag's catalog resolves to from the repository root (the path
# `rag models list` shows for its first setting), so the benchmarks name no model file of
# their own: src/catalog.rs is the one place that does.
#
#   scripts/bench/model-path.sh small|medium|large
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
rag=${CARGO_TARGET_DIR:-$root/target}/release/rag
[ $# -eq 1 ] || { echo "usage: scripts/bench/model-path.sh small|medium|large" >&2; exit 2; }
[ -x "$rag" ] || { echo "bench: build first (make build)" >&2; exit 1; }
cd "$root"
"$rag" models list --json | python3 -c '
import json, sys
want = sys.argv[1]
for m in json.load(sys.stdin)["models"]:
    if m["id"] == want:
        print(m["settings"][0]["path"])
        break
else:
    sys.exit(f"no model {want!r} in rag models list")
' "$1"
