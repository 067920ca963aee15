#!/usr/bin/env bash
# Build and run the sampler's libFuzzer target (clang): line tables, ELF,
# _Py_DebugOffsets and the frame walker over fake memory, under ASan+UBSan.
# With "lua" first: the script-entry target fuzz_lua.c over all of core/ and
# the Lua host repl/lua_host.c (mutated sources and bytecode, budgeted string
# library against Lua's own).
# With "store" first: fuzz_store.c (import arithmetic, the database opener over
# hostile images) over core/ and common/.
# usage: tests/fuzz/build_libfuzzer.sh [SECONDS] | tests/fuzz/build_libfuzzer.sh lua|store [SECONDS]
set -euo pipefail
cd "$(dirname "$0")/../.."
out=build-fuzz
mkdir -p "$out/corpus"
if [ "${1:-}" = lua ]; then
  mkdir -p "$out/corpus-lua"
  python3 core/embed.py core/flame.html "$out/flame_html.c" bf_flame_html
  # shellcheck disable=SC2046
  clang -g -O1 -fsanitize=fuzzer,address,undefined -DBF_LIBFUZZER -D_GNU_SOURCE -std=c11 -DBF_VERSION='"fuzz"' \
    -DBF_SCRIPTS_SRC_DIR='"scripts"' -DBF_SCRIPTS_INSTALL_DIR='"scripts"' -DBF_SCRIPTS_EXE_REL='"scripts"' \
    -DBF_BUILD_ROOT='"build-fuzz"' -Icore -Irepl $(pkg-config --cflags lua5.4) \
    tests/fuzz/fuzz_lua.c core/*.c core/lua/*.c repl/lua_host.c "$out/flame_html.c" \
    $(pkg-config --libs lua5.4 sqlite3 libsodium zlib) -lm \
    -o "$out/fuzz_lua_lf"
  exec "$out/fuzz_lua_lf" -max_total_time="${2:-60}" -max_len=4096 -timeout=10 "$out/corpus-lua"
fi
if [ "${1:-}" = store ]; then
  mkdir -p "$out/corpus-store"
  python3 core/embed.py core/flame.html "$out/flame_html.c" bf_flame_html
  # shellcheck disable=SC2046
  clang -g -O1 -fsanitize=fuzzer,address,undefined -DBF_LIBFUZZER -D_GNU_SOURCE -std=c11 -DBF_VERSION='"fuzz"' \
    -Icore -Icore/internal -Icommon $(pkg-config --cflags lua5.4) \
    tests/fuzz/fuzz_store.c core/*.c core/store/*.c core/lua/*.c common/*.c "$out/flame_html.c" \
    $(pkg-config --libs lua5.4 sqlite3 libsodium zlib) -lm \
    -o "$out/fuzz_store_lf"
  exec "$out/fuzz_store_lf" -max_total_time="${2:-60}" -max_len=8192 -timeout=10 "$out/corpus-store"
fi
clang -g -O1 -fsanitize=fuzzer,address,undefined -DBF_LIBFUZZER -D_GNU_SOURCE -std=c11 \
  -Isampling -Isampling/internal -Icore tests/fuzz/fuzz_sampler.c sampling/remote.c sampling/elf.c \
  sampling/layouts.c sampling/linetable.c sampling/walker.c sampling/pynames.c -o "$out/fuzz_sampler_lf"
"$out/fuzz_sampler_lf" -max_total_time="${1:-60}" -max_len=8192 "$out/corpus"
