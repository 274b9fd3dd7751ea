#!/usr/bin/env bash
# `make stress`'s serve soak: ingests corpus/ into a project under $SOAK_DIR (incremental
# after the first run), then runs scripts/test/serve_soak.py against `rag serve` on loopback
# for SOAK_S seconds (120). Exits 1 when a promise failed (see serve_soak.py).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
rag=${CARGO_TARGET_DIR:-$root/target}/release/rag
dir=${SOAK_DIR:-$HOME/.cache/rag/soak}
[ -x "$rag" ] || { echo "soak: build first (make build)" >&2; exit 1; }
mkdir -p "$dir"
rm -rf "$dir/corpus"
cp -r "$root/corpus" "$dir/corpus"
# The repository's rag.toml with the models' paths made absolute.
sed "s#\"models/#\"$root/models/#" "$root/rag.toml" >"$dir/rag.toml"
(cd "$dir" && "$rag" -q ingest corpus)
exec python3 "$root/scripts/test/serve_soak.py" "$rag" "$dir"
