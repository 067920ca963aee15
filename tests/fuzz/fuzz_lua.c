/* fuzz_lua.c — untrusted scripts into the script entry of `bifocal run`: the
 * sandboxed interpreter (bf_lua_new + bf_lua_exec, 50 ms budget, 64 MiB cap)
 * over a small database, fed
 *  - mutated Lua sources (byte flips, inserted tokens from a dictionary of
 *    risky calls: load, string.dump, require, coroutines, patterns, ...);
 *  - mutated bytecode, through load, loadfile, dofile and require;
 *  - pattern-matching calls run both by the budgeted string library and by
 *    Lua's own (a plain state), whose results and errors must agree.
 * Any crash, sanitizer report or disagreement fails.
 *
 * Built two ways: with -DBF_LIBFUZZER under clang -fsanitize=fuzzer it is a
 * libFuzzer target (tests/fuzz/build_libfuzzer.sh lua); otherwise main(N)
 * runs N seeded random inputs (the meson test `lua_fuzz`; configure with
 * -Db_sanitize=address,undefined for the ASan run).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <lauxlib.h>
#include <lualib.h>

#include "../unit/scratch.h"
#include "import.h"
#include "lua_host.h"
#include "store.h"

static char dir[64];     /* scratch directory: database, bytecode files */
static char db_path[128];
static lua_State *ref;   /* plain Lua: the reference for string functions */
static lua_State *mine;  /* the budgeted string library, no sandbox */
static unsigned long n_compared, n_skipped;

static const char *const seeds[] = {
    "local s = bifocal.session(1)\nfor _, f in ipairs(s:functions()) do print(f.name, f.self_share) end\n"
    "bifocal.check('x', s.sample_count > 0, s.label)\nprint(bifocal.repr(s:info()))\n",
    "local t = {}\nfor k, v in string.gmatch('a=1, b=2', '(%w+)=(%w+)') do t[k] = v end\n"
    "print(('hello'):gsub('l+', function(x) return #x end), ('x'):rep(3, ','))\n",
    "print(load('return 1 + ...')(2), pcall(load, string.dump(print)))\n"
    "print(pcall(require, 'nothere'), load(string.dump(function() return 1 end)))\n",
    "local co = coroutine.wrap(function(a) local b = coroutine.yield(a + 1) return b * 2 end)\n"
    "print(co(1), co(4))\nprint(pcall(error, {}))\nprint(select('#', table.unpack({1, 2, 3})))\n",
    "local db = bifocal.open()\nif db then for _, s in ipairs(db:sessions()) do\n"
    "  for smp in s:samples{} do local x = smp.stack_id end\n  print(#s:stacks{}, #s:threads())\nend end\n"
    "print(bifocal.stats.wilson(3, 10), bifocal.pct(0.5), bifocal.fmt_ns(1234))\n",
    "setmetatable(_ENV, {__index = function(_, k) return k end})\nprint(undefined_name)\n"
    "print(string.format('%q %5.2f %s', 'a\\n', 1.5, {}))\nprint(utf8.char(72, 228, 8364))\n",
};

static const char *const dict[] = {
    "load(", "string.dump(", "require(", "loadfile(", "dofile(", "coroutine.wrap(", "coroutine.resume(",
    "pcall(", "error(", "setmetatable(", "getmetatable(", "collectgarbage(", "string.rep(", ":find(",
    ":match(", ":gsub(", ":gmatch(", "%b()", "%f[%w]", ".-", "(.-)", "()", "[^%a]", "%1", "table.concat(",
    "table.sort(", "table.unpack(", "select(", "rawset(", "bifocal.session(", "bifocal.join(", "s:functions{",
    "s:samples{", "s:stacks{", "s:edges(", "s:calls(", "s:func(", "io.open(", "io.lines(", "os.getenv(",
    "debug.traceback(", "utf8.char(", "string.format(", "'\\0'", "'\\xff'", "2^63", "-0.0", "1e308", "nil",
    "...", "end", "function", "return", "local", "goto", "::l::", "while true do", "for i = 1, 1e9 do", "[[", "]]",
    "--[[", "=", "~=", "..", "#", "<close>", "<const>", "{", "}", "(", ")", ",", ";",
};

/* ---- a deterministic generator for the seeded mode -------------------------- */

static uint64_t rng;
static uint32_t rnd(void) {
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return (uint32_t)(rng >> 11);
}

/* ---- setup -------------------------------------------------------------------- */

