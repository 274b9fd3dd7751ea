#!/usr/bin/env bash
# `BENCH=ann make bench`: LanceDB's ANN vector indexes against the exact scan, on tables of
# synthetic clustered unit vectors (384 dimensions, as MiniLM's; see src/commands/bench/ann.rs) of each
# size in SIZES. For every index type: build time; for every (nprobes, refine factor): search
# latency p50/p95 and recall@10 against the exact top 10 of the same 200 queries, all in one
# process per size so the exact and ANN figures share the machine's state. Tables are kept
# under $BENCH_DIR/ann-N and reused by the next run. Prints a Markdown table.
#
#   SIZES="100000 1000000"   table sizes (default)
#   KINDS=ivf-hnsw-sq,ivf-pq NPROBES=10,20,40 REFINE=0,5
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
target=${CARGO_TARGET_DIR:-$root/target}
rag=$target/release/rag
bench=${BENCH_DIR:-$HOME/.cache/rag/bench}
[ -x "$rag" ] || { echo "bench: build first (make build)" >&2; exit 1; }
mkdir -p "$bench"

for n in ${SIZES:-100000 1000000}; do
  echo "bench: $n vectors" >&2
  (cd "$bench" && "$rag" --index "$bench/ann-$n" bench ann --chunks "$n" \
    --kinds "${KINDS:-ivf-hnsw-sq,ivf-pq}" --nprobes "${NPROBES:-10,20,40}" --refine "${REFINE:-0,5}") \
    >"$bench/ann-$n.json"
done

python3 - "$bench" ${SIZES:-100000 1000000} <<'PY'
import json, sys
bench, sizes = sys.argv[1], sys.argv[2:]
print("| vectors | search | build | nprobes | refine | p50 ms | p95 ms | p50 vs exact | recall@10 |")
print("|---|---|---|---|---|---|---|---|---|")
for n in sizes:
    r = json.load(open(f"{bench}/ann-{n}.json"))
    builds = {b["kind"]: b["build_s"] for b in r["builds"]}
    exact = next(m for m in r["results"] if m["kind"] == "exact")
    for m in r["results"]:
        b = f'{builds[m["kind"]]:.0f} s' if m["kind"] in builds else "-"
        probe = m["nprobes"] or "-"
        print(f'| {int(n):,} | {m["kind"]} | {b} | {probe} | {m["refine_factor"] or "-"} | '
              f'{m["p50_ms"]:.1f} | {m["p95_ms"]:.1f} | {exact["p50_ms"] / m["p50_ms"]:.1f}x | {m["recall_at_10"]:.3f} |')
PY
