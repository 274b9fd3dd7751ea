#!/usr/bin/env bash
# Fetches llama-cpp-python's source distribution (which vendors a whole llama.cpp tree) with
# pip, by package name, so a user's index mirror and proxy apply; for llama-server.sh (here)
# and scripts/bench/llama-tools.sh. pip reads an sdist's metadata with its build backend, so
# that backend is installed first into a venv of our own and build isolation is turned off
# (otherwise pip would build the backend from source too, under --no-binary).
#
#   scripts/test/llama-sdist.sh VERSION OUT.tar.gz   # writes OUT.tar.gz, or exits 1 saying why
set -euo pipefail
version=$1 out=$2
venv=${RAG_CACHE:-$HOME/.cache/rag}/sdist-venv
[[ -x $venv/bin/pip ]] || python3 -m venv "$venv"
"$venv/bin/pip" install -q --disable-pip-version-check scikit-build-core >&2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$venv/bin/pip" download -q --disable-pip-version-check --no-deps --no-binary :all: \
  --no-build-isolation "llama-cpp-python==$version" -d "$tmp" >&2 \
  || { echo "llama-sdist: pip could not download llama-cpp-python==$version: check that PyPI is reachable (pip config, proxy)" >&2; exit 1; }
mkdir -p "$(dirname "$out")"
mv "$tmp/llama_cpp_python-$version.tar.gz" "$out.part"
mv "$out.part" "$out"
