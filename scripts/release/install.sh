#!/usr/bin/env bash
# `make install` and `make uninstall`.
#
#   scripts/release/install.sh BIN PREFIX [--small|--minimal|--medium|--large] [--from=DIR]   install
#   scripts/release/install.sh --uninstall PREFIX               remove what the install wrote
#
# Install puts the binary in PREFIX/bin, its man pages in PREFIX/share/man/man1, completion
# scripts where bash-completion, zsh and fish look under PREFIX/share, and the models in the
# user's model folder ($XDG_DATA_HOME/rag/models, by default ~/.local/share/rag/models) with
# `rag models fetch` (copying what this checkout's models/ already holds), where rag finds
# them from any folder without a rag.toml. The release tarball (make dist) ships this script
# as share/rag/install.sh, behind its own install.sh. Every
# file it writes, and every folder it had to create, is listed in
# PREFIX/share/rag/installed-files, which uninstall reads: it removes exactly those files,
# then those folders when they are empty, and nothing else (models that were already in the
# model folder before the install stay).
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
say() { printf 'install: %s\n' "$*" >&2; }
die() { printf 'install: error: %s\n' "$*" >&2; exit 1; }

# The user's model folder, as rag and the install find it.
model_folder() {
  case ${XDG_DATA_HOME:-} in /*) echo "$XDG_DATA_HOME/rag/models" ;; *) echo "${HOME:?HOME is not set}/.local/share/rag/models" ;; esac
}

# owned PATH ROOT...: 0 when PATH is an absolute path inside one of the ROOTs with no `.` or
# `..` part, reached from that root without passing through a symbolic link.
owned() {
  local p=$1 root rel cur part
  shift
  case $p/ in */../* | */./* | *//*) return 1 ;; esac
  case $p in /*) ;; *) return 1 ;; esac
  for root in "$@"; do
    case $p in "$root"/?*) ;; *) continue ;; esac
    rel=${p#"$root"/} cur=$root
    while [[ $rel == */* ]]; do
      part=${rel%%/*} rel=${rel#*/} cur=$cur/$part
      [ -L "$cur" ] && return 2
    done
    return 0
  done
  return 1
}

