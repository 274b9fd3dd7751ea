#!/usr/bin/env bash
# BENCH=format make bench: weight formats for the large generator, and rag against llama.cpp's
# own llama-bench on the same files and threads, side by side in one run.
#
# For the 1.5B's Q4_K_M file and copies requantized to $TYPES (default Q4_0 IQ4_NL, with
# llama-quantize --allow-requantize: a requantized copy is a little worse than one made from
# the original weights, so its quality is measured, not assumed), prints one Markdown row per
# file and batch size: llama-bench prefill (pp$P) and decode (tg$G) next to `rag bench llm`
# with the same token counts, threads and batch size ($REPS repetitions each). llama-bench
# and llama-quantize come from scripts/bench/llama-tools.sh, built on the llama.cpp tree rag links
# (FLAVOUR=native: ggml built for this CPU instead).
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
target=${CARGO_TARGET_DIR:-$root/target}
rag=$target/release/rag
out=${BENCH_DIR:-$HOME/.cache/rag/bench}/format
types=${TYPES:-Q4_0 IQ4_NL}
threads=${THREADS:-$(lscpu -p=core | grep -v '^#' | sort -u | wc -l)}
p=${P:-800}
g=${G:-32}
reps=${REPS:-2}
batches=${BATCHES:-128 512}
[ -x "$rag" ] || { echo "bench: build first (make build)" >&2; exit 1; }
model=${MODEL:-$("$root/scripts/bench/model-path.sh" large)}
[ -f "$model" ] || { echo "bench: $model is missing: run make models" >&2; exit 1; }
say() { printf 'bench: %s\n' "$*" >&2; }
tools=$("$root/scripts/bench/llama-tools.sh" "${FLAVOUR:-rag}")
mkdir -p "$out"

files=("$model")
base=$(basename "$model" .gguf)
for t in $types; do
  f=$out/${base%-Q4_K_M}-$t.gguf
  if [ ! -s "$f" ]; then
    say "requantizing to $t"
    "$tools/llama-quantize" --allow-requantize "$model" "$f.part" "$t" >"$out/quantize-$t.log" 2>&1 \
      || { say "llama-quantize $t failed: see $out/quantize-$t.log"; exit 1; }
    mv "$f.part" "$f"
  fi
  files+=("$f")
done

echo "| file | size | n_batch | llama-bench pp$p tok/s | rag prefill tok/s | llama-bench tg$g tok/s | rag decode tok/s |"
echo "|---|---|---|---|---|---|---|"
for f in "${files[@]}"; do
  name=$(basename "$f" .gguf)
  size=$(du -h "$f" | cut -f1)
  for b in $batches; do
    say "$name, n_batch $b: llama-bench -p $p -n $g, then rag bench llm -p $p -n $g"
    "$tools/llama-bench" -m "$f" -t "$threads" -b "$b" -ub "$b" -p "$p" -n "$g" -r "$reps" -o json \
      >"$out/$name-$b-llama-bench.json" 2>"$out/$name-$b-llama-bench.log"
    RAG_LLM_N_BATCH=$b "$rag" --config "$root/rag.toml" bench llm -p "$p" -n "$g" -r "$reps" \
      --model "$f" --threads "$threads" >"$out/$name-$b-rag.json"
    python3 - "$out/$name-$b" "$name" "$size" "$b" <<'PY'
import json, sys
stem, name, size, b = sys.argv[1:]
lb = json.load(open(f"{stem}-llama-bench.json"))
pp = next(x["avg_ts"] for x in lb if x["n_prompt"] > 0)
tg = next(x["avg_ts"] for x in lb if x["n_gen"] > 0)
r = json.load(open(f"{stem}-rag.json"))
pre, dec = r["prefill_tok_per_s"], r["decode_tok_per_s"]
print(f"| {name} | {size} | {b} | {pp:.1f} | {pre:.1f} ({pre / pp:.2f}×) | {tg:.1f} | {dec:.1f} ({dec / tg:.2f}×) |")
PY
  done
done
