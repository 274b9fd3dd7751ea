#!/usr/bin/env bash
# Installs moto's S3-compatible server from PyPI into its own virtual environment and prints
# the path of its `moto_server` program. The object-storage tests (`make test-remote`) start it
# on 127.0.0.1 and keep an index in a bucket there.
#
#   scripts/test/s3-server.sh            # install if needed, print the program's path
#
# Why moto: a pip install from PyPI (reachable here, unlike GitHub releases), seconds to set up,
# and it implements what LanceDB's commits rely on: conditional writes (If-None-Match) on
# PutObject and on completing multipart uploads. RustFS from crates.io would be a second
# 20-minute Rust build. Pinned so the server's behaviour is the same from run to run.
set -euo pipefail

version=5.2.5
home=${RAG_CACHE:-$HOME/.cache/rag}/moto-$version
bin=$home/bin/moto_server
say() { echo "s3-server: $*" >&2; }

# The stamp is written last, so an interrupted install is redone rather than half used.
if [[ -f $home/.installed ]]; then
  echo "$bin"
  exit 0
fi
say "installing moto[server] $version into $home"
# Debian's own python3 ships venv (with ensurepip) as a separate package.
if ! python3 -c 'import ensurepip, venv' 2>/dev/null; then
  command -v apt-get >/dev/null || { say "python3's venv module is missing: install python3-venv"; exit 1; }
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  say "installing python3-venv"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq python3-venv >/dev/null
fi
rm -rf "$home"
python3 -m venv "$home"
"$home/bin/pip" install -q --disable-pip-version-check "moto[server]==$version" >&2
touch "$home/.installed"
say "installed $bin"
echo "$bin"