# owned_dir DIR ROOT...: 0 when DIR is a ROOT, inside one (as `owned` says), or one of the
# folders above a ROOT that an install may have made; uninstall only ever rmdirs these.
owned_dir() {
  local d=$1 root
  shift
  case $d/ in /*/ | /) ;; *) return 1 ;; esac
  case $d/ in */../* | */./* | *//*) return 1 ;; esac
  owned "$d/x" "$@" && return 0
  for root in "$@"; do
    [ "$d" = "$root" ] && return 0
    case $root/ in "$d"/*) return 0 ;; esac
  done
  return 1
}

uninstall() {
  local prefix=${1%/} manifest=$1/share/rag/installed-files
  case $prefix in /*) ;; *) die "PREFIX must be an absolute path, not '$prefix'" ;; esac
  if [ ! -f "$manifest" ]; then
    say "nothing to remove: $manifest does not exist (was rag installed with PREFIX=$prefix?)"
    return 0
  fi
  # The roots come from PREFIX and the environment, never from the list itself: an edited
  # list cannot widen what uninstall may remove.
  local roots=("$prefix" "$(model_folder)") line p n=0 dirs=()
  [ -f "$manifest.dirs" ] && mapfile -t dirs <"$manifest.dirs"
  # Every record is checked before anything is removed: one entry outside the folders the
  # install wrote (an edited list, a path through a link) removes nothing at all.
  while IFS= read -r line; do
    case $line in
      file:*) p=${line#file:} ;;
      '') continue ;;
      *) die "$manifest: '$line' is no record install.sh wrote; nothing was removed (fix or delete the list)" ;;
    esac
    owned "$p" "${roots[@]}" || die "$manifest names '$p', which is not inside $prefix or the model folder (or is reached through a link); nothing was removed (remove that line, or the files by hand)"
  done <"$manifest"
  for p in "${dirs[@]}"; do
    [ -z "$p" ] || owned_dir "$p" "${roots[@]}" || die "$manifest.dirs names '$p', outside $prefix and the model folder; nothing was removed"
  done
  # Files first (a link goes as a link; anything not a file or link stays), then folders
  # deepest first, each only when empty.
  while IFS= read -r line; do
    case $line in file:*) p=${line#file:} ;; *) continue ;; esac
    if [ -L "$p" ] || [ -f "$p" ]; then rm -f -- "$p" && n=$((n + 1)); fi
  done <"$manifest"
  rm -f -- "$manifest" "$manifest.dirs"
  local i
  for ((i = ${#dirs[@]} - 1; i >= 0; i--)); do
    p=${dirs[i]}
    [ -n "$p" ] && [ ! -L "$p" ] && { rmdir -- "$p" 2>/dev/null || true; }
  done
  say "removed $n files installed under $prefix and in the model folder"
}

if [ "${1:-}" = --uninstall ]; then
  [ $# -eq 2 ] || die "usage: scripts/release/install.sh --uninstall PREFIX"
  uninstall "$2"
  exit 0
fi
[ $# -ge 2 ] || die "usage: scripts/release/install.sh BIN PREFIX [--small|--minimal|--medium|--large] [--from=DIR]"
bin=$1 prefix=$2
shift 2
[ -x "$bin" ] || die "$bin is not an executable: run \`make build\` first"
case $prefix in /*) ;; *) die "PREFIX must be an absolute path, not '$prefix'" ;; esac

share=$prefix/share
manifest=$share/rag/installed-files
dirs=$manifest.dirs
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
: >"$tmp/dirs"

# Folders are recorded only when this install creates them, so uninstall never removes a
# folder that was there before (~/.local/bin, /usr/local/share/man, …).
mkdirs() { # mkdirs DIR: create DIR and its missing parents, recording each one made
  local d=$1 todo=()
  while [ ! -d "$d" ]; do todo=("$d" "${todo[@]}"); d=$(dirname "$d"); done
  for d in "${todo[@]}"; do mkdir -- "$d" && printf '%s\n' "$d" >>"$tmp/dirs"; done
}
: >"$tmp/files"
put() { # put SRC DEST MODE: install one file and record it
  mkdirs "$(dirname "$2")"
  install -m "$3" -- "$1" "$2"
  printf 'file:%s\n' "$2" >>"$tmp/files"
}

mkdirs "$share/rag"
put "$bin" "$prefix/bin/rag" 755

"$bin" man "$tmp/man" >/dev/null 2>&1 || die "$bin man failed"
for page in "$tmp"/man/*.1; do put "$page" "$share/man/man1/$(basename "$page")" 644; done

"$bin" completions bash >"$tmp/rag.bash"
"$bin" completions zsh >"$tmp/_rag"
"$bin" completions fish >"$tmp/rag.fish"
put "$tmp/rag.bash" "$share/bash-completion/completions/rag" 644
put "$tmp/_rag" "$share/zsh/site-functions/_rag" 644
put "$tmp/rag.fish" "$share/fish/vendor_completions.d/rag.fish" 644

# The models: what the model folder lacked before is what this install added.
models=$(model_folder)
mkdirs "$models/minilm"
(cd "$models" && find . -type f | sort) >"$tmp/before"
fetch=()
for arg in "$@"; do
  case $arg in
    --medium | --large) fetch+=(--large) ;; # setup.sh's --medium: the 0.5B beside the 1.5B
    --small | --minimal) fetch+=("$arg") ;;
    --from=*) fetch+=(--from "${arg#--from=}") ;;
    *) die "unknown argument '$arg' (--small, --minimal, --medium, --large, --from=DIR)" ;;
  esac
done
# A checkout's models/ is copied from rather than fetched again.
[ -d "$root/models" ] && fetch+=(--from "$root/models")
"$bin" models fetch "${fetch[@]}" >/dev/null || die "the models could not be fetched (see above)"
(cd "$models" && find . -type f | sort) >"$tmp/after"
comm -13 "$tmp/before" "$tmp/after" | while IFS= read -r f; do
  printf 'file:%s\n' "$models/${f#./}" >>"$tmp/files"
done

# An earlier install's record is kept: a reinstall adds to it rather than forgetting files.
cat "$tmp/files" >>"$manifest"
sort -u "$manifest" -o "$manifest"
[ -f "$tmp/dirs" ] && cat "$tmp/dirs" >>"$dirs"

say "installed $prefix/bin/rag, its man pages and completions, and the models in $models"
case ":$PATH:" in
  *":$prefix/bin:"*) ;;
  *) say "$prefix/bin is not on your PATH: add it, e.g. export PATH=\"$prefix/bin:\$PATH\"" ;;
esac
undo="make uninstall PREFIX=$prefix"
# From the release tarball (share/rag/install.sh) there is no Makefile: its install.sh undoes it.
[ -f "$root/Makefile" ] || undo="./install.sh --uninstall $prefix"
say "try it: rag ingest ~/notes && rag ask \"a question\"   ($undo removes it)"
