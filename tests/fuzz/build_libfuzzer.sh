#!/usr/bin/env bash
# Build and run the sampler's libFuzzer target (clang): line tables, ELF,
# _Py_DebugOffsets and the frame walker over fake memory, under ASan+UBSan.
# usage: tests/fuzz/build_libfuzzer.sh [SECONDS]
set -euo pipefail
cd "$(dirname "$0")/../.."
out=build-fuzz
mkdir -p "$out/corpus"
clang -g -O1 -fsanitize=fuzzer,address,undefined -DBF_LIBFUZZER -D_GNU_SOURCE -std=c11 \
  -Isampling -Icore tests/fuzz/fuzz_sampler.c sampling/remote.c sampling/elf.c \
  sampling/layouts.c sampling/linetable.c sampling/walker.c sampling/pynames.c -o "$out/fuzz_sampler_lf"
"$out/fuzz_sampler_lf" -max_total_time="${1:-60}" -max_len=8192 "$out/corpus"
