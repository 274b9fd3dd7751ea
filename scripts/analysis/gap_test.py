#!/usr/bin/env python3
"""Is a tuning/held-out gap in keywords evidence of tuning, or the luck of the draw? (#43)

    python3 scripts/analysis/gap_test.py TAG [TAG ...]      e.g. k4

For each set, and for the three sets pooled, from saved answered runs (PART-TAG.json, as
scripts/analysis/sets_table.py reads them; the first tag that has a part is used):
- keywords of the tuning parts (dev, dev2) and of the held-out parts (heldout, heldout2);
- p: a permutation test. The cases of both sides are pooled and split at random into two
  parts of the same sizes, 20,000 times (a fixed seed: the same runs print the same table).
  p is the share of splits whose gap is at least the one measured. A small p (under 0.05)
  says the gap is unlikely to come from which questions landed where;
- within 0.05: the share of those random splits, made with no tuning at all, whose gap is
  within 0.05. It is what the goal "held-out within 0.05 of dev" can hope for at these sizes.

The same is printed for dev against heldout (the pair the goal names) and for dev2 against
heldout2 (two parts written alike and never tuned on).
"""
import os
import random
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sets_table import SETS, load  # noqa: E402

SPLITS = 20_000
# dev2 and heldout2 were written alike (little-used pages) after every default was picked,
# and neither was tuned on: their gap is what two parts differ by with no tuning at all.
PAIRS = (
    ("dev vs heldout", (("dev",), ("heldout",))),
    ("dev2 vs heldout2", (("dev2",), ("heldout2",))),
    ("tuning vs held-out", (("dev", "dev2"), ("heldout", "heldout2"))),
)


def keywords(project, parts, tags):
    """Each answered case's keywords (1 or 0) over `parts`, from the first tag that has each."""
    out = []
    for part in parts:
        run = next((r for r in (load(project, part, t) for t in tags) if r), None)
        if run is None:
            continue
        out += [int(bool(r["answer"]["keywords"])) for r in run["results"]
                if r.get("answer") and r["answer"].get("keywords") is not None]
    return out


def test(a, b):
    """(gap, p, share of random splits within 0.05) for two lists of 0/1 outcomes. Each test
    has its own seeded generator, so a row does not depend on the rows before it."""
    rng = random.Random(43)
    gap = sum(a) / len(a) - sum(b) / len(b)
    pool = a + b
    at_least = within = 0
    for _ in range(SPLITS):
        rng.shuffle(pool)
        g = sum(pool[: len(a)]) / len(a) - sum(pool[len(a):]) / len(b)
        at_least += abs(g) >= abs(gap) - 1e-12
        within += abs(g) <= 0.05 + 1e-12
    return gap, at_least / SPLITS, within / SPLITS


def main(tags):
    head = ["set", "compared", "cases", "keywords", "gap", "p (random split)", "random splits within 0.05"]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    pooled = {}
    for name, project in SETS:
        shown = None
        for key, (left, right) in PAIRS:
            a, b = keywords(project, left, tags), keywords(project, right, tags)
            if not a or not b:
                continue
            pooled.setdefault(key, ([], []))
            pooled[key][0].extend(a)
            pooled[key][1].extend(b)
            if key == "tuning vs held-out" and (len(a), len(b)) == shown:
                continue  # no dev2 or heldout2 run: the same cases as the row above
            shown = (len(a), len(b))
            print_row(name, key, a, b)
    for key, _ in PAIRS:
        if key not in pooled:
            continue
        a, b = pooled[key]
        print_row("**all sets**", key, a, b)


def print_row(name, key, a, b):
    gap, p, within = test(a, b)
    print(f"| {name} | {key} | {len(a)} / {len(b)} | {sum(a) / len(a):.3f} / {sum(b) / len(b):.3f} "
          f"| {gap:+.3f} | {p:.2f} | {within:.0%} |")


if __name__ == "__main__":
    if len(sys.argv) < 2 or sys.argv[1] in ("-h", "--help"):
        print(__doc__.strip())
        sys.exit(0 if len(sys.argv) > 1 else 2)
    main(sys.argv[1:])
