#!/usr/bin/env bash
# Installs what rag needs to build, with apt-get: nothing else. The models come from the built
# binary (`rag models fetch`, or `make models` in this checkout), the one fetcher.
#
#   scripts/setup.sh            cmake, libclang, protobuf and strace (apt)
#   scripts/setup.sh --browser  also Debian's chromium and chromium-driver, for the web page's
#                               browser test (make test)
#   scripts/setup.sh --gpu=vulkan  also what llama.cpp's Vulkan backend builds with (glslc, the
#                               Vulkan loader and headers, SPIR-V headers) and Mesa's Vulkan
#                               drivers (lavapipe, a Vulkan device on the CPU, for make test-gpu);
#                               prints VULKAN_SDK=DIR where the system's headers are too old
#   scripts/setup.sh --gpu=cuda    CUDA's compiler, runtime and cuBLAS from NVIDIA's PyPI wheels
#                               into ~/.cache/rag/cuda; prints CUDA_PATH=DIR (docs/gpu.md)
#
# Idempotent: a package already installed is not reinstalled.
set -euo pipefail

browser=0
gpu=""
for arg in "$@"; do
  case $arg in
    --browser) browser=1 ;;
    --gpu=vulkan|--gpu=cuda) gpu=${arg#--gpu=} ;;
    --gpu=*) echo "setup.sh: $arg: the GPU builds are --gpu=vulkan and --gpu=cuda" >&2; exit 2 ;;
    -h|--help) sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    --small|--minimal|--medium|--large|--user)
      echo "setup.sh: $arg: the models are no longer fetched here; run \`make models FETCH_FLAGS=$arg\` or \`rag models fetch $arg\`" >&2
      exit 2 ;;
    *) echo "setup.sh: unknown argument '$arg' (try --help)" >&2; exit 2 ;;
  esac
done

say() { printf 'setup: %s\n' "$*" >&2; }
die() { printf 'setup: error: %s\n' "$*" >&2; exit 1; }

# cmake + libclang: llama-cpp-sys-2 builds llama.cpp and generates bindings with bindgen.
# protobuf: lance compiles its .proto files at build time.
# strace: the power-loss test (tests/cli/faults.rs) reads the system calls of an ingest.
apt_packages=(cmake libclang-dev protobuf-compiler libprotobuf-dev strace)
# chromium + chromedriver: the web page of `rag serve`, tested in a real browser (tests/cli/browser.rs).
((browser)) && apt_packages+=(chromium chromium-driver)
# llama.cpp's Vulkan backend: glslc compiles its shaders, the loader links, ggml-vulkan finds
# SPIR-V's headers with CMake; mesa-vulkan-drivers is lavapipe, the device make test-gpu uses.
[ "$gpu" = vulkan ] && apt_packages+=(glslc libvulkan-dev spirv-headers mesa-vulkan-drivers vulkan-tools)
missing=()
for p in "${apt_packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  command -v apt-get >/dev/null || die "missing packages ${missing[*]} and no apt-get: install them with your package manager"
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  say "installing ${missing[*]}"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
else
  say "build tools present"
fi

case $gpu in
  vulkan) exec "$(dirname "$0")/gpu/vulkan.sh" ;;
  cuda) exec "$(dirname "$0")/gpu/cuda.sh" ;;
esac
