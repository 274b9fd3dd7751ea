#!/usr/bin/env python3
"""How often a question's packed context repeats chunks an earlier question packed: the
ceiling on what per-chunk KV reuse could save (#24). Packs every question of the eval files
in order with `rag ask --dry-run` (no generation) and reads the <source> tags of each prompt.

Usage: chunk_reuse.py RAG PROJECT MODEL FILE.yaml...   (PROJECT holds the ingested corpus)
Prints one line per file and one for all of them in order: questions that reuse at least one
earlier chunk, and the share of packed source characters already packed before.
"""
import re, subprocess, sys

rag, proj, model, files = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
tag = re.compile(r'<source id="S\d+" path="([^"]*)" lines="([^"]*)"[^>]*>\n(.*?)</source>', re.S)


def questions(path):
    return [l.split("question:", 1)[1].strip().strip('"') for l in open(path) if l.strip().startswith("question:")]


def packed(q):
    out = subprocess.run([rag, "-q", "ask", "--dry-run", "--model", model, q], cwd=proj, capture_output=True, text=True).stdout
    return [((p, lines), len(text)) for p, lines, text in tag.findall(out)]


seen, total = set(), {"q": 0, "reuse_q": 0, "chars": 0, "reused_chars": 0}
for f in files:
    part = {"q": 0, "reuse_q": 0, "chars": 0, "reused_chars": 0}
    for q in questions(f):
        srcs = packed(q)
        again = [n for key, n in srcs if key in seen]
        for d in (part, total):
            d["q"] += 1
            d["reuse_q"] += bool(again)
            d["chars"] += sum(n for _, n in srcs)
            d["reused_chars"] += sum(again)
        seen.update(key for key, _ in srcs)
    print(f"{f}: {part['reuse_q']} of {part['q']} questions reuse an earlier chunk; {part['reused_chars'] / max(1, part['chars']):.1%} of packed source text was packed before")
print(f"all, in order: {total['reuse_q']} of {total['q']} questions; {total['reused_chars'] / max(1, total['chars']):.1%} of packed source text")
