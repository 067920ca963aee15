#!/usr/bin/env bash
# The whole test suite: C unit tests (meson test), integration tests on every
# Python present (pytest), then the benchmarks in report mode.
set -uo pipefail
cd "$(dirname "$0")/.."
export CI="${CI:-true}"
status=0
meson test -C build --print-errorlogs || status=1
BIFOCAL_BIN="$(pwd)/build/bifocal" /usr/bin/python3 -m pytest -q -p no:cacheprovider tests/integration || status=1
echo "== benchmarks (figures; see README) =="
./build/tests/bench/bench_store || status=1
exit $status
