#!/usr/bin/env python3
"""The generators' help to retrieval (#55), from saved `make eval` runs: per set and part,
and pooled over the tuning parts and the held-out parts, for each run tag beside a base run:
hit@1, hit@5, context recall, the help's mean seconds per question, and how many questions
gained or lost the answer's strings in their packed context against the base run; for runs
with answers (ANSWERS=1) also keywords, false refusals, the share the 1.5B answered, and
first token p50 and whole answer mean, the help's time included (eval retrieves each
question before answering it and the answer reuses what the generators wrote and scored
then; runs saved before answers carried `help_ms` held only the search in their times, and
this adds the help their retrieval spent).

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
    out = [str(len(cases)), fmt(hit1), fmt(hit5), fmt(sum(recall) / max(len(recall), 1)),
           f"{sum(help_ms) / len(help_ms) / 1e3:.2f} s" if help_ms else "–", str(gained), str(lost)]
    return out + answer_figures(cases)


def answer_figures(cases):
    """Keywords, false refusals, the 1.5B's share, first token p50 and whole answer mean (help
    included) over the answered cases; dashes for a retrieval-only run."""
    pairs = [(r["retrieval"]["hybrid"], r["answer"]) for r in cases if r.get("answer")]
    if not pairs:
        return ["–"] * 5
    kw = [a["keywords"] for _, a in pairs if a.get("keywords") is not None]
    answered = [(m, a) for m, a in pairs if not a["abstained"]]
    n = max(len(answered), 1)
    refusals = sum(1 for _, a in answered if a.get("refusal")) / n
    large = sum(1 for _, a in answered if "1.5b" in (a.get("model") or "").lower()) / n

    def help_s(m, a):
        # Runs since answers carry help_ms hold the help in their own times already.
        if "help_ms" in a:
            return 0.0
        h = m.get("helped") or {}
        return (h.get("expand_ms", 0) + h.get("rerank_ms", 0)) / 1e3

    ttft = sorted(a["ttft_ms"] / 1e3 + help_s(m, a) for m, a in answered)
    whole = sum(a["total_ms"] / 1e3 + help_s(m, a) for m, a in answered) / n
    return [fmt(sum(kw) / max(len(kw), 1)), f"{refusals:.0%}", f"{large:.0%}",
            f"{ttft[len(ttft) // 2]:.1f} s" if ttft else "–", f"{whole:.1f} s"]


def main(tags):
    head = ["set / part", "run", "cases", "hit@1", "hit@5", "context recall",
            "help per question", "contexts gained", "contexts lost", "keywords",
            "false refusals", "by the 1.5B", "first token p50", "whole answer mean"]
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
