#!/usr/bin/env bash
# Fetches the second dev-set corpus for `rag eval` (eval/python/): the Python 3.11
# documentation from Debian's python3.11-doc package, as its reStructuredText sources
# (html/_sources/, the .rst.txt files Sphinx ships), a real manual nobody on this project
# wrote. Only the tutorial/, howto/, faq/ and library/ folders are kept, in their folder
# structure, each NAME.rst.txt renamed NAME.rst (rag parses .rst as reST). Writes it to $1
# (default $HOME/.cache/rag/eval/python-doc) once; a later run with the folder present does
# nothing.
#
# Left out of library/, to keep the corpus near 6 MB (all of it is about 7.5 MB): the modules
# the manual itself lists as superseded (superseded.rst) plus 2to3 and distutils; CPython's own
# regression-test package (test); the Tk GUI family (tk, tkinter*, dialog, turtle, idle);
# curses*; the email.* subpages (email.rst, the overview, stays) and mailbox; the XML DOM, SAX
# and expat pages (xml.etree.elementtree and xml.rst stay) and xmlrpc*; the Windows-only
# msvcrt, winreg and winsound; the language-service internals (ast, symtable, token, tokenize,
# tabnanny, pyclbr, dis, pickletools); ctypes; the old protocol clients ftplib, imaplib and
# poplib, plus wsgiref and http.cookiejar; the terminal internals termios, tty and pty; and
# the index-only pages audit_events, asyncio-api-index and asyncio-llapi-index.
set -euo pipefail

dest=${1:-$HOME/.cache/rag/eval/python-doc}
[ -f "$dest/.complete" ] && exit 0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
say() { printf 'devset: %s\n' "$*" >&2; }
"$(dirname "${BASH_SOURCE[0]}")/deb-extract.sh" python3.11-doc "$tmp/x"
src=$tmp/x/usr/share/doc/python3.11/html/_sources
skip() {
  case $1 in
    library/2to3 | library/distutils | library/test | \
    library/aifc | library/asynchat | library/asyncore | library/audioop | library/cgi | \
    library/cgitb | library/chunk | library/crypt | library/imghdr | library/imp | \
    library/mailcap | library/msilib | library/nis | library/nntplib | library/optparse | \
    library/ossaudiodev | library/pipes | library/smtpd | library/sndhdr | library/spwd | \
    library/sunau | library/telnetlib | library/uu | library/xdrlib | \
    library/tk | library/tkinter | library/tkinter.* | library/dialog | library/turtle | \
    library/idle | library/curses | library/curses.* | library/email.* | library/mailbox | \
    library/xml.dom | library/xml.dom.* | library/xml.sax | library/xml.sax.* | \
    library/pyexpat | library/xmlrpc | library/xmlrpc.* | \
    library/msvcrt | library/winreg | library/winsound | \
    library/ast | library/symtable | library/token | library/tokenize | library/tabnanny | \
    library/pyclbr | library/dis | library/pickletools | library/ctypes | \
    library/ftplib | library/imaplib | library/poplib | library/wsgiref | \
    library/http.cookiejar | library/termios | library/tty | library/pty | \
    library/audit_events | library/asyncio-api-index | library/asyncio-llapi-index) return 0 ;;
  esac
  return 1
}
rm -rf "$dest.part"
mkdir -p "$dest.part"
(cd "$src" && find tutorial howto faq library -type f -name '*.rst.txt') | LC_ALL=C sort |
  while read -r f; do
    page=${f%.rst.txt}
    skip "$page" && continue
    mkdir -p "$dest.part/$(dirname "$page")"
    cp "$src/$f" "$dest.part/$page.rst"
  done
touch "$dest.part/.complete"
rm -rf "$dest"
mv "$dest.part" "$dest"
say "$(find "$dest" -name '*.rst' | wc -l) pages in $dest"
