#!/usr/bin/env bash
# BENCH=speculate make bench: speculative decoding on a generator, side by side in one run.
# The first $N dev questions (eval/sqlite/dev.yaml, default 12) are answered by $MODEL
# (default large) with llm.speculative = off, lookup and draft, one after the other on the
# same index; prints a Markdown table of decode speed, drafts kept and whole answer time, and
# checks that every answer is byte for byte the one plain decoding gave. Raw JSON stays under
# $BENCH_DIR/speculate.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
target=${CARGO_TARGET_DIR:-$root/target}
rag=$target/release/rag
out=${BENCH_DIR:-$HOME/.cache/rag/bench}/speculate
dir=${EVAL_DIR:-$HOME/.cache/rag/eval}
n=${N:-12}
model=${MODEL:-large}
modes=${MODES:-off lookup draft}
[ -x "$rag" ] || { echo "bench: build first (make build)" >&2; exit 1; }
mkdir -p "$out" "$dir"
"$root/scripts/eval/devset.sh" "$dir/sqlite-doc"
sed "s#\"models/#\"$root/models/#" "$root/rag.toml" >"$dir/rag.toml"
(cd "$dir" && "$rag" -q ingest sqlite-doc >/dev/null)

# The first N cases of the dev set (each case starts with "- id:").
awk -v n="$n" '/^- id:/ { k++ } k <= n' "$root/eval/sqlite/dev.yaml" >"$out/cases.yaml"
for mode in $modes; do
  echo "bench: $model, llm.speculative = $mode, $n questions" >&2
  (cd "$dir" && RAG_LLM_SPECULATIVE=$mode RAG_LLM_PROMPT_CACHE_MB=0 \
    "$rag" -q eval --answers --model "$model" --save-json "$out/$mode.json" "$out/cases.yaml" >/dev/null)
done

python3 - "$out" $modes <<'PY'
import json, sys
out, modes = sys.argv[1], sys.argv[2:]
runs = {m: json.load(open(f"{out}/{m}.json")) for m in modes}
def answers(r):
    return {c["id"]: c["answer"] for c in r["results"] if c.get("answer")}
def total(r, key):
    return sum(c["answer"][key] for c in r["results"] if c.get("answer"))
base = answers(runs[modes[0]])
print(f"| llm.speculative | decode tok/s p50 | drafts kept | whole answer mean | same answers as {modes[0]} |")
print("|---|---|---|---|---|")
for m, r in runs.items():
    a = r["metrics"]
    same = sum(base[k]["text"] == v["text"] for k, v in answers(r).items())
    drafted, kept = total(r, "drafted"), total(r, "accepted")
    kept_s = f"{kept} of {drafted} ({kept / drafted:.0%})" if drafted else "-"
    print(f"| {m} | {a['answers.decode_tok_per_s_p50']:.1f} | {kept_s} | "
          f"{a['answers.answer_ms_mean'] / 1e3:.1f} s | {same} of {len(base)} |")
PY
