#!/usr/bin/env python3
"""One table of the three dev sets from saved `make eval` runs (#43): per set and part,
retrieval (hit@1, hit@5, context recall of the packed context) and answers (keywords,
reader, repetition stops, answers that dropped a repeat and went on, first token p50, whole
answer mean), one row per run tag.

    python3 scripts/analysis/sets_table.py TAG [TAG ...]      e.g. before k4 k5

Reads $EVAL_DIR (default ~/.cache/rag/eval): the SQLite project is $EVAL_DIR itself, the
others $EVAL_DIR/python and $EVAL_DIR/bash, each holding PART-TAG.json (scripts/eval/eval.sh
names them so; TAG=… make eval). A missing run is skipped. The last rows pool each part over
the sets, then every tuning part (dev, dev2) and every held-out part (heldout, heldout2)
(every case counts once).
"""
import json
import os
import sys

DIR = os.environ.get("EVAL_DIR", os.path.expanduser("~/.cache/rag/eval"))
SETS = [("sqlite", DIR), ("python", f"{DIR}/python"), ("bash", f"{DIR}/bash")]
PARTS = ("dev", "dev2", "heldout", "heldout2")
# The parts tuned on, and the parts only reported.
GROUPS = (("tuning", ("dev", "dev2")), ("held-out", ("heldout", "heldout2")))


def load(project, part, tag):
    path = f"{project}/{part}-{tag}.json"
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return json.load(f)


def fmt(v, digits=3):
    return "–" if v is None else f"{v:.{digits}f}"


def row(label, runs):
    """Figures over the cases of `runs` (one or more eval reports), pooled case by case."""
    cases = [r for run in runs for r in run["results"]]
    mode = runs[0].get("main_mode", "hybrid")
    ret = [r["retrieval"][mode] for r in cases if mode in r["retrieval"]]
    n = max(len(ret), 1)
    hit1 = sum(1 for m in ret if m["first_hit"] == 1) / n
    hit5 = sum(1 for m in ret if m["first_hit"] and m["first_hit"] <= 5) / n
    recall = [m["context_has_answer"] for m in ret if m["context_has_answer"] is not None]
    answers = [r["answer"] for r in cases if r.get("answer")]
    out = [label, str(len(cases)), fmt(hit1), fmt(hit5), fmt(sum(recall) / max(len(recall), 1))]
    if not answers:
        return out + ["–"] * 6
    kw = [a["keywords"] for a in answers if a.get("keywords") is not None]
    reader = [a["keywords"] for r, a in ((r, r.get("answer")) for r in cases)
              if a and a.get("keywords") is not None and r["retrieval"].get(mode, {}).get("context_has_answer")]
    answered = [a for a in answers if not a["abstained"]]
    m = max(len(answered), 1)
    stops = sum(1 for a in answered if a.get("stop") == "repetition") / m
    went_on = sum(1 for a in answered if a.get("repeats_dropped", 0) > 0) / m
    ttft = sorted(a["ttft_ms"] for a in answered)
    mean_s = sum(a["total_ms"] for a in answered) / m / 1e3
    return out + [
        fmt(sum(kw) / max(len(kw), 1)),
        fmt(sum(reader) / max(len(reader), 1)),
        f"{stops:.0%}",
        f"{went_on:.0%}",
        f"{ttft[len(ttft) // 2] / 1e3:.1f} s" if ttft else "–",
        f"{mean_s:.1f} s",
    ]


def main(tags):
    head = ["set / part / run", "cases", "hit@1", "hit@5", "context recall", "keywords", "reader",
            "repetition stops", "dropped a repeat, went on", "first token p50", "whole answer mean"]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    pooled = {}
    for name, project in SETS:
        for part in PARTS:
            for tag in tags:
                run = load(project, part, tag)
                if run is None:
                    continue
                pooled.setdefault((part, tag), []).append(run)
                print("| " + " | ".join(row(f"{name} {part} {tag}", [run])) + " |")
    for (part, tag), runs in sorted(pooled.items()):
        if len(runs) > 1:
            print("| " + " | ".join(row(f"**all {len(runs)} sets, {part} {tag}**", runs)) + " |")
    for name, parts in GROUPS:
        for tag in tags:
            runs = [r for p in parts for r in pooled.get((p, tag), [])]
            if len(runs) > 1:
                print("| " + " | ".join(row(f"**every {name} part, {tag}**", runs)) + " |")


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    main(sys.argv[1:])
