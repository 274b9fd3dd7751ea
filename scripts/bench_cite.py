#!/usr/bin/env python3
"""Citation quality of `rag ask` on a question set: for each question, ask with --json and
count the answer's citations, how many the checker marks supported, how many name the
file that answers the question, and the sentences left uncited.

Usage: scripts/bench_cite.py RAG_BINARY QUESTIONS.yaml [extra rag ask flags...]
Run it in a folder whose index holds the files the questions name (see scripts/bench.sh).
"""
import json
import subprocess
import sys


def questions(path):
    # The fixture format only: "- question: ..." followed by "  file: ...".
    out, q = [], None
    for line in open(path, encoding="utf-8"):
        line = line.strip()
        if line.startswith("- question:"):
            q = line.split(":", 1)[1].strip()
        elif line.startswith("file:") and q is not None:
            out.append((q, line.split(":", 1)[1].strip()))
            q = None
    return out


def main():
    rag, qfile, extra = sys.argv[1], sys.argv[2], sys.argv[3:]
    rows = []
    for q, want in questions(qfile):
        r = subprocess.run([rag, "ask", "--json", "--no-cache", *extra, q],
                           capture_output=True, text=True)
        if r.returncode not in (0, 6):
            sys.exit(f"rag ask failed ({r.returncode}) on {q!r}: {r.stderr}")
        v = json.loads(r.stdout)
        path = {s["id"]: s["path"] for s in v["sources"]}
        cites = v["citations"]
        rows.append({
            "abstained": v["abstained"],
            "cited": bool(cites),
            "citations": len(cites),
            "supported": sum(c["supported"] for c in cites),
            "right_file": sum(path.get(c["id"]) == want for c in cites),
            "right_answer_cited": any(path.get(c["id"]) == want and c["supported"] for c in cites),
            "added": v.get("added_citations", 0),
            "uncited": len(v.get("uncited_sentences", [])),
            "stop": v.get("stop"),
        })
        print(f"{'A' if v['abstained'] else ' '} {len(cites)} cites "
              f"{rows[-1]['supported']} supported {rows[-1]['right_file']} right file | "
              f"{v['answer'][:110]!r}", file=sys.stderr)
    n = len(rows)
    total = sum(r["citations"] for r in rows)
    summary = {
        "questions": n,
        "abstained": sum(r["abstained"] for r in rows),
        "answers_with_citations": sum(r["cited"] for r in rows),
        "answers_citing_the_right_file_supported": sum(r["right_answer_cited"] for r in rows),
        "citations": total,
        "citations_supported": sum(r["supported"] for r in rows),
        "citations_naming_the_right_file": sum(r["right_file"] for r in rows),
        "citations_added_by_rag": sum(r["added"] for r in rows),
        "uncited_sentences": sum(r["uncited"] for r in rows),
        # How generation ended: end_of_text, or a loop cut (repetition) or max_tokens.
        "stops": {s: sum(str(r["stop"]) == s for r in rows) for s in sorted({str(r["stop"]) for r in rows})},
    }
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
