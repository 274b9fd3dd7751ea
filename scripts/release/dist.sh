#!/usr/bin/env bash
# `make dist`: the release tarball of one build, and its checksum.
#
#   scripts/release/dist.sh BIN OUT
#
# Writes OUT/rag-VERSION-x86_64-unknown-linux-gnu.tar.gz, holding
#   bin/rag                            the binary (already stripped by the release profile)
#   share/man/man1/*.1                 man pages, generated from the real flags
#   share/{bash-completion,zsh,fish}/… completion scripts
#   share/rag/install.sh               scripts/release/install.sh
#   install.sh                         ./install.sh [PREFIX] [--small|--minimal|--large]
#   README.md, LICENSE-MIT, LICENSE-APACHE
# OUT/rag_offline-VERSION-py3-none-manylinux_2_NN_x86_64.whl, the same binary as a PyPI wheel
# (scripts/release/wheel.sh: `pip install` puts rag on PATH and brings ONNX Runtime as the onnxruntime
# package; DIST_WHEEL=0 leaves it out), and OUT/SHA256SUMS of both (`sha256sum -c SHA256SUMS`
# checks a download). The models stay out: install.sh and the user fetch them with
# `rag models fetch`.
#
# What ships is the portable build (`make dist` builds with PORTABLE=1: ggml with AVX2 at most,
# so it starts on any x86-64 CPU with AVX2); a binary built for this CPU's AVX-512 is refused
# unless DIST_NATIVE=1 (the packaging test, which reuses the test build).
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
say() { printf 'dist: %s\n' "$*" >&2; }
die() { printf 'dist: error: %s\n' "$*" >&2; exit 1; }

[ $# -eq 2 ] || die "usage: scripts/release/dist.sh BIN OUT"
bin=$1 out=$2
[ -x "$bin" ] || die "$bin is not an executable: run \`make build PORTABLE=1\` first"
version=$("$bin" --version | sed -n '1s/^rag //p')
[ -n "$version" ] || die "$bin --version does not start with 'rag VERSION'"
if "$bin" --version | grep -q 'AVX512=ON' && [ "${DIST_NATIVE:-0}" != 1 ]; then
  die "$bin is built for this CPU's AVX-512 and would not start on other x86-64 machines: \`make dist\` builds the portable one (PORTABLE=1)"
fi

name=rag-$version-x86_64-unknown-linux-gnu
mkdir -p "$out"
out=$(cd "$out" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
stage=$tmp/$name
mkdir -p "$stage/bin" "$stage/share/rag" "$stage/share/man/man1" \
  "$stage/share/bash-completion/completions" "$stage/share/zsh/site-functions" \
  "$stage/share/fish/vendor_completions.d"
install -m 755 "$bin" "$stage/bin/rag"
"$bin" man "$stage/share/man/man1" >/dev/null 2>&1 || die "$bin man failed"
"$bin" completions bash >"$stage/share/bash-completion/completions/rag"
"$bin" completions zsh >"$stage/share/zsh/site-functions/_rag"
"$bin" completions fish >"$stage/share/fish/vendor_completions.d/rag.fish"
install -m 755 "$root/scripts/release/install.sh" "$stage/share/rag/install.sh"
install -m 755 "$root/scripts/release/release-install.sh" "$stage/install.sh"
install -m 644 "$root/README.md" "$root/LICENSE-MIT" "$root/LICENSE-APACHE" "$stage/"

tarball=$name.tar.gz
say "packing $tarball"
# Owner and times fixed, files in name order: the same build gives the same tarball.
tar -C "$tmp" --sort=name --owner=0 --group=0 --numeric-owner --mtime=@0 -cf - "$name" \
  | gzip -n >"$out/$tarball.part"
mv -f "$out/$tarball.part" "$out/$tarball"
say "wrote $out/$tarball ($(du -m "$out/$tarball" | cut -f1) MB)"
sums=("$tarball")
if [ "${DIST_WHEEL:-1}" != 0 ]; then
  wheel=$("$root/scripts/release/wheel.sh" "$stage" "$version" "$out")
  sums+=("$(basename "$wheel")")
fi
(cd "$out" && sha256sum "${sums[@]}" >SHA256SUMS)
say "wrote $out/SHA256SUMS"
