#!/usr/bin/env bash
# `BENCH=remote make bench`: the same GGUF answering in process (llama.cpp through
# llama-cpp-2) and through llama.cpp's own llama-server (`llm.backend = "openai"`), measured
# side by side in one run: the 16 questions of eval/corpus.yaml, answered and scored by
# `rag eval --answers` (one process per backend), then the table of keywords, prompt tokens,
# time to first token and decode speed. llama-server is built by scripts/test/llama-server.sh.
#
#   MODEL=small|large   which generator (default small)
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
target=${CARGO_TARGET_DIR:-$root/target}
rag=$target/release/rag
bench=${BENCH_DIR:-$HOME/.cache/rag/bench}/remote
model=${MODEL:-small}
threads=${THREADS:-$(nproc)}
[ -x "$rag" ] || { echo "bench: build first (make build)" >&2; exit 1; }
say() { printf 'bench: %s\n' "$*" >&2; }
mkdir -p "$bench"

server=$("$root/scripts/test/llama-server.sh")
case $model in
  small) gguf=$("$root/scripts/bench/model-path.sh" small) ;;
  large) gguf=$("$root/scripts/bench/model-path.sh" medium) ;;
  *) echo "bench: MODEL is small or large" >&2; exit 2 ;;
esac

# A project over corpus/ with the repository's settings, models by absolute path.
sed "s#\"models/#\"$root/models/#" "$root/rag.toml" >"$bench/rag.toml"
rm -rf "$bench/corpus" && cp -r "$root/corpus" "$bench/corpus"
(cd "$bench" && "$rag" ingest corpus >/dev/null)

port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
# One slot with the whole window, as the in-process context has; the same threads.
"$server" -m "$gguf" --host 127.0.0.1 --port "$port" -c 2048 -np 1 -t "$threads" --no-webui \
  >"$bench/llama-server.log" 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null || true' EXIT
for _ in $(seq 600); do
  curl -sf "http://127.0.0.1:$port/health" >/dev/null && break
  sleep 0.2
done
curl -sf "http://127.0.0.1:$port/health" >/dev/null || { say "llama-server did not start: $bench/llama-server.log"; exit 1; }

# The prompt cache off for both: each answer pays its whole prefill, in process and remote
# alike (llama-server keeps its slot's last prompt; the questions share only the instructions).
common=(eval --answers --model "$model" --modes hybrid --json "$root/eval/corpus.yaml")
say "in process ($model)"
(cd "$bench" && RAG_LLM_PROMPT_CACHE_MB=0 "$rag" "${common[@]}") >"$bench/local.json"
say "llama-server ($model)"
backend=RAG_LLM_BACKEND
[ "$model" = large ] && backend=RAG_LLM_LARGE_BACKEND
(cd "$bench" && RAG_LLM_PROMPT_CACHE_MB=0 env "$backend=openai" RAG_LLM_URL="http://127.0.0.1:$port/v1" \
  RAG_LLM_PARALLEL=1 "$rag" "${common[@]}") >"$bench/remote.json"

python3 - "$bench/local.json" "$bench/remote.json" "$model" <<'EOF'
import json, sys
local, remote = (json.load(open(p))["metrics"] for p in sys.argv[1:3])
rows = [
    ("keywords", "answers.keywords", "{:.3f}"),
    ("citations naming an expected file", "answers.citations", "{:.2f}"),
    ("prompt tokens p50", "answers.prompt_tokens_p50", "{:.0f}"),
    ("first token p50 (ms)", "answers.ttft_ms_p50", "{:.0f}"),
    ("first token p95 (ms)", "answers.ttft_ms_p95", "{:.0f}"),
    ("decode tok/s p50", "answers.decode_tok_per_s_p50", "{:.1f}"),
]
print(f"| {sys.argv[3]} model, eval/corpus.yaml (16 questions) | in process | llama-server |")
print("|---|---|---|")
for name, key, fmt in rows:
    a, b = local.get(key), remote.get(key)
    show = lambda v: "n/a" if v is None else fmt.format(v)
    print(f"| {name} | {show(a)} | {show(b)} |")
EOF
