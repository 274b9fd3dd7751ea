#!/usr/bin/env bash
# Builds llama.cpp's own OpenAI-compatible server, `llama-server`, from the llama.cpp tree that
# llama-cpp-python's source distribution vendors (PyPI is reachable where model hubs and GitHub
# are not), and prints its path. The remote-backend tests (`make test-remote`) start it on
# 127.0.0.1 with the project's own GGUF models. Built once into ~/.cache/rag/llama-server.
#
#   scripts/test/llama-server.sh            # build if needed, print the binary's path
#
# A pinned sdist keeps the server's API and numerics the same from run to run.
set -euo pipefail

version=0.3.36
home=${RAG_CACHE:-$HOME/.cache/rag}/llama-server
bin=$home/bin/llama-server-$version
say() { echo "llama-server: $*" >&2; }

if [[ -x $bin ]]; then
  echo "$bin"
  exit 0
fi
command -v cmake >/dev/null || { say "cmake is missing: run scripts/setup.sh first"; exit 1; }

src=$home/src
mkdir -p "$src" "$home/bin"
sdist=$src/llama_cpp_python-$version.tar.gz
if [[ ! -s $sdist ]]; then
  say "fetching llama-cpp-python $version's source with pip"
  "$(dirname "${BASH_SOURCE[0]}")/llama-sdist.sh" "$version" "$sdist"
fi
tree=$src/llama_cpp_python-$version/vendor/llama.cpp
[[ -f $tree/CMakeLists.txt ]] || tar -xzf "$sdist" -C "$src"

say "building llama-server (tens of minutes on 2 cores, once)"
cmake -S "$tree" -B "$src/build" -DCMAKE_BUILD_TYPE=Release -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF \
  -DGGML_OPENMP=ON -DGGML_NATIVE=ON -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
  -DBUILD_SHARED_LIBS=OFF >"$src/cmake.log" 2>&1 || { say "cmake failed: see $src/cmake.log"; exit 1; }
cmake --build "$src/build" --target llama-server -j "$(nproc)" >"$src/build.log" 2>&1 \
  || { say "build failed: see $src/build.log"; exit 1; }
cp "$(find "$src/build" -name llama-server -type f -perm -u+x | head -n 1)" "$bin.part"
mv "$bin.part" "$bin"
echo "$bin"
