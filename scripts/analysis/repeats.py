#!/usr/bin/env python3
"""Counts repeated sentences in the answers of saved `rag eval --answers --save-json` runs.

    python3 scripts/analysis/repeats.py RUN.json [RUN.json ...]

A sentence repeats when, after normalisation (lower case, words only, citation markers and
list numbers left out), it has three words or more and either says the same words as an
earlier sentence of the answer, or holds a stretch of 6 words said earlier in the answer
(its own earlier words included): stricter than the guard's 8 words. This is an independent count of what rag's loop guard is
meant to prevent, so it can be run on answers from any build, before and after a change.
Prints one row per file: answers, sentences that say the same words as an earlier one per
answer, sentences that repeat either way per answer, answers with a repeat, keywords, and the
stop reasons when the run recorded them.

A second table is about the answers a repetition stop ended (#43): how many, how many of
those had already stated every key string, and how many had a key string only in the text
the stop left out (`dropped_text`), which is what ending the answer cost; and how many
answers dropped a repeated sentence and went on (`repeats_dropped`, recorded since #43).
The key strings are read from the case file the run names.
"""
import json
import os
import re
import sys
from collections import Counter

import yaml

STRETCH = 6


def sentences(text):
    # A sentence ends at . ! ? before whitespace, or at a line end.
    return [s for s in re.split(r"(?<=[.!?])\s+|\n+", text) if s.strip()]


def words(sentence):
    w = [x for x in re.findall(r"[0-9a-z]+", sentence.lower()) if not re.fullmatch(r"s\d+", x)]
    while w and w[0].isdigit():
        w.pop(0)
    return w


def runs(ws, n=STRETCH):
    return {tuple(ws[i:i + n]) for i in range(len(ws) - n + 1)}


def repeats(text, stretches=True):
    """Sentences that repeat: the same words as an earlier one, or (with `stretches`) a
    stretch of STRETCH words said before."""
    seen_sentences, seen_runs, count = set(), set(), 0
    for s in sentences(text):
        w = words(s)
        if len(w) < 3:
            continue
        own = set()
        repeated = tuple(w) in seen_sentences
        for i in range(len(w) - STRETCH + 1):
            r = tuple(w[i:i + STRETCH])
            if stretches and (r in seen_runs or r in own):
                repeated = True
            own.add(r)
        count += repeated
        seen_sentences.add(tuple(w))
        seen_runs |= own
    return count


def main(paths):
    print("| run | answers | sentences said twice / answer | repeating either way (same words or a 6-word stretch) / answer | answers with either | keywords | stops |")
    print("|---|---|---|---|---|---|---|")
    for path in paths:
        with open(path) as f:
            run = json.load(f)
        answers = [r["answer"] for r in run["results"] if r.get("answer") and not r["answer"]["abstained"]]
        same = [repeats(a["text"], stretches=False) for a in answers]
        reps = [repeats(a["text"]) for a in answers]
        kw = [a["keywords"] for a in answers if a.get("keywords") is not None]
        stops = Counter(a.get("stop") or "not recorded" for a in answers)
        n = max(len(answers), 1)
        print(
            f"| {path} | {len(answers)} | {sum(same) / n:.3f} | {sum(reps) / n:.3f} | {sum(1 for r in reps if r)} "
            f"| {run.get('answers', {}).get('keywords')} | "
            + ", ".join(f"{k} {v}" for k, v in sorted(stops.items()))
            + " |"
        )



def norm(text):
    return " ".join(text.split()).lower()


def has_all(text, needles):
    return all(norm(n) in norm(text) for n in needles)


def stops(paths):
    print()
    print("| run | answers | repetition stops | of them, key strings already stated | key strings only in the dropped text | answers that dropped a repeat and went on |")
    print("|---|---|---|---|---|---|")
    for path in paths:
        with open(path) as f:
            run = json.load(f)
        case_file = run.get("file", "")
        if not os.path.exists(case_file):
            print(f"| {path} | case file {case_file!r} not found | | | | |")
            continue
        with open(case_file) as f:
            strings = {c["id"]: c.get("answer_contains") or [] for c in yaml.safe_load(f)}
        answered = [r for r in run["results"] if r.get("answer") and not r["answer"]["abstained"]]
        stopped = [r for r in answered if r["answer"].get("stop") == "repetition"]
        stated = lost = 0
        for r in stopped:
            need, a = strings.get(r["id"], []), r["answer"]
            if not need:
                continue
            if has_all(a["text"], need):
                stated += 1
            elif has_all(a["text"] + " " + a.get("dropped_text", ""), need):
                lost += 1
        went_on = sum(1 for r in answered if r["answer"].get("repeats_dropped", 0) > 0)
        n = max(len(answered), 1)
        print(f"| {path} | {len(answered)} | {len(stopped)} ({len(stopped) / n:.0%}) | {stated} | {lost} | {went_on} |")


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    main(sys.argv[1:])
    stops(sys.argv[1:])
