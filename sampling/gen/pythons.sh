# shellcheck shell=bash
# pythons.sh — sourced by the generators (sampling/gen/*.sh, core/gen/*.sh):
# where each CPython 3.v they read is. pyenv's newest 3.v.* ($PYENV_ROOT,
# default ~/.pyenv) when there is one, else the Debian sid root's
# (.ci/sid-root: $BIFOCAL_SID_ROOT, default /var/lib/bifocal/sid-root; its
# interpreters through the wrappers in $BIFOCAL_SID_BIN, default
# /var/lib/bifocal/bin).
bf_pyenv_root="${PYENV_ROOT:-$HOME/.pyenv}"
bf_sid_root="${BIFOCAL_SID_ROOT:-/var/lib/bifocal/sid-root}"
bf_sid_bin="${BIFOCAL_SID_BIN:-/var/lib/bifocal/bin}"

# bf_pyenv_dir V: pyenv's newest 3.v.* directory, or fails
bf_pyenv_dir() {
  local d
  d=$(ls -d "$bf_pyenv_root"/versions/"$1".* 2>/dev/null | sort -V | tail -1) && [ -n "$d" ] && echo "$d"
}

# bf_py_incs V TMP [internal]: -I flags for 3.v's headers (with "internal",
# its internal/ directory too). The sid root's pyconfig.h includes
# <ARCH/python3.v/pyconfig.h>, found through a link made under TMP so the
# host's libc headers stay in use.
bf_py_incs() {
  local v=$1 tmp=$2 internal=${3:-} d inc
  if d=$(bf_pyenv_dir "$v"); then
    inc="$d/include/python$v"
    echo "-I$inc${internal:+ -I$inc/internal}"
  else
    local arch
    arch=$(${CC:-cc} -dumpmachine)
    mkdir -p "$tmp/inc$v/$arch"
    ln -sfn "$bf_sid_root/usr/include/$arch/python$v" "$tmp/inc$v/$arch/python$v"
    inc="$bf_sid_root/usr/include/python$v"
    echo "-I$inc${internal:+ -I$inc/internal} -I$tmp/inc$v"
  fi
}

# bf_py_run V ARGS...: 3.v runs ARGS (the sid wrappers run in the caller's
# directory, bound into the root)
bf_py_run() {
  local v=$1 d
  shift
  if d=$(bf_pyenv_dir "$v"); then
    "$d/bin/python3" "$@"
  else
    "$bf_sid_bin/python$v" "$@"
  fi
}
