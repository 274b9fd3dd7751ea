#!/usr/bin/env bash
# Prints the ggml build options (NAME=VALUE, one per line) for the CPU this runs on; the
# Makefile exports them to cargo, and llama-cpp-sys-2's build script hands every GGML_*
# variable to llama.cpp's CMake.
#
#   scripts/ggml-flags.sh                 # the options, for `export $(scripts/ggml-flags.sh)`
#   scripts/ggml-flags.sh --sync DIR      # make cargo target DIR rebuild llama.cpp if its
#                                         # llama.cpp was configured with other options
#
# Why: rag's Rust code is built for the portable x86-64 baseline, so llama-cpp-sys-2 leaves
# GGML_NATIVE off and ggml gets AVX2, FMA and F16C at most. On a CPU with AVX-512 that leaves
# most of prefill's arithmetic unused: for the 1.5B on this project's 2-core Xeon, llama.cpp
# prefills 800 tokens at 66 tok/s with the portable build and 131 with AVX-512 and
# weight repacking off (with AVX-512, llama.cpp's repacked Q4_K kernels are slower here than
# ggml's plain dot products: 83 against 129 tok/s; docs/benchmarks.md has the table).
#
# The binary then runs only on CPUs with these extensions: PORTABLE=1 prints nothing, for a
# build meant for other machines (not RAG_*: rag refuses RAG_* variables it does not know,
# and make hands this one to the tests it runs).
set -euo pipefail

flags() {
  [ "${PORTABLE:-0}" = 1 ] && return 0
  [ -r /proc/cpuinfo ] || return 0
  local f have
  have=" $(grep -m1 '^flags' /proc/cpuinfo | cut -d: -f2) "
  # ggml's AVX-512 set is F, CD, VL, DQ and BW together (-mavx512f … -mavx512bw).
  for f in avx512f avx512cd avx512vl avx512dq avx512bw; do
    [[ $have == *" $f "* ]] || return 0
  done
  echo GGML_AVX512=ON
  if [[ $have == *" avx512_vnni "* ]]; then echo GGML_AVX512_VNNI=ON; fi
  if [[ $have == *" avx512vbmi "* ]]; then echo GGML_AVX512_VBMI=ON; fi
  if [[ $have == *" avx512_bf16 "* ]]; then echo GGML_AVX512_BF16=ON; fi
  echo GGML_CPU_REPACK=OFF
}

# llama-cpp-sys-2 configures CMake once per build folder (always_configure(false)) and its
# build script reruns only when a GGML_* variable it saw last time changes: a target folder
# built with other options would keep its old ggml, and cargo does not relink rag when only
# the static libraries under the build folder change. Where the CMake cache disagrees with the
# options wanted, the cache and the crate's fingerprints go: cargo reconfigures and rebuilds
# llama.cpp, then llama-cpp-2 and rag on top of it (minutes, not the hour of a cold build).
sync() {
  local dir=$1 cache want have name hash
  local -A opt=([GGML_AVX512]=OFF [GGML_LLAMAFILE]=ON [GGML_AVX512_VNNI]=OFF [GGML_AVX512_VBMI]=OFF
    [GGML_AVX512_BF16]=OFF [GGML_CPU_REPACK]=ON)
  while IFS== read -r name want; do opt[$name]=$want; done < <(flags)
  for cache in "$dir"/release/build/llama-cpp-sys-2-*/out/build/CMakeCache.txt; do
    [ -f "$cache" ] || continue
    for name in "${!opt[@]}"; do
      have=$(sed -n "s/^$name:BOOL=//p" "$cache")
      if [ "$have" != "${opt[$name]}" ]; then
        hash=$(basename "$(dirname "$(dirname "$(dirname "$cache")")")")
        echo "ggml-flags: $name is $have in $hash, wanted ${opt[$name]}: llama.cpp is rebuilt" >&2
        rm -f "$cache"
        rm -rf "$dir"/release/.fingerprint/llama-cpp-sys-2-*
        break
      fi
    done
  done
}

case ${1:-} in
  --sync) [ -n "${2:-}" ] || { echo "usage: $0 --sync TARGET_DIR" >&2; exit 2; }; sync "$2" ;;
  "") flags ;;
  *) echo "usage: $0 [--sync TARGET_DIR]" >&2; exit 2 ;;
esac
