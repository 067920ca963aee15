#!/usr/bin/env bash
# The whole test suite (what .ci/run runs):
#   1. C unit tests and seeded fuzz targets (meson test, suites unit and fuzz);
#   2. the parallel part of the integration tests on every Python present
#      (tests/run_pytest.sh parallel), and beside it the unit and fuzz suites
#      again under ASan+UBSan, in build-asan (-Db_sanitize=address,undefined;
#      BIFOCAL_ASAN=0 skips this; niced): neither holds a timing figure, and
#      the parallel part must pass on a busy host anyway;
#   3. the timing-sensitive integration tests, alone (run_pytest.sh serial);
#   4. the benchmarks in report mode, alone.
set -uo pipefail
cd "$(dirname "$0")/.."
export CI="${CI:-true}"
status=0

asan() {
  # -O1, ASan's own advice (the tree's default -O2 compiles these objects about
  # twice as slowly under -fsanitize=address,undefined: the stage's cost is
  # mostly its build); the same findings, object-size checks included
  if [ ! -f build-asan/build.ninja ]; then
    meson setup build-asan -Dwerror=true -Db_sanitize=address,undefined -Doptimization=1 >/dev/null || return 1
  elif ! meson introspect build-asan --buildoptions | /usr/bin/python3 -c '
import json, sys
sys.exit(0 if {o["name"]: o["value"] for o in json.load(sys.stdin)}.get("optimization") == "1" else 1)'; then
    meson configure build-asan -Doptimization=1 >/dev/null || return 1
  fi
  ninja -C build-asan build.ninja >/dev/null || return 1  # regenerated if a meson.build changed
  # build only what those suites run (not the CLI or the tracing extensions)
  local targets
  targets=$(meson introspect build-asan --tests | /usr/bin/python3 -c '
import json, os, sys
tests = json.load(sys.stdin)
print(" ".join(sorted({os.path.relpath(t["cmd"][0], "build-asan") for t in tests
                       if {"unit", "fuzz"} & {s.split(":")[-1] for s in t["suite"]}})))') || return 1
  if [ -z "$targets" ] || ! ninja -C build-asan $targets >/dev/null; then
    echo "run_all: the ASan+UBSan build failed"
    return 1
  fi
  # (a generous timeout: niced beside the tests, the sanitized fuzz runs take longer)
  meson test -C build-asan --no-rebuild --suite unit --suite fuzz --print-errorlogs --timeout-multiplier 4
}

# wall seconds of each stage, said at the end
times=()
stage() { times+=("$1 $((SECONDS - t0)) s"); t0=$SECONDS; }

t0=$SECONDS
asan_pid=
if [ "${BIFOCAL_ASAN:-1}" != 0 ]; then
  asan_log=$(mktemp "${TMPDIR:-/tmp}/bifocal-asan.XXXXXX")
  # niced: it takes the CPU the tests leave (they mostly wait)
  nice -n 10 bash -c "set -o pipefail; $(declare -f asan); asan; rc=\$?; echo \"(ASan+UBSan stage: \$SECONDS s)\"; exit \$rc" >"$asan_log" 2>&1 &
  asan_pid=$!
fi
t0=$SECONDS
meson test -C build --suite unit --suite fuzz --print-errorlogs || status=1
stage "unit+fuzz"
bash tests/run_pytest.sh parallel || status=1
stage "integration parallel"
if [ -n "$asan_pid" ]; then
  # finished before the timing-sensitive tests start: they run alone
  asan_status=0
  wait "$asan_pid" || asan_status=1
  echo "== unit and fuzz suites under ASan+UBSan (build-asan; built and run beside the parallel part) =="
  cat "$asan_log"
  rm -f "$asan_log"
  [ $asan_status -eq 0 ] || { echo "run_all: ASan+UBSan suites failed" >&2; status=1; }
  stage "waiting for ASan+UBSan"
fi
bash tests/run_pytest.sh serial || status=1
stage "integration serial"
echo "== benchmarks (figures; see docs/performance.md) =="
./build/tests/bench/bench_store || status=1
stage "bench_store"
echo "run_all: wall time by stage: $(IFS=,; echo "${times[*]}" | sed 's/,/, /g'); $SECONDS s in all"
exit $status
