#!/usr/bin/env python3
"""Routing, replayed from saved runs: what `--model auto` would score and cost with each rule,
without generating anything again (#24). Every answer at temperature 0 is a function of its
question and its generator, so a rule's keywords and answer time are the sum, over the
cases, of the route it picks, read from one `rag eval --answers --save-json` run per route.

Usage: route_table.py [EVAL_DIR ...]   (default ~/.cache/rag/eval: where scripts/eval/eval.sh saves
       PART-MODEL.json for PART dev and heldout; `ANSWERS=1 MODEL=small scripts/eval/eval.sh` and
       MODEL=large, optionally MODEL=medium, make them). Several folders (the SQLite project
       and $EVAL_DIR/python, $EVAL_DIR/bash) are pooled case by case; a part with no small
       and large runs in any folder is left out.

Prints one Markdown table: each rule's keywords and mean answer time on every part, the
share sent to each generator, and keywords and time relative to the large model alone.
Rules: each generator alone; auto on the best retrieved span's cosine similarity (the rule
rag has, `ask/route.rs`: below the threshold the question goes to the bigger model) at
several thresholds; a cascade on the small model's own confidence (the mean probability of
its first 16 tokens, `timings.confidence`): below the threshold its answer is dropped and the
large model answers, at the cost of the small model's prefill and those 16 tokens (estimated
from its first-token time and decode speed) plus the large model's whole answer; and the
oracle (the fastest generator that answers right, when one does): the ceiling no signal can
pass.
"""
import json, os, sys

TIERS = ("small", "medium", "large")


def load(dirs, part):
    """The runs of one part, pooled over the folders that have its small and large runs
    (medium is optional, and then needed in every such folder); cases are keyed by (folder,
    id). None when no folder has them."""
    runs = {}
    for d in dirs:
        found = {}
        for t in TIERS:
            try:
                with open(f"{d}/{part}-{t}.json") as f:
                    found[t] = {(d, r["id"]): r["answer"] for r in json.load(f)["results"] if r.get("answer")}
            except FileNotFoundError:
                pass
        if "small" in found and "large" in found:
            for t, answers in found.items():
                runs.setdefault(t, {}).update(answers)
    if "large" not in runs:
        return None
    ids = [i for i in runs["large"] if all(i in r for r in runs.values())]
    return ids, runs


def ok(a):
    return bool(a["keywords"])


def score(ids, runs, pick):
    """A rule's keywords, mean seconds and shares. `pick` names a tier, or a tuple (tier,
    extra_ms) when the rule spent time on another generator first (a cascade)."""
    chosen = [pick(i, runs) for i in ids]
    tiers = [c[0] if isinstance(c, tuple) else c for c in chosen]
    extra = [c[1] if isinstance(c, tuple) else 0.0 for c in chosen]
    kw = sum(ok(runs[t][i]) for i, t in zip(ids, tiers)) / len(ids)
    secs = sum(runs[t][i]["total_ms"] + x for i, t, x in zip(ids, tiers, extra)) / len(ids) / 1e3
    share = {t: tiers.count(t) / len(ids) for t in TIERS}
    return kw, secs, share


def cascade(threshold):
    def pick(i, runs):
        a = runs["small"][i]
        c = a.get("confidence")
        if c is None or c >= threshold:
            return "small"
        rate = max(a.get("decode_tok_per_s") or 0.0, 1e-9)
        return ("large", a["ttft_ms"] + 15 / rate * 1e3)
    return pick


def fixed(t):
    return lambda i, runs: t


def by_similarity(threshold, bigger):
    def pick(i, runs):
        s = runs["small"][i].get("best_similarity")
        return bigger if s is not None and s < threshold else "small"
    return pick


def oracle(i, runs):
    right = [t for t in TIERS if t in runs and ok(runs[t][i])]
    return min(right, key=lambda t: runs[t][i]["total_ms"]) if right else "small"


def main():
    if sys.argv[1:2] in (["-h"], ["--help"]):
        sys.exit(__doc__)
    dirs = sys.argv[1:] or [os.path.expanduser("~/.cache/rag/eval")]
    data = {p: load(dirs, p) for p in ("dev", "heldout")}
    data = {p: runs for p, runs in data.items() if runs is not None}
    if not data:
        sys.exit(f"route_table: no folder of {dirs} has PART-small.json and PART-large.json")
    parts = [(p, dirs) for p in data]
    have = set.intersection(*(set(runs) for _, runs in data.values()))
    rules = [(f"{t} alone", fixed(t)) for t in TIERS if t in have]
    for bigger in [t for t in ("medium", "large") if t in have]:
        for th in (0.50, 0.55, 0.60, 0.65, 0.70, 0.75):
            rules.append((f"auto: {bigger} below similarity {th:.2f}", by_similarity(th, bigger)))
    for th in (0.5, 0.6, 0.7, 0.8, 0.9):
        rules.append((f"cascade: large when small's confidence < {th:.1f}", cascade(th)))
    rules.append(("oracle (fastest right generator)", oracle))
    head = " | ".join(f"{n} keywords | {n} mean answer s | {n} vs large (keywords, time)" for n, _ in parts)
    print(f"| rule | {head} | share small / medium / large ({parts[0][0]}) |")
    print("|---|" + "---|---|---|" * len(parts) + "---|")
    for label, pick in rules:
        cells, first_share = [], None
        for name, _ in parts:
            ids, runs = data[name]
            kw, secs, share = score(ids, runs, pick)
            lkw, lsecs, _ = score(ids, runs, fixed("large"))
            rel = f"{kw / lkw:.0%}, {secs / lsecs:.0%}" if lkw else f"-, {secs / lsecs:.0%}"
            cells += [f"{kw:.3f}", f"{secs:.1f}", rel]
            first_share = first_share or share
        shares = " / ".join(f"{first_share[t]:.0%}" if t in have else "-" for t in TIERS)
        print(f"| {label} | {' | '.join(cells)} | {shares} |")


if __name__ == "__main__":
    main()
