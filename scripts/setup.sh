#!/usr/bin/env bash
# Installs what rag needs to build, with apt-get: nothing else. The models come from the built
# binary (`rag models fetch`, or `make models` in this checkout), the one fetcher.
#
#   scripts/setup.sh            cmake, libclang, protobuf and strace (apt)
#   scripts/setup.sh --browser  also Debian's chromium and chromium-driver, for the web page's
#                               browser test (make test)
#
# Idempotent: a package already installed is not reinstalled.
set -euo pipefail

browser=0
for arg in "$@"; do
  case $arg in
    --browser) browser=1 ;;
    -h|--help) sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
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
