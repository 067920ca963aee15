/* test_lua_budget.c — the Lua budget outside the instruction hook (#32):
 * bf_lua_run_main under --timeout stops a looping xpcall message handler,
 * a pcall loop that swallows errors, cheap loops around expensive C calls
 * (utf8.len, table.concat), the same inside a coroutine, and a script over
 * its memory cap; each within a bounded time and with a one-line reason.
 * A well-behaved script (finalizers, handlers, coroutines) runs as in Lua.
 * (A finalizer that loops ends the process by design: see test_hostile.py.) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <lua.h>

#include "check.h"
#include "lua_host.h"
#include "scratch.h"

/* The process's CPU time: the bound these checks hold (a loaded host
 * stretches the wall time of a legitimate close several times over). */
static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return (double)t.tv_sec + t.tv_nsec / 1e9;
}

/* Run src as a script under timeout_s (0 none) and memory (0 default).
 * OUT: *msg, *dt (CPU seconds). Returns run_main's status. */
static int run_script(const char *src, double timeout_s, size_t memory, bf_err *msg, double *dt) {
  const char *path = tmp_path("s.lua");
  FILE *f = fopen(path, "w");
  CHECK(f != NULL);
  if (!f) return -1;
  fputs(src, f);
  fclose(f);
  bf_err err = BF_ERR_INIT;
  bf_lua_opts o = {.db_path = tmp_path("none.db"), .sandbox = 1, .timeout_s = timeout_s, .memory_bytes = memory};
  lua_State *L = bf_lua_new(&o, &err);
  CHECK(L != NULL);
  if (!L) return -1;
  double t0 = now_s();
  int rc = bf_lua_run_main(L, path, 0, NULL, msg);
  *dt = now_s() - t0;
  unlink(path);
  return rc;
}

static const struct attack {
  const char *name, *src;
} attacks[] = {
    {"xpcall handler", "print(xpcall(function() error('x') end, function() while true do end end))\n"},
    {"xpcall handler in a loop",
     "while true do xpcall(function() error('x') end, function() while true do end end) end\n"},
    {"pcall swallowing", "while true do pcall(function() while true do end end) end\n"},
    {"utf8.len loop", "local s=('a'):rep(2^22) for i=1,1e9 do utf8.len(s) end\n"},
    {"table.concat loop",
     "local s=('a'):rep(2^20) local t={} for i=1,64 do t[i]=s end for i=1,1e9 do table.concat(t) end\n"},
    {"coroutine utf8.len loop",
     "local s=('a'):rep(2^22) coroutine.wrap(function() for i=1,1e9 do utf8.len(s) end end)()\n"},
    {"coroutine.resume loop",
     "local s=('a'):rep(2^22) print(coroutine.resume(coroutine.create(function() for i=1,1e9 do utf8.len(s) "
     "end end)))\nwhile true do end\n"},
    /* collected as it goes: left to pile up, its finalizers at close took
     * ~0.44 s of CPU, and a loaded host stretched that past the 2 s grace */
    {"error in a finalizer's handler",
     "for i=1,1e9 do setmetatable({}, {__gc=function() error('x') end}) if i % 1000 == 0 then collectgarbage() end end\n"},
};

static void test_timeouts(void) {
  for (size_t i = 0; i < sizeof attacks / sizeof attacks[0]; i++) {
    bf_err msg = BF_ERR_INIT;
    double dt = 0;
    int rc = run_script(attacks[i].src, 0.5, 0, &msg, &dt);
    if (rc != 2 || !strstr(msg.msg, "timed out after 0.5 s") || dt > 2.5)
      fprintf(stderr, "%s: rc %d after %.2f s: %s\n", attacks[i].name, rc, dt, msg.msg);
    CHECK_EQ_INT(rc, 2);
    CHECK(strstr(msg.msg, "timed out after 0.5 s") && !strchr(msg.msg, '\n'));
    CHECK(dt < 2.5);
  }
}

static void test_memory_cap(void) {
  bf_err msg = BF_ERR_INIT;
  double dt = 0;
  int rc = run_script("local t = {} for i = 1, 1e9 do t[i] = ('x'):rep(1000) .. i end\n", 20, 32u << 20, &msg, &dt);
  CHECK_EQ_INT(rc, 2);
  CHECK(strstr(msg.msg, "memory cap of 32 MiB"));
  CHECK(dt < 10);
}

static void test_ordinary(void) {
  bf_err msg = BF_ERR_INIT;
  double dt = 0;
  const char *out = tmp_path("out.txt");
  char src[1024];
  snprintf(src, sizeof src,
           "local n = 0\n"
           "do local t = setmetatable({}, {__gc=function() n = n + 1 end}) end\n"
           "collectgarbage(); collectgarbage()\n"
           "local ok, m = xpcall(function() error('boom', 0) end, function(e) return 'handled ' .. e end)\n"
           "local co = coroutine.wrap(function(a) local b = coroutine.yield(a + 1) return b * 2 end)\n"
           "local r1 = co(1); local r2 = co(21)\n"
           "local ok2, v = coroutine.resume(coroutine.create(function() return utf8.len('h\\u{e9}') end))\n"
           "local bad = coroutine.wrap(function() error('inner', 0) end)\n"
           "local ok3, e3 = pcall(bad)\n"
           "assert(n == 1 and not ok and m == 'handled boom' and r1 == 2 and r2 == 42 and ok2 and v == 2)\n"
           "assert(not ok3 and e3 == 'inner')\n");
  (void)out;
  int rc = run_script(src, 10, 0, &msg, &dt);
  if (rc != 0) fprintf(stderr, "ordinary script: rc %d: %s\n", rc, msg.msg);
  CHECK_EQ_INT(rc, 0);
}

int main(void) {
  snprintf(scratch_dir(), SCRATCH_DIR_LEN, "/tmp/bf-luabudget-XXXXXX");
  if (!mkdtemp(scratch_dir())) return 1;
  /* scripts print; the test is not interested */
  if (!freopen("/dev/null", "w", stdout)) return 1;
  test_ordinary();
  test_timeouts();
  test_memory_cap();
  rmdir(scratch_dir());
  return CHECK_DONE();
}
