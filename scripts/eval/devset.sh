#!/usr/bin/env bash
# Fetches the dev-set corpus for `make eval`: SQLite's own documentation from Debian's
# sqlite3-doc package (the HTML pages of sqlite.org, version 3.40.1), a real manual nobody on
# this project wrote. Writes it to $1 (default $HOME/.cache/rag/eval/sqlite-doc) once; a
# later run with the folder present does nothing.
#
# Left out: index and cross-reference pages (lists of links), the release history, the
# requirements matrix, the one-page C API reference and its per-function pages (c3ref/),
# and fileformat2.html (a byte-for-byte copy of fileformat.html).
set -euo pipefail

dest=${1:-$HOME/.cache/rag/eval/sqlite-doc}
[ -f "$dest/.complete" ] && exit 0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
say() { printf 'devset: %s\n' "$*" >&2; }
"$(dirname "${BASH_SOURCE[0]}")/deb-extract.sh" sqlite3-doc "$tmp/x"
src=$tmp/x/usr/share/doc/sqlite3
rm -rf "$dest.part"
mkdir -p "$dest.part"
for f in "$src"/*.html; do
  name=$(basename "$f")
  case $name in
    doc_*crossref.html | changes.html | chronology.html | news.html | oldnews.html | \
    requirements.html | syntaxdiagrams.html | keyword_index.html | sitemap.html | \
    capi3ref.html | fileformat2.html | index.html | docs.html | doclist.html | sqlite.html) continue ;;
  esac
  cp "$f" "$dest.part/"
done
touch "$dest.part/.complete"
rm -rf "$dest"
mv "$dest.part" "$dest"
say "$(find "$dest" -name '*.html' | wc -l) pages in $dest"
