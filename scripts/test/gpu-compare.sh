#!/usr/bin/env bash
# The GPU build against the CPU build, answer by answer (make test-gpu).
#
#   scripts/test/gpu-compare.sh CPU_RAG GPU_RAG [N]
#
# Asks the first N (10) questions of eval/corpus.yaml with the 0.5B (`--model medium`), at
# temperature 0 and without the prompt cache, once with each binary, in this checkout with
# corpus/ ingested. The GPU binary offloads every layer (`--gpu-layers auto`) to the first
# Vulkan device, which may be Mesa's lavapipe (GGML_VK_VISIBLE_DEVICES=0: llama.cpp passes
# over CPU-type devices unless named). Prints one row per question: the same answer, or the
# first character where they part and the text around it; the layers offloaded; prefill and
# decode speed of each. Fails when a binary fails, or when the GPU build offloaded nothing.
# The answers, as JSON, are kept in $OUT (target/gpu-compare).
set -euo pipefail

cpu=${1:?usage: gpu-compare.sh CPU_RAG GPU_RAG [N]}
gpu=${2:?usage: gpu-compare.sh CPU_RAG GPU_RAG [N]}
n=${3:-10}
out=${OUT:-target/gpu-compare}
cd "$(dirname "$0")/../.."
mkdir -p "$out"

"$cpu" -q ingest corpus >/dev/null
mapfile -t questions < <(python3 - "$n" <<'EOF'
import sys, yaml
for case in yaml.safe_load(open("eval/corpus.yaml"))[: int(sys.argv[1])]:
    print(case["question"])
EOF
)
: >"$out/cpu.jsonl"
: >"$out/gpu.jsonl"
for q in "${questions[@]}"; do
  "$cpu" -q ask --json --no-cache --model medium "$q" | tr -d '\n' >>"$out/cpu.jsonl"
  echo >>"$out/cpu.jsonl"
  GGML_VK_VISIBLE_DEVICES=${GGML_VK_VISIBLE_DEVICES:-0} \
    "$gpu" -q ask --json --no-cache --model medium --gpu-layers auto "$q" | tr -d '\n' >>"$out/gpu.jsonl"
  echo >>"$out/gpu.jsonl"
done
GGML_VK_VISIBLE_DEVICES=${GGML_VK_VISIBLE_DEVICES:-0} "$gpu" doctor 2>/dev/null | grep -E '^\S* *(gpu|threads)' || true

python3 - "$out" <<'EOF'
import json, sys
out = sys.argv[1]
cpu = [json.loads(l) for l in open(f"{out}/cpu.jsonl")]
gpu = [json.loads(l) for l in open(f"{out}/gpu.jsonl")]
same, offloaded = 0, True
print("| # | question | answers | GPU layers | prefill tok/s CPU / GPU | decode tok/s CPU / GPU |")
print("|---|---|---|---|---|---|")
for i, (c, g) in enumerate(zip(cpu, gpu), 1):
    a, b = c["answer"], g["answer"]
    if a == b:
        said = "the same"
        same += 1
    else:
        at = next((k for k, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
        said = f"part at character {at}: CPU …{a[max(0, at - 30):at + 30]!r}… GPU …{b[max(0, at - 30):at + 30]!r}…"
    t, u = c["timings"], g["timings"]
    offloaded &= u.get("gpu_layers", 0) > 0
    print(f"| {i} | {c['question']} | {said} | {u.get('gpu_layers', 0)}/{u.get('layers', 0)} "
          f"| {t['prefill_tok_per_s']:.0f} / {u['prefill_tok_per_s']:.0f} "
          f"| {t['decode_tok_per_s']:.1f} / {u['decode_tok_per_s']:.1f} |")
print(f"\n{same} of {len(cpu)} answers the same; the answers are in {out}/")
if not offloaded:
    sys.exit("gpu-compare: the GPU build put no layer on a device (see `rag doctor`'s gpu line)")
EOF
