#!/usr/bin/env bash
# Print the per-version offset tables vendored in sampling/layouts.c by
# compiling offsets_gen.c against every pyenv CPython 3.8-3.12's headers
# (BUILTIN_GENERATED), then the thread-name table for 3.8-3.15
# (NAMES_GENERATED, -DBF_NAMES) and the positions in _Py_DebugOffsets of
# what 3.13-3.15 give the thread-name reader and `dump --locals` themselves
# (DBG_POS_GENERATED, -DBF_DBGPOS). 3.14/3.15 come from the
# Debian sid root (.ci/sid-root; $BIFOCAL_SID_ROOT, default
# /var/lib/bifocal/sid-root), compiled with the host's compiler.
set -euo pipefail
cd "$(dirname "$0")"
# shellcheck source=sampling/gen/pythons.sh
. ./pythons.sh
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

gen() { # gen VERSION [-DMODE]
  local v=$1
  shift
  # shellcheck disable=SC2046
  ${CC:-cc} -w "$@" $(bf_py_incs "$v" "$tmp") -o "$tmp/gen" offsets_gen.c
  "$tmp/gen"
}

# The blocks gen prints ("{ /* 3.8.18 */", ".field = value," lines) turned
# into one row a field, one column a version, as the tables are kept
# (SMP_VERSION_COLUMN in sampling/internal/smp_int.h): NAME_N, the number of
# versions, and NAME(X), X(field, values...) in the order the fields first
# appear, 0 where a version has no such field.
columns() { # columns NAME
  awk -v name="$1" '
/\{ \/\*/ { n++; ver[n] = $3; next }
/^ *\.[a-z_0-9]+ = / {
  f = $1; sub(/^\./, "", f); v = $3; sub(/,$/, "", v)
  if (!(f in seen)) { seen[f] = 1; order[++nf] = f; if (length(f) > wf) wf = length(f) }
  val[f, n] = v
}
END {
  for (i = 1; i <= n; i++) {
    w[i] = length(ver[i])
    for (j = 1; j <= nf; j++)
      if (((order[j], i) in val) && length(val[order[j], i]) > w[i]) w[i] = length(val[order[j], i])
  }
  printf "/*  %*s", wf + 1, ""
  for (i = 1; i <= n; i++) printf " %*s ", w[i], ver[i]
  printf "*/\n#define %s_N %d\n#define %s(X) \\\n", name, n, name
  for (j = 1; j <= nf; j++) {
    f = order[j]
    line = sprintf("  X(%-*s", wf + 1, f ",")
    for (i = 1; i <= n; i++) {
      v = ((f, i) in val) ? val[f, i] : "0"
      line = line sprintf(" %*s%s", w[i], v, i < n ? "," : ")")
    }
    printf "%s%s\n", line, j < nf ? " \\" : ""
  }
}'
}

echo "---- sampling/layouts.c ----"
for v in 3.8 3.9 3.10 3.11 3.12; do gen $v; done | columns BUILTIN_GENERATED
for v in 3.8 3.9 3.10 3.11 3.12 3.13 3.14 3.15; do gen $v -DBF_NAMES; done | columns NAMES_GENERATED
for v in 3.13 3.14 3.15; do gen $v -DBF_DBGPOS; done | columns DBG_POS_GENERATED
