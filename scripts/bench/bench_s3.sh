#!/usr/bin/env bash
# `BENCH=s3 make bench`: one index in a local folder and the same index in a bucket of moto's
# S3-compatible server on 127.0.0.1 (scripts/test/s3-server.sh), measured side by side in one run
# over corpus/: ingest time, then cold `rag search` processes and `rag ask --dry-run`
# (retrieval and packing, no generation: what the store's location changes) alternating
# between the two, and `rag ask` answers with the prompt cache off. Prints a table.
#
#   RUNS=N   timed runs of each command per location (default 20)
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
target=${CARGO_TARGET_DIR:-$root/target}
rag=$target/release/rag
bench=${BENCH_DIR:-$HOME/.cache/rag/bench}/s3
runs=${RUNS:-20}
[ -x "$rag" ] || { echo "bench: build first (make build)" >&2; exit 1; }
say() { printf 'bench: %s\n' "$*" >&2; }
mkdir -p "$bench"
moto=$("$root/scripts/test/s3-server.sh")

port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
"$moto" -H 127.0.0.1 -p "$port" >"$bench/moto.log" 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null || true' EXIT
for _ in $(seq 300); do
  curl -sf -X PUT "http://127.0.0.1:$port/rag-bench" >/dev/null && break
  sleep 0.2
done

# Two projects over the same copy of corpus/: a folder index and a bucket index.
rm -rf "$bench/local" "$bench/s3" "$bench/cache"
for where in local s3; do
  mkdir -p "$bench/$where"
  cp -r "$root/corpus" "$bench/$where/corpus"
  sed "s#\"models/#\"$root/models/#" "$root/rag.toml" >"$bench/$where/rag.toml"
done
sed -i "s#^dir = \".rag\"#dir = \"s3://rag-bench/corpus\"#; s#^storage = {}#storage = { aws_endpoint = \"http://127.0.0.1:$port\", allow_http = \"true\", aws_region = \"us-east-1\" }#" \
  "$bench/s3/rag.toml"
export AWS_ACCESS_KEY_ID=bench AWS_SECRET_ACCESS_KEY=bench XDG_CACHE_HOME=$bench/cache

python3 - "$rag" "$bench" "$runs" <<'PY'
import json, statistics, subprocess, sys, time
rag, bench, runs = sys.argv[1], sys.argv[2], int(sys.argv[3])
def timed(where, args):
    t = time.perf_counter()
    out = subprocess.run([rag, *args], cwd=f"{bench}/{where}", capture_output=True, text=True)
    if out.returncode not in (0, 6):
        sys.exit(f"rag {args} in {where}: exit {out.returncode}\n{out.stderr}")
    return (time.perf_counter() - t) * 1e3, out.stdout
rows = {}
for where in ("local", "s3"):
    rows.setdefault("ingest corpus/ (ms)", {})[where] = timed(where, ["ingest", "-q", "corpus"])[0]
queries = ["how does the prompt cache work", "quantization of weights", "routing to a large model",
           "time to first token", "batch size and throughput"]
def p(v, q):
    v = sorted(v); return v[min(len(v) - 1, round(q * (len(v) - 1)))]
for label, args in (("search", ["search", "--json"]), ("ask --dry-run", ["ask", "--dry-run"])):
    ms = {"local": [], "s3": []}
    for i in range(runs):
        for where in ("local", "s3"):  # alternating, so both see the same machine
            ms[where].append(timed(where, [*args, queries[i % len(queries)]])[0])
    for q, name in ((0.5, "p50"), (0.95, "p95")):
        rows[f"{label}, process {name} (ms)"] = {w: p(v, q) for w, v in ms.items()}
ask = {"local": [], "s3": []}
for i in range(5):
    for where in ("local", "s3"):
        ms, out = timed(where, ["ask", "--json", "--no-cache", queries[i]])
        t = json.loads(out)["timings"]
        ask[where].append((t["retrieval_ms"], t["ttft_ms"], ms))
for j, label in enumerate(("retrieval", "first token", "process")):
    for where in ("local", "s3"):
        rows.setdefault(f"ask: {label} p50 (ms)", {})[where] = statistics.median(a[j] for a in ask[where])
print("| corpus/ | local folder | moto S3 on 127.0.0.1 | ratio |")
print("|---|---|---|---|")
for k, v in rows.items():
    print(f"| {k} | {v['local']:.0f} | {v['s3']:.0f} | {v['s3'] / max(v['local'], 1e-9):.2f}x |")
PY