static void setup(void) {
  snprintf(dir, sizeof dir, "/tmp/bf-fuzz-lua-XXXXXX");
  if (!mkdtemp(dir)) {
    perror("mkdtemp");
    exit(2);
  }
  snprintf(db_path, sizeof db_path, "%s/f.db", dir);
  char src[160];
  snprintf(src, sizeof src, "%s/c.txt", dir);
  FILE *f = fopen(src, "w");
  if (!f) exit(2);
  fputs("main;parse;lex 30\nmain;parse 10\nmain;render 20\n<module>;x\\x1b 5\n", f);
  fclose(f);
  bf_store *s = NULL;
  bf_err msg = BF_ERR_INIT;
  int64_t id = 0;
  bf_import_opts io = {.label = "seed"};
  if (bf_store_open(db_path, BF_STORE_CREATE, &s, &msg) || bf_import_collapsed(s, src, &io, &id)) {
    fprintf(stderr, "fuzz_lua: cannot make the test database: %s\n", bf_err_msg(&msg, s ? bf_store_errmsg(s) : "?"));
    exit(2);
  }
  bf_store_close(s);
  unlink(src);
  /* scripts print; the harness is not interested, and must never block on stdin */
  if (!freopen("/dev/null", "r", stdin) || !freopen("/dev/null", "w", stdout)) exit(2);
  ref = luaL_newstate();
  luaL_openlibs(ref);
  bf_err err = BF_ERR_INIT;
  bf_lua_opts o = {.db_path = db_path, .sandbox = 0, .timeout_s = 0.05, .memory_bytes = 64u << 20};
  mine = bf_lua_new(&o, &err);
  if (!ref || !mine) exit(2);
}

static lua_State *sandbox(void) {
  bf_err err = BF_ERR_INIT;
  bf_lua_opts o = {.db_path = db_path, .sandbox = 1, .timeout_s = 0.05, .memory_bytes = 64u << 20};
  lua_State *L = bf_lua_new(&o, &err);
  if (!L) {
    fprintf(stderr, "fuzz_lua: %s\n", err.msg);
    abort();
  }
  /* the harness's own process must survive the script */
  if (luaL_dostring(L, "os.exit = nil") != LUA_OK) abort();
  return L;
}

/* ---- 1: a source ------------------------------------------------------------------ */

static void run_source(const char *src) {
  lua_State *L = sandbox();
  bf_err msg = BF_ERR_INIT;
  int rc = bf_lua_exec(L, src, "=fuzz", 0, &msg);
  if (rc == BF_LUA_ERROR && !msg.msg[0]) {
    fprintf(stderr, "fuzz_lua: an error without a message\n");
    abort();
  }
  lua_close(L);
}

/* ---- 2: bytecode through every loader ------------------------------------------------ */

static void run_bytecode(const unsigned char *chunk, size_t n) {
  char path[128];
  snprintf(path, sizeof path, "%s/bc.lua", dir);
  FILE *f = fopen(path, "wb");
  if (!f) abort();
  fwrite(chunk, 1, n, f);
  fclose(f);
  lua_State *L = sandbox();
  lua_pushlstring(L, (const char *)chunk, n);
  lua_setglobal(L, "B");
  lua_pushstring(L, path);
  lua_setglobal(L, "F");
  lua_pushfstring(L, "%s/?.lua", dir);
  lua_setglobal(L, "P");
  static const char *const tries[] = {
      "assert(not pcall(load(B) or error))", "assert(not pcall(assert(load(B, 'b', 'b'))))",
      "assert(not pcall(load(B, 'b', 'bt') or error))", "assert(not pcall(loadfile(F) or error))",
      "assert(not pcall(dofile, F))", "package.path = P; assert(not pcall(require, 'bc'))", NULL};
  int binary = n > 0 && chunk[0] == 0x1b; /* what Lua takes for a binary chunk */
  for (size_t i = 0; tries[i]; i++) {
    bf_err msg = BF_ERR_INIT;
    bf_lua_exec(L, tries[i], "=bytecode", 0, &msg);
    /* a binary chunk must never load in the sandbox: "assertion failed!"
     * means a loader accepted and ran it (a text chunk may well run) */
    if (binary && strstr(msg.msg, "assertion failed")) {
      fprintf(stderr, "fuzz_lua: a binary chunk was accepted by: %s (%s)\n", tries[i], msg.msg);
      abort();
    }
  }
  lua_close(L);
  unlink(path);
}

/* ---- 3: budgeted string functions agree with Lua's own ----------------------------- */

static const char *const fns[] = {"find", "match", "gmatch", "gsub", "gsub_f", "gsub_t", "find_plain", "move"};

