#!/usr/bin/env bash
# Fetches a third dev-set corpus for `rag eval`: the Bash reference manual from Debian's
# bash-doc package (the Info manual, usr/share/info/bash.info.gz), a real manual nobody on this
# project wrote. The manual is one big document, so it is split into one plain-text file per
# Info node (section), named after the node with spaces as dashes (Shell-Parameter-Expansion.txt),
# so that a question's expected source names a section. Writes it to $1 (default
# $HOME/.cache/rag/eval/bash-doc) once; a later run with the folder present does nothing.
#
# Left out: the tag table and indirect tables, the index nodes (Indexes, Builtin Index,
# Reserved Word Index, Variable Index, Function Index, Concept Index: lists of links) and the
# GNU Free Documentation License.
set -euo pipefail

dest=${1:-$HOME/.cache/rag/eval/bash-doc}
[ -f "$dest/.complete" ] && exit 0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
say() { printf 'devset: %s\n' "$*" >&2; }
"$(dirname "${BASH_SOURCE[0]}")/deb-extract.sh" bash-doc "$tmp/x"
src=$tmp/x/usr/share/info/bash.info.gz
[ -f "$src" ] || { say "error: bash-doc has no usr/share/info/bash.info.gz"; exit 1; }
rm -rf "$dest.part"
mkdir -p "$dest.part"
python3 - "$src" "$dest.part" <<'EOF'
import gzip, re, sys

src, out = sys.argv[1], sys.argv[2]
text = gzip.open(src, "rt", encoding="utf-8", errors="replace").read()
seen = set()
# Nodes follow a line holding only \x1f; the next line is the header:
# "File: bash.info,  Node: NAME,  Next: ...,  Prev: ...,  Up: ...".
for block in text.split("\x1f\n")[1:]:
    header, _, body = block.partition("\n")
    m = re.search(r"\bNode: ([^,\t]+)", header)
    if not header.startswith("File:") or not m:
        continue  # "Tag Table:", "Indirect:", "End Tag Table", ...
    node = m.group(1).strip()
    if node.endswith(("Index", "Indexes")) or node == "GNU Free Documentation License":
        continue
    name = re.sub(r"[^A-Za-z0-9_.-]", "", node.replace(" ", "-"))
    if not name or name in seen:
        sys.exit(f"devset: error: node {node!r} gives an empty or repeated file name")
    seen.add(name)
    with open(f"{out}/{name}.txt", "w", encoding="utf-8") as f:
        f.write(body.strip("\n") + "\n")
EOF
touch "$dest.part/.complete"
rm -rf "$dest"
mv "$dest.part" "$dest"
say "$(find "$dest" -name '*.txt' | wc -l) sections in $dest"
