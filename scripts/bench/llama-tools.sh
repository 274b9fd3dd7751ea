#!/usr/bin/env bash
# Builds llama.cpp's own llama-bench and llama-quantize against the very llama.cpp tree rag
# links, and prints the folder that holds them. scripts/bench/bench_format.sh uses them to compare
# rag's prefill and decode with llama-bench on one GGUF file, and to requantize the 1.5B.
#
#   scripts/bench/llama-tools.sh            # ggml compiled as rag compiles it here (the options
#                                     # scripts/ggml-flags.sh prints for this CPU)
#   scripts/bench/llama-tools.sh portable   # ggml for any x86-64 with AVX2 (PORTABLE=1 builds)
#   scripts/bench/llama-tools.sh native     # ggml compiled for this CPU (llama.cpp's own default)
#   scripts/bench/llama-tools.sh vulkan     # rag's CPU options plus the Vulkan backend (needs what
#                                     # scripts/gpu/vulkan.sh gives; scripts/bench/bench_gpu.sh)
#   scripts/bench/llama-tools.sh cuda       # rag's CPU options plus the CUDA backend (scripts/gpu/cuda.sh)
#
# The kernels, llama and common libraries come from the tree llama-cpp-sys-2 vendors (found
# through `cargo metadata`: the same version as rag's). That crate ships the tools' folders
# without their sources, so the two tools' sources are grafted from llama-cpp-python's
# source distribution, fetched from PyPI by pip by package name (a user's pip mirror and
# proxy apply). rag's build leaves GGML_NATIVE off (llama-cpp-sys-2 turns it on only with
# -C target-cpu=native), which gives ggml's portable x86-64 set: AVX2, FMA, F16C, no AVX-512,
# plus what scripts/ggml-flags.sh adds for this CPU; the `native` flavour is llama.cpp's own
# CPU-specific build.
set -euo pipefail

sdist_version=0.3.36
flavour=${1:-rag}
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
extra=()
gpu=""
case $flavour in
  vulkan) gpu=-DGGML_VULKAN=ON ;;
  cuda) gpu=-DGGML_CUDA=ON ;;
esac
[ -n "$gpu" ] && flavour=rag
case $flavour in
  rag) native=OFF; mapfile -t opts < <("$root/scripts/ggml-flags.sh")
    [ -n "$gpu" ] && opts+=("${gpu#-D}")
    for o in "${opts[@]}"; do extra+=("-D$o"); done
    # The folder names the options, so a build for other options is not taken for this one.
    [ ${#opts[@]} -eq 0 ] || flavour=rag-$(printf '%s\n' "${opts[@]}" | md5sum | cut -c1-8) ;;
  portable) native=OFF ;;
  native) native=ON ;;
  *) echo "llama-tools: unknown flavour '$flavour' (use rag, portable or native)" >&2; exit 2 ;;
esac
home=${RAG_CACHE:-$HOME/.cache/rag}/llama-tools
say() { echo "llama-tools: $*" >&2; }
command -v cmake >/dev/null || { say "cmake is missing: run scripts/setup.sh first"; exit 1; }

manifest=$(cd "$root" && cargo metadata --locked --format-version 1 | python3 -c '
import json, sys
meta = json.load(sys.stdin)
print(next(p["manifest_path"] for p in meta["packages"] if p["name"] == "llama-cpp-sys-2"))')
crate=$(dirname "$manifest")
version=$(basename "$crate")
out=$home/$version-$flavour
if [[ -x $out/bin/llama-bench && -x $out/bin/llama-quantize ]]; then
  echo "$out/bin"
  exit 0
fi
mkdir -p "$home"

# The tools' sources: llama-cpp-python's sdist, which vendors a whole llama.cpp.
tools=$home/tools-$sdist_version
if [[ ! -f $tools/.complete ]]; then
  say "fetching llama-cpp-python $sdist_version's source with pip (for the tools' sources)"
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  "$root/scripts/test/llama-sdist.sh" "$sdist_version" "$tmp/llama_cpp_python-$sdist_version.tar.gz"
  tar -xzf "$tmp"/llama_cpp_python-"$sdist_version".tar.gz -C "$tmp"
  rm -rf "$tools" && mkdir -p "$tools"
  cp -r "$tmp/llama_cpp_python-$sdist_version/vendor/llama.cpp/tools/"{llama-bench,quantize} "$tools/"
  touch "$tools/.complete"
fi

# A copy of the crate's tree with only the two tools under tools/.
src=$out/src
rm -rf "$src" "$out/build" && mkdir -p "$out"
cp -r "$crate/llama.cpp" "$src"
rm -rf "$src/tools" && mkdir -p "$src/tools"
cp -r "$tools/llama-bench" "$tools/quantize" "$src/tools/"
printf 'llama_add_compile_flags()\nadd_subdirectory(llama-bench)\nadd_subdirectory(quantize)\n' \
  >"$src/tools/CMakeLists.txt"

say "building llama-bench and llama-quantize on $version's llama.cpp ($flavour) into $out"
cmake -S "$src" -B "$out/build" -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=$native \
  -DGGML_OPENMP=ON -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF \
  -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_TOOLS=ON \
  -DLLAMA_BUILD_APP=OFF -DBUILD_SHARED_LIBS=OFF "${extra[@]}" >"$out.log" 2>&1 \
  || { say "cmake configure failed: see $out.log"; exit 1; }
cmake --build "$out/build" --target llama-bench llama-quantize -j "${JOBS:-$(nproc)}" >>"$out.log" 2>&1 \
  || { say "build failed: see $out.log"; exit 1; }
mkdir -p "$out/bin"
cp "$out/build/bin/llama-bench" "$out/build/bin/llama-quantize" "$out/bin/"
echo "$out/bin"
