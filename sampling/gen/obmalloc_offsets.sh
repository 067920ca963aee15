#!/usr/bin/env bash
# Print the offsets sampling/pyalloc.c uses (pymalloc's state in
# PyInterpreterState, struct _obmalloc_mgmt, struct arena_object) by
# compiling obmalloc_gen.c against the headers of pyenv's 3.12/3.13 and the
# Debian sid root's 3.14/3.15 ($BIFOCAL_SID_ROOT, default
# /var/lib/bifocal/sid-root; python3.1x-dev, .ci/sid-root installs them).
set -euo pipefail
cd "$(dirname "$0")"
# shellcheck source=sampling/gen/pythons.sh
. ./pythons.sh
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for v in 3.12 3.13 3.14 3.15; do
  # shellcheck disable=SC2046
  ${CC:-cc} $(bf_py_incs "$v" "$tmp" internal) obmalloc_gen.c -o "$tmp/gen$v" && "$tmp/gen$v"
done