/* Run fn on (s, p, r) in L; the serialised results (or the error) into out. */
static int call_fn(lua_State *L, int fn, const char *s, size_t ls, const char *p, size_t lp, const char *r,
                   size_t lr, lua_Integer init, luaL_Buffer *out) {
  static const char prog[] =
      "local fn, s, p, r, init = ...\n"
      "local out = {}\n"
      "local function add(...) local t = table.pack(...) out[#out+1] = t.n\n"
      "  for i = 1, t.n do out[#out+1] = type(t[i]) .. ':' .. tostring(t[i]) end end\n"
      "local ok, e = pcall(function()\n"
      "  if fn == 'find' then add(s:find(p, init))\n"
      "  elseif fn == 'find_plain' then add(s:find(p, init, true))\n"
      "  elseif fn == 'match' then add(s:match(p, init))\n"
      "  elseif fn == 'gmatch' then local n = 0 for a, b in s:gmatch(p, init) do add(a, b) n = n + 1 if n > 50 then break end end\n"
      "  elseif fn == 'gsub' then add(s:gsub(p, r, init % 5))\n"
      "  elseif fn == 'gsub_f' then add(s:gsub(p, function(a, b) if a == '' then return nil end return #a .. (b or '') end))\n"
      "  elseif fn == 'move' then local a, d = {}, {}\n"
      "    for i = 1, #s do a[i] = s:sub(i, i) end for i = 1, #r do d[i] = r:sub(i, i) end\n"
      "    local e, t = #p % 12 - 3, (#r + init) % 12 - 4\n"
      "    if init % 2 == 0 then table.move(a, init, e, t) else table.move(a, init, e, t, d) end\n"
      "    for i = -4, 12 do add(i, a[i], d[i]) end\n"
      "  else add(s:gsub(p, {a = 'A', [''] = false, b = 1})) end end)\n"
      "if not ok then out[#out+1] = 'error:' .. tostring(e) end\n"
      "return table.concat(out, '|')\n";
  lua_settop(L, 0);
  if (luaL_loadbuffer(L, prog, sizeof prog - 1, "=cmp") != LUA_OK) abort();
  lua_pushstring(L, fns[fn]);
  lua_pushlstring(L, s, ls);
  lua_pushlstring(L, p, lp);
  lua_pushlstring(L, r, lr);
  lua_pushinteger(L, init);
  int st = lua_pcall(L, 5, 1, 0);
  size_t n;
  const char *res = lua_tolstring(L, -1, &n);
  luaL_addlstring(out, res ? res : "?", res ? n : 1);
  return st;
}

static void compare_patterns(const unsigned char *d, size_t n) {
  if (n < 4) return;
  int fn = d[0] % (int)(sizeof fns / sizeof fns[0]);
  lua_Integer init = (lua_Integer)(int8_t)d[1] % 8;
  size_t ls = d[2] % 48, lp = d[3] % 16;
  d += 4, n -= 4;
  if (ls + lp > n) return;
  const char *s = (const char *)d, *p = (const char *)d + ls, *r = (const char *)d + ls + lp;
  size_t lr = n - ls - lp > 8 ? 8 : n - ls - lp;
  /* ours first, under the 50 ms budget: a pattern that runs longer is
   * exponential in Lua's matcher as well and is not compared */
  lua_settop(mine, 0);
  luaL_Buffer a, b;
  bf_err msg = BF_ERR_INIT;
  lua_pushlstring(mine, s, ls);
  lua_setglobal(mine, "FZ_S");
  lua_pushlstring(mine, p, lp);
  lua_setglobal(mine, "FZ_P");
  int rc = bf_lua_exec(mine, "local _ = FZ_S:find(FZ_P)", "=probe", 0, &msg);
  int too_long = rc == BF_LUA_ERROR && strstr(msg.msg, "timed out");
  if (too_long) {
    n_skipped++;
    return;
  }
  luaL_buffinit(ref, &a);
  lua_State *M = mine;
  call_fn(ref, fn, s, ls, p, lp, r, lr, init, &a);
  luaL_pushresult(&a);
  const char *ra = lua_tostring(ref, -1);
  luaL_buffinit(M, &b);
  call_fn(M, fn, s, ls, p, lp, r, lr, init, &b);
  luaL_pushresult(&b);
  const char *rb = lua_tostring(M, -1);
  if (strcmp(ra, rb) != 0) {
    fprintf(stderr, "fuzz_lua: string.%s differs from Lua's\n  s=%.*s\n  p=%.*s\n  lua:  %s\n  ours: %s\n", fns[fn],
            (int)ls, s, (int)lp, p, ra, rb);
    abort();
  }
  n_compared++;
  lua_settop(ref, 0);
  lua_settop(M, 0);
}

/* ---- one input -------------------------------------------------------------------- */

