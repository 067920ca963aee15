#!/usr/bin/env bash
# Print the per-version offset tables vendored in sampling/layouts.c by
# compiling offsets_gen.c against every pyenv CPython 3.8-3.12's headers,
# then the thread-name table (builtin_names[]) for 3.8-3.13 (-DBF_NAMES).
set -euo pipefail
cd "$(dirname "$0")"
root="${PYENV_ROOT:-$HOME/.pyenv}"
for v in 3.8 3.9 3.10 3.11 3.12; do
  d=$(ls -d "$root"/versions/$v.* | sort -V | tail -1)
  inc="$d/include/python$v"
  ${CC:-cc} -w -I"$inc" -o /tmp/bf_offsets_gen_$v offsets_gen.c
  /tmp/bf_offsets_gen_$v
  rm -f /tmp/bf_offsets_gen_$v
done
echo "---- builtin_names[] ----"
for v in 3.8 3.9 3.10 3.11 3.12 3.13; do
  d=$(ls -d "$root"/versions/$v.* | sort -V | tail -1)
  inc="$d/include/python$v"
  ${CC:-cc} -w -DBF_NAMES -I"$inc" -o /tmp/bf_offsets_gen_$v offsets_gen.c
  /tmp/bf_offsets_gen_$v
  rm -f /tmp/bf_offsets_gen_$v
done
