#!/usr/bin/env bash
# Downloads Debian package PACKAGE by name with `apt-get download` (so the machine's apt
# sources, mirror and proxy apply; an `apt-get update` first when the lists are stale) and
# unpacks its files into DIR. The dev-set scripts (devset*.sh) share it.
#
#   scripts/eval/deb-extract.sh PACKAGE DIR
set -euo pipefail
[ $# -eq 2 ] || { echo "usage: scripts/eval/deb-extract.sh PACKAGE DIR" >&2; exit 2; }
pkg=$1 out=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
printf 'devset: fetching %s with apt-get download\n' "$pkg" >&2
(cd "$tmp" && apt-get download "$pkg" >/dev/null 2>&1) \
  || { apt-get update -qq && (cd "$tmp" && apt-get download "$pkg" >/dev/null); } \
  || { printf 'devset: error: apt-get could not download %s (is Debian'"'"'s archive reachable?)\n' "$pkg" >&2; exit 1; }
mkdir -p "$out"
dpkg-deb -x "$tmp/${pkg}"_*.deb "$out"
