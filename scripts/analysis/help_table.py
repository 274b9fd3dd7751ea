#!/usr/bin/env python3
"""The generators' help to retrieval (#55), from saved `make eval` runs: per set and part,
and pooled over the tuning parts and the held-out parts, for each run tag beside a base run:
hit@1, hit@5, context recall, the help's mean seconds per question, and how many questions
gained or lost the answer's strings in their packed context against the base run.

    TAG=off make eval; EVAL_ARGS=--expand TAG=expand make eval; …
    python3 scripts/analysis/help_table.py off expand rerank both

The first tag is the base. Reads the runs where scripts/analysis/sets_table.py does.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sets_table import GROUPS, PARTS, SETS, fmt, load  # noqa: E402


def figures(runs, base_runs):
    cases = [r for run in runs for r in run["results"]]
    base = {(i, r["id"]): r for i, run in enumerate(base_runs) for r in run["results"]}
    ret = [(i, r["id"], r["retrieval"]["hybrid"]) for i, run in enumerate(runs) for r in run["results"]]
    n = max(len(ret), 1)
    hit1 = sum(1 for *_, m in ret if m["first_hit"] == 1) / n
    hit5 = sum(1 for *_, m in ret if m["first_hit"] and m["first_hit"] <= 5) / n
    recall = [m["context_has_answer"] for *_, m in ret if m["context_has_answer"] is not None]
    help_ms = [m["helped"]["expand_ms"] + m["helped"]["rerank_ms"] for *_, m in ret if m.get("helped")]
    gained = lost = 0
    for i, cid, m in ret:
        b = base.get((i, cid))
        if b is None or m["context_has_answer"] is None:
            continue
        was, now = b["retrieval"]["hybrid"]["context_has_answer"], m["context_has_answer"]
        gained += bool(now and not was)
        lost += bool(was and not now)
    return [str(len(cases)), fmt(hit1), fmt(hit5), fmt(sum(recall) / max(len(recall), 1)),
            f"{sum(help_ms) / len(help_ms) / 1e3:.2f} s" if help_ms else "–", str(gained), str(lost)]


def main(tags):
    head = ["set / part", "run", "cases", "hit@1", "hit@5", "context recall",
            "help per question", "contexts gained", "contexts lost"]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    pooled = {}
    for name, project in SETS:
        for part in PARTS:
            base = load(project, part, tags[0])
            if base is None:
                continue
            for tag in tags:
                run = load(project, part, tag)
                if run is None:
                    continue
                pooled.setdefault((part, tag), []).append((run, base))
                print(f"| {name} {part} | {tag} | " + " | ".join(figures([run], [base])) + " |")
    for group, parts in GROUPS:
        for tag in tags:
            pairs = [p for part in parts for p in pooled.get((part, tag), [])]
            if pairs:
                runs, bases = zip(*pairs)
                print(f"| **every {group} part** | {tag} | " + " | ".join(figures(runs, bases)) + " |")


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    main(sys.argv[1:])