static void one(const uint8_t *data, size_t size) {
  if (!size) return;
  const uint8_t *d = data + 1;
  size_t n = size - 1;
  switch (data[0] % 3) {
    case 0: {
      char *src = malloc(n + 1);
      if (!src) return;
      memcpy(src, d, n);
      src[n] = 0;
      run_source(src);
      free(src);
      break;
    }
    case 1: run_bytecode(d, n); break;
    default: compare_patterns(d, n); break;
  }
}

#ifdef BF_LIBFUZZER
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (!ref) setup();
  one(data, size);
  return 0;
}
#else

/* A seeded input of each kind: a mutated seed script, a mutated real dump, or
 * a random pattern call over a small alphabet (so matches happen). */
static size_t make_input(unsigned kind, uint8_t *buf, size_t cap, const char *dump, size_t dump_len) {
  size_t n = 0;
  buf[n++] = (uint8_t)kind;
  if (kind == 0) {
    const char *seed = seeds[rnd() % (sizeof seeds / sizeof seeds[0])];
    size_t l = strlen(seed);
    memcpy(buf + n, seed, l);
    n += l;
    for (unsigned m = rnd() % 4; m; m--) {
      size_t at = 1 + rnd() % (n - 1);
      if (rnd() % 2) {
        static const char punct[] = " ()[]{}.,:;'\"=~#%-+*/\\\n0123456789abcdefxyz";
        buf[at] = (uint8_t)(rnd() % 2 ? rnd() : (uint32_t)(unsigned char)punct[rnd() % (sizeof punct - 1)]);
      } else {
        const char *t = dict[rnd() % (sizeof dict / sizeof dict[0])];
        size_t tl = strlen(t);
        if (n + tl >= cap) continue;
        memmove(buf + at + tl, buf + at, n - at);
        memcpy(buf + at, t, tl);
        n += tl;
      }
    }
  } else if (kind == 1) {
    size_t l = dump_len < cap - 1 ? dump_len : cap - 1;
    memcpy(buf + n, dump, l);
    n += l;
    if (rnd() % 4 == 0 && n > 3) n = 2 + rnd() % (n - 2);
    for (unsigned m = 1 + rnd() % 6; m; m--) buf[1 + rnd() % (n - 1)] = (uint8_t)rnd();
  } else {
    static const char alpha[] = "aab()%.-*+?[]^$bf1s0]x";
    size_t ls = rnd() % 24, lp = 1 + rnd() % 10;
    buf[n++] = (uint8_t)rnd();
    buf[n++] = (uint8_t)(rnd() % 10);
    buf[n++] = (uint8_t)ls;
    buf[n++] = (uint8_t)lp;
    for (size_t i = 0; i < ls; i++) buf[n++] = (uint8_t)"aabbx()%. "[rnd() % 10];
    for (size_t i = 0; i < lp; i++) buf[n++] = (uint8_t)alpha[rnd() % (sizeof alpha - 1)];
    for (size_t i = 0; i < 6; i++) buf[n++] = (uint8_t)"%0%1x%2"[rnd() % 7];
  }
  return n;
}

int main(int argc, char **argv) {
  long iters = argc > 1 ? atol(argv[1]) : 3000;
  rng = argc > 2 ? strtoull(argv[2], NULL, 10) : 0x9e3779b97f4a7c15ull;
  setup();
  /* a real chunk to corrupt: a function with constants, upvalues, closures */
  const char *mk = "local u = 3 return string.dump(function(a, ...) local t = {a, ...} "
                   "for i = 1, #t do t[i] = tostring(t[i]) .. u end return function() return t end, 'k', 1.5 end)";
  if (luaL_dostring(ref, mk) != LUA_OK) return 2;
  size_t dump_len;
  const char *dump0 = lua_tolstring(ref, -1, &dump_len);
  char *dump = malloc(dump_len);
  if (!dump) return 2;
  memcpy(dump, dump0, dump_len);
  lua_settop(ref, 0);
  static uint8_t buf[8192];
  for (long i = 0; i < iters; i++) {
    size_t n = make_input((unsigned)(i % 3), buf, sizeof buf - 64, dump, dump_len);
    one(buf, n);
  }
  fprintf(stderr, "fuzz_lua: %ld inputs, %lu pattern calls compared with Lua's own (%lu too long to compare)\n", iters,
          n_compared, n_skipped);
  if (n_compared < (unsigned long)iters / 6) {
    fprintf(stderr, "fuzz_lua: too few comparisons: the generator is broken\n");
    return 1;
  }
  free(dump);
  lua_close(ref);
  lua_close(mine);
  char db[160];
  snprintf(db, sizeof db, "%s/f.db", dir);
  unlink_db(db);
  rmdir(dir);
  return 0;
}
#endif
