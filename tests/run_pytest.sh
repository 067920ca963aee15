#!/usr/bin/env bash
# The integration tests (pytest on every Python found), in one of two parts:
#   parallel  every test not marked serial, spread over twice as many
#             pytest-xdist workers as CPUs (Debian python3-pytest-xdist): its
#             tests mostly wait on fixed-length captures and child processes
#             (~0.8 of 2 CPUs busy with 2 workers); single tests are handed
#             out one by one, a file's tests sharing a module fixture together
#             (--dist loadgroup, groups set in conftest.py); serially when
#             xdist is missing
#   serial    the timing-sensitive tests (rates, shares, slowdowns, ptrace and
#             job control: conftest.py SERIAL_FILES, @pytest.mark.serial),
#             alone, one at a time
#   all       parallel, then serial
# Extra arguments go to pytest (e.g. -k WORD). BIFOCAL_JOBS=N sets the number
# of workers (default: twice the CPUs; 1 = no xdist).
set -uo pipefail
cd "$(dirname "$0")/.."
export CI="${CI:-true}"
export BIFOCAL_BIN="${BIFOCAL_BIN:-$(pwd)/build/bifocal}"
PY=/usr/bin/python3
[ -x "$PY" ] || PY=python3
mode="${1:-all}"
[ $# -gt 0 ] && shift
base=("$PY" -m pytest -q -p no:cacheprovider tests/integration)

# pytest's "no tests collected" (5: e.g. -k matched only the other part) is no failure
ok5() { "$@"; local rc=$?; [ $rc -eq 5 ] && rc=0; return $rc; }

parallel() {
  local jobs="${BIFOCAL_JOBS:-$((2 * $(nproc 2>/dev/null || echo 1)))}"
  if [ "$jobs" -gt 1 ] && "$PY" -c "import xdist" 2>/dev/null; then
    ok5 "${base[@]}" -m "not serial" -n "$jobs" --dist loadgroup "$@"
  else
    [ "$jobs" -gt 1 ] && echo "run_pytest: pytest-xdist not installed (apt-get install python3-pytest-xdist): running serially"
    ok5 "${base[@]}" -m "not serial" "$@"
  fi
}
serial() {
  ok5 "${base[@]}" -m serial "$@"
}

# the interpreters the tests will use, and those they skip (on stderr)
[ "$mode" != serial ] && { echo "interpreters:"; "$PY" tests/integration/pythons.py | sed 's/^/  /'; }

case "$mode" in
  parallel) parallel "$@" ;;
  serial) serial "$@" ;;
  all) status=0; parallel "$@" || status=1; serial "$@" || status=1; exit $status ;;
  *) echo "usage: tests/run_pytest.sh [parallel|serial|all] [pytest args...]" >&2; exit 2 ;;
esac
