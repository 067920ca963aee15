#!/usr/bin/env bash
# Print the offsets sampling/pyalloc.c uses (pymalloc's state in
# PyInterpreterState, struct _obmalloc_mgmt, struct arena_object) by
# compiling obmalloc_gen.c against the headers of pyenv's 3.12/3.13 and the
# Debian sid root's 3.14/3.15 ($BIFOCAL_SID_ROOT, default
# /var/lib/bifocal/sid-root; python3.1x-dev, .ci/sid-root installs them).
set -euo pipefail
cd "$(dirname "$0")"
root="${PYENV_ROOT:-$HOME/.pyenv}"
sid="${BIFOCAL_SID_ROOT:-/var/lib/bifocal/sid-root}"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for v in 3.12 3.13 3.14 3.15; do
  if d=$(ls -d "$root"/versions/$v.* 2>/dev/null | sort -V | tail -1) && [ -n "$d" ]; then
    inc="-I$d/include/python$v -I$d/include/python$v/internal"
  else
    arch=$(${CC:-cc} -dumpmachine)
    mkdir -p "$tmp/inc$v/$arch"
    ln -sfn "$sid/usr/include/$arch/python$v" "$tmp/inc$v/$arch/python$v"
    inc="-I$sid/usr/include/python$v -I$sid/usr/include/python$v/internal -I$tmp/inc$v"
  fi
  # shellcheck disable=SC2086
  ${CC:-cc} $inc obmalloc_gen.c -o "$tmp/gen$v" && "$tmp/gen$v"
done
