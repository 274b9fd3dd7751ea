#!/usr/bin/env bash
# A GPU build of rag against llama.cpp's own llama-bench on the same device, and each route's
# first token and whole answer with every layer offloaded and with none (docs/gpu.md).
# Prepared for a machine with a GPU that can hold the models; here it runs on Mesa's lavapipe.
#
#   scripts/bench/bench_gpu.sh [vulkan|cuda]      (make build GPU=… first)
#
# ROUTES (small medium large) picks the generators; QUESTION the question asked; THREADS the
# CPU threads (nproc); N_PROMPT and N_GEN the llama-bench lengths (512, 128); REPS (3).
# Prints a Markdown table; raw JSON in $BENCH_DIR/gpu (~/.cache/rag/bench/gpu). Where the only
# Vulkan device is a CPU-type one (lavapipe), set GGML_VK_VISIBLE_DEVICES=0.
set -euo pipefail

gpu=${1:-vulkan}
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
target=${CARGO_TARGET_DIR:-$root/target}
rag=${RAG:-$target-$gpu/release/rag}
out=${BENCH_DIR:-$HOME/.cache/rag/bench}/gpu
routes=${ROUTES:-small medium large}
threads=${THREADS:-$(nproc)}
n_prompt=${N_PROMPT:-512}
n_gen=${N_GEN:-128}
reps=${REPS:-3}
question=${QUESTION:-What does the KV cache store?}
say() { printf 'bench-gpu: %s\n' "$*" >&2; }
[ -x "$rag" ] || { say "no $gpu build at $rag: run make build GPU=$gpu"; exit 1; }
mkdir -p "$out"

# llama-bench with the same backend, on the llama.cpp tree rag links.
export $("$root/scripts/gpu/$gpu.sh")
lb=$("$root/scripts/bench/llama-tools.sh" "$gpu")/llama-bench
"$rag" doctor 2>/dev/null | grep -E '^\S+ +gpu ' >&2 || true

# One project with corpus/ ingested, the models of this checkout.
proj=$out/project
rm -rf "$proj" && mkdir -p "$proj" && cp -r "$root/corpus" "$proj/"
sed "s#\"models/#\"$root/models/#" "$root/rag.toml" >"$proj/rag.toml"
(cd "$proj" && "$rag" -q ingest corpus >/dev/null)

echo "| route | layers on GPU | llama-bench prefill / decode tok/s | rag prefill / decode tok/s | rag ask: first token / whole answer s |"
echo "|---|---|---|---|---|"
for route in $routes; do
  model=$(cd "$root" && CARGO_TARGET_DIR=$target-$gpu scripts/bench/model-path.sh "$route")
  [ -f "$model" ] || { say "$route: $model not installed, skipped"; continue; }
  for layers in 0 auto; do
    ngl=$([ "$layers" = auto ] && echo 999 || echo 0)
    "$lb" -m "$model" -p "$n_prompt" -n "$n_gen" -t "$threads" -ngl "$ngl" -r "$reps" -o json \
      >"$out/llama-bench-$route-$layers.json" 2>"$out/llama-bench-$route-$layers.log"
    (cd "$proj" && "$rag" bench llm -p "$n_prompt" -n "$n_gen" -r "$reps" --threads "$threads" \
      --model "$route" --gpu-layers "$layers") >"$out/rag-$route-$layers.json"
    (cd "$proj" && "$rag" -q ask --json --no-cache --model "$route" --gpu-layers "$layers" \
      --threads "$threads" "$question") >"$out/ask-$route-$layers.json"
    python3 - "$out" "$route" "$layers" <<'EOF'
import json, sys
out, route, layers = sys.argv[1:]
lb = json.load(open(f"{out}/llama-bench-{route}-{layers}.json"))
pp = next(x["avg_ts"] for x in lb if x["n_prompt"] > 0)
tg = next(x["avg_ts"] for x in lb if x["n_gen"] > 0)
r = json.load(open(f"{out}/rag-{route}-{layers}.json"))
t = json.load(open(f"{out}/ask-{route}-{layers}.json"))["timings"]
print(f"| {route} | {r['gpu_layers']}/{r['layers']} | {pp:.1f} / {tg:.1f} "
      f"| {r['prefill_tok_per_s']:.1f} / {r['decode_tok_per_s']:.1f} "
      f"| {t['ttft_ms'] / 1e3:.2f} / {t['total_ms'] / 1e3:.2f} |")
EOF
  done
done
