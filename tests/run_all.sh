#!/usr/bin/env bash
# The whole test suite (what .ci/run runs):
#   1. C unit tests and seeded fuzz targets (meson test, suites unit and fuzz);
#   2. integration tests on every Python present (tests/run_pytest.sh: the
#      parallel part, then the timing-sensitive tests alone);
#   3. the benchmarks in report mode;
#   4. the unit and fuzz suites again under ASan+UBSan, in build-asan
#      (-Db_sanitize=address,undefined; BIFOCAL_ASAN=0 skips this step).
set -uo pipefail
cd "$(dirname "$0")/.."
export CI="${CI:-true}"
status=0
meson test -C build --suite unit --suite fuzz --print-errorlogs || status=1
bash tests/run_pytest.sh all || status=1
echo "== benchmarks (figures; see docs/performance.md) =="
./build/tests/bench/bench_store || status=1
if [ "${BIFOCAL_ASAN:-1}" != 0 ]; then
  echo "== unit and fuzz suites under ASan+UBSan (build-asan) =="
  if [ ! -f build-asan/build.ninja ]; then
    meson setup build-asan -Dwerror=true -Db_sanitize=address,undefined >/dev/null || status=1
  fi
  ninja -C build-asan build.ninja >/dev/null || status=1  # regenerated if a meson.build changed
  # build only what those suites run (not the CLI or the tracing extensions)
  targets=$(meson introspect build-asan --tests | /usr/bin/python3 -c '
import json, os, sys
tests = json.load(sys.stdin)
print(" ".join(sorted({os.path.relpath(t["cmd"][0], "build-asan") for t in tests
                       if {"unit", "fuzz"} & {s.split(":")[-1] for s in t["suite"]}})))') || status=1
  if [ -n "${targets:-}" ] && ninja -C build-asan $targets >/dev/null; then
    meson test -C build-asan --no-rebuild --suite unit --suite fuzz --print-errorlogs || status=1
  else
    echo "run_all: the ASan+UBSan build failed" >&2
    status=1
  fi
fi
exit $status
