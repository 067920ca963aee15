#!/usr/bin/env bash
# Print the per-version offset tables vendored in sampling/layouts.c by
# compiling offsets_gen.c against every pyenv CPython 3.8-3.12's headers,
# then the thread-name table (builtin_names[]) for 3.8-3.15 (-DBF_NAMES) and
# the positions in _Py_DebugOffsets of what 3.13-3.15 give the thread-name
# reader themselves (names_dpos[], -DBF_DBGPOS) and `dump --locals`
# (loc_dpos[] in locals.c, -DBF_LOCPOS). 3.14/3.15 come from the
# Debian sid root (.ci/sid-root; $BIFOCAL_SID_ROOT, default
# /var/lib/bifocal/sid-root), compiled with the host's compiler.
set -euo pipefail
cd "$(dirname "$0")"
root="${PYENV_ROOT:-$HOME/.pyenv}"
sid="${BIFOCAL_SID_ROOT:-/var/lib/bifocal/sid-root}"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# -I flags for 3.v's headers: pyenv's, or the sid root's (whose pyconfig.h
# includes <x86_64-linux-gnu/python3.v/pyconfig.h>, found through a link so
# the host's libc headers stay in use)
incs() {
  local v=$1 d
  if d=$(ls -d "$root"/versions/$v.* 2>/dev/null | sort -V | tail -1) && [ -n "$d" ]; then
    echo "-I$d/include/python$v"
  else
    local arch
    arch=$(${CC:-cc} -dumpmachine)
    mkdir -p "$tmp/inc$v/$arch"
    ln -sfn "$sid/usr/include/$arch/python$v" "$tmp/inc$v/$arch/python$v"
    echo "-I$sid/usr/include/python$v -I$tmp/inc$v"
  fi
}

gen() { # gen VERSION [-DMODE]
  local v=$1
  shift
  # shellcheck disable=SC2046
  ${CC:-cc} -w "$@" $(incs "$v") -o "$tmp/gen" offsets_gen.c
  "$tmp/gen"
}

for v in 3.8 3.9 3.10 3.11 3.12; do gen $v; done
echo "---- builtin_names[] ----"
for v in 3.8 3.9 3.10 3.11 3.12 3.13 3.14 3.15; do gen $v -DBF_NAMES; done
echo "---- names_dpos[] ----"
for v in 3.13 3.14 3.15; do gen $v -DBF_DBGPOS; done
echo "---- loc_dpos[] (sampling/locals.c) ----"
for v in 3.13 3.14 3.15; do gen $v -DBF_LOCPOS; done
