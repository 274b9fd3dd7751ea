#!/usr/bin/env bash
# What the CUDA build of llama.cpp needs, and the variables that point the build at it.
#
#   scripts/gpu/cuda.sh     prints NAME=VALUE lines for `make build GPU=cuda` to hand to cargo
#
# A CUDA toolkit already installed (CUDA_PATH, or nvcc on PATH, with its static cuBLAS) is
# used as it is: llama-cpp-sys-2 links cuBLAS and the runtime statically into rag.
#
# Otherwise the toolkit comes from NVIDIA's PyPI wheels (CUDA 13: nvcc, cicc, the runtime,
# cuBLAS, CCCL), installed by pip into ~/.cache/rag/cuda (XDG_CACHE_HOME), where they form a
# toolkit's layout (nvidia/cu13/{bin,nvvm,include,lib}). The wheels carry cuBLAS as a shared
# library only and no driver stub, so that build makes llama.cpp's libraries shared
# (LLAMA_BUILD_SHARED_LIBS=1; rag finds them beside itself) and leaves out the CUDA virtual
# memory pool, which needs the driver at link time (GGML_CUDA_NO_VMM=ON).
#
# CUDA_ARCH (default 89: RTX 40xx, L4; 80: A100; 90: H100; a list like "86;89" works) picks
# the GPU generations compiled for: every generation multiplies the compile time.
set -euo pipefail

say() { printf 'cuda: %s\n' "$*" >&2; }
die() { printf 'cuda: error: %s\n' "$*" >&2; exit 1; }
arch=${CUDA_ARCH:-89}

installed=${CUDA_PATH:-$(dirname "$(dirname "$(command -v nvcc 2>/dev/null || echo /nonexistent/bin/nvcc)")")}
if [ -x "$installed/bin/nvcc" ] && ls "$installed"/lib*/libcublas_static.a >/dev/null 2>&1; then
  say "the CUDA toolkit in $installed"
  echo "CUDA_PATH=$installed"
  echo "CUDACXX=$installed/bin/nvcc"
  echo "CUDAARCHS=$arch"
  exit 0
fi

cache=${XDG_CACHE_HOME:-$HOME/.cache}/rag/cuda
cuda=13.5.37
packages=(nvidia-cuda-nvcc==$cuda nvidia-nvvm==$cuda nvidia-cuda-crt==$cuda
  nvidia-cuda-runtime==$cuda nvidia-cublas==13.10.0.20 nvidia-cuda-cccl==13.3.5.0.6)
top=$cache/nvidia/cu13
if [ ! -f "$cache/.complete-$cuda" ]; then
  python=$(command -v python3) || die "python3 with pip is needed to fetch CUDA's wheels"
  say "installing CUDA $cuda's compiler and libraries from PyPI into $cache (about 600 MB)"
  rm -rf "$cache"
  "$python" -m pip install -q --no-deps --target "$cache" "${packages[@]}" \
    || die "pip could not install ${packages[*]}: check pip's index (a mirror: PIP_INDEX_URL)"
  # Unversioned names, as a toolkit has them, for the linker and CMake's FindCUDAToolkit.
  for lib in cudart cublas cublasLt; do
    ln -sf "$(basename "$(ls "$top/lib/lib$lib.so."*[0-9] | head -1)")" "$top/lib/lib$lib.so"
  done
  touch "$cache/.complete-$cuda"
fi
"$top/bin/nvcc" --version >/dev/null || die "$top/bin/nvcc does not run"
say "CUDA $cuda from PyPI in $top, for compute capability $arch"
echo "CUDA_PATH=$top"
echo "CUDACXX=$top/bin/nvcc"
echo "CUDAToolkit_ROOT=$top"
echo "CUDAARCHS=$arch"
echo "LLAMA_BUILD_SHARED_LIBS=1"
echo "GGML_CUDA_NO_VMM=ON"
