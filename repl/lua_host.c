/* lua_host.c — the host of the `bifocal` Lua module, for `bifocal run` and
 * the REPL (as lua.c is Lua's): the sandbox (restricted base library, text
 * chunks only, writes under --out only), the memory cap, the deadline and
 * Ctrl-C, where scripts are found, running chunks, and all printing (values,
 * the verdict table). The module itself lives in core/lua/ and never prints.
 */
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include <lauxlib.h>
#include <lualib.h>

#include "clock.h"
#include "lua_bifocal.h"
#include "lua_host.h"
#include "store.h"
#include "text.h"

/* Per-state context of the host, a userdata in the registry under HOST_KEY. */
typedef struct host_ctx {
  int sandbox;
  char out_real[PATH_MAX];  /* realpath of --out, "" = none */
  double timeout_s;
  struct timespec deadline; /* valid when timeout_s > 0 */
  int armed;                /* a chunk is running: deadline and Ctrl-C apply */
  int printed;              /* checks already shown in a verdict table */
  char stop_msg[256];       /* why the running chunk was stopped ("" = it was not) */
  const char *script;       /* the file bf_lua_run_file runs (borrowed), NULL otherwise */
} host_ctx;

/* The allocator's accounting (lua_setallocf ud). Freed by the allocator itself
 * when Lua frees its last block at lua_close (used back to 0), so a plain
 * lua_close needs no companion call. */
typedef struct lua_mem {
  size_t used, limit, peak;
  int refused; /* an allocation was refused for the cap */
} lua_mem;

static const char HOST_KEY = 'h'; /* registry: host_ctx userdata */

/* The budget outside the hook. A stop (Ctrl-C, the deadline) sets
 * stop_pending; from then on the allocator refuses every growth (so a C call
 * that allocates fails at once, also inside a finalizer, where Lua runs no
 * hooks) and the count hook of the running state is set to fire at every
 * instruction. armed_L and running_L (the coroutine being resumed) are what
 * a signal handler may call lua_sethook on (as lua.c does). */
static volatile sig_atomic_t interrupted;
static volatile sig_atomic_t stop_pending;
static lua_State *volatile armed_L;
static lua_State *volatile running_L;
static volatile sig_atomic_t stop_cause; /* 1 interrupted, 2 the deadline; cleared by arm */
static volatile sig_atomic_t closing; /* bf_lua_run_main is closing its state (finalizers run) */

static void stop_hook(lua_State *L, lua_Debug *ar);

/* Async-signal-safe: make the armed state (and the coroutine it runs) stop at
 * its next instruction. */
static void stop_soon(void) {
  stop_pending = 1;
  lua_State *L = armed_L, *co = running_L;
  if (L) lua_sethook(L, stop_hook, LUA_MASKCOUNT, 1);
  if (co) lua_sethook(co, stop_hook, LUA_MASKCOUNT, 1);
}

static void hard_exit(const char *msg) {
  ssize_t w = write(STDERR_FILENO, msg, strlen(msg));
  (void)w;
  _exit(2);
}

void bf_lua_interrupt(void) {
  if (interrupted && (armed_L || closing))
    hard_exit("bifocal: interrupted again: the script did not stop (a finalizer or a C call that does not "
              "return); exiting\n");
  interrupted = 1;
  if (!stop_cause) stop_cause = 1;
  bf_store_interrupt(); /* a query of the script stops too */
  stop_soon();
}

static host_ctx *getctx(lua_State *L) {
  lua_rawgetp(L, LUA_REGISTRYINDEX, &HOST_KEY);
  host_ctx *c = lua_touserdata(L, -1);
  lua_pop(L, 1);
  return c;
}

/* ---- sandbox ------------------------------------------------------------------- */

static int refused(lua_State *L) {
  return luaL_error(L, "%s is refused by the sandbox (run with --unsafe to allow it)",
                    lua_tostring(L, lua_upvalueindex(1)));
}

static void refuse(lua_State *L, const char *lib, const char *fn) {
  if (lua_getglobal(L, lib) != LUA_TTABLE) {
    lua_pop(L, 1);
    return;
  }
  lua_pushfstring(L, "%s.%s", lib, fn);
  lua_pushcclosure(L, refused, 1);
  lua_setfield(L, -2, fn);
  lua_pop(L, 1);
}

/* 0 when path lies under the --out directory; else raises with a clear message. */
static void check_write_path(lua_State *L, const char *path, const char *what) {
  host_ctx *c = getctx(L);
  if (!c->sandbox) return;
  if (!c->out_real[0])
    luaL_error(L, "%s '%s' is refused by the sandbox: give --out DIR and write under it (or run with --unsafe)",
               what, path);
  char resolved[PATH_MAX];
  struct stat st;
  int ok = 0;
  if (realpath(path, resolved)) {
    ok = 1;
  } else if (lstat(path, &st) != 0) { /* a new file: resolve its directory */
    char dir[PATH_MAX];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    const char *base = path;
    if (slash) {
      *slash = 0;
      base = slash + 1;
      if (!dir[0]) snprintf(dir, sizeof dir, "/");
    } else {
      snprintf(dir, sizeof dir, ".");
    }
    char rdir[PATH_MAX];
    if (*base && strcmp(base, ".") && strcmp(base, "..") && realpath(dir, rdir) &&
        (size_t)snprintf(resolved, sizeof resolved, "%s/%s", rdir, base) < sizeof resolved)
      ok = 1;
  }
  size_t lo = strlen(c->out_real);
  if (!ok || strncmp(resolved, c->out_real, lo) != 0 || (resolved[lo] != '/' && !(lo == 1 && c->out_real[0] == '/')))
    luaL_error(L, "%s '%s' is refused by the sandbox: only files under --out %s may be written (or run with --unsafe)",
               what, path, c->out_real);
}

/* Call the wrapped function (upvalue 1) with this call's arguments and return
 * all it returns; files it creates are 0600, like every output, when
 * private_files is set. */
static int call_wrapped(lua_State *L, int private_files) {
  lua_pushvalue(L, lua_upvalueindex(1));
  lua_insert(L, 1);
  mode_t um = private_files ? umask(077) : 0;
  lua_call(L, lua_gettop(L) - 1, LUA_MULTRET);
  if (private_files) umask(um);
  return lua_gettop(L);
}

static int sb_io_open(lua_State *L) {
  const char *path = luaL_checkstring(L, 1);
  const char *mode = luaL_optstring(L, 2, "r");
  int w = strpbrk(mode, "wa+") != NULL;
  if (w) check_write_path(L, path, "writing");
  return call_wrapped(L, w);
}

static int sb_io_output(lua_State *L) {
  int w = lua_type(L, 1) == LUA_TSTRING;
  if (w) check_write_path(L, lua_tostring(L, 1), "writing");
  return call_wrapped(L, w);
}

static int sb_os_remove(lua_State *L) {
  check_write_path(L, luaL_checkstring(L, 1), "removing");
  return call_wrapped(L, 0);
}

static int sb_os_rename(lua_State *L) {
  check_write_path(L, luaL_checkstring(L, 1), "renaming");
  check_write_path(L, luaL_checkstring(L, 2), "renaming to");
  return call_wrapped(L, 0);
}

/* Lua's "attempt to load a binary chunk (mode is 't')" on top of the stack,
 * said as the sandbox's refusal (other messages are left alone). */
static void say_refused(lua_State *L) {
  const char *m = lua_tostring(L, -1);
  const char *hit = m ? strstr(m, "attempt to load a binary chunk") : NULL;
  if (!hit) return;
  lua_pushfstring(L, "%sbinary chunks are refused by the sandbox (run with --unsafe to allow them)",
                  lua_pushlstring(L, m, (size_t)(hit - m)));
  lua_remove(L, -2);
  lua_remove(L, -2);
}

/* load/loadfile with text chunks only: precompiled bytecode is not verified by
 * Lua and can break memory safety. */
static int sb_load(lua_State *L) {
  /* an absent env stays absent: load then uses the sandbox's globals as _ENV
   * (an explicit nil would leave the chunk without any) */
  int n = lua_gettop(L) > 4 ? 4 : lua_gettop(L) < 3 ? 3 : lua_gettop(L);
  lua_settop(L, n);
  if (!lua_isnil(L, 3) && strcmp(luaL_checkstring(L, 3), "t") != 0)
    return luaL_error(L, "binary chunks are refused by the sandbox (run with --unsafe to allow them)");
  lua_pushliteral(L, "t");
  lua_replace(L, 3);
  lua_pushvalue(L, lua_upvalueindex(1));
  lua_insert(L, 1);
  lua_call(L, n, LUA_MULTRET);
  if (lua_gettop(L) == 2 && lua_isnil(L, 1)) say_refused(L);
  return lua_gettop(L);
}

static int sb_loadfile(lua_State *L) {
  int env = !lua_isnone(L, 3); /* as loadfile: an explicit nil env is an env */
  lua_settop(L, 3);
  if (!lua_isnil(L, 2) && strcmp(luaL_checkstring(L, 2), "t") != 0)
    return luaL_error(L, "binary chunks are refused by the sandbox (run with --unsafe to allow them)");
  const char *fname = luaL_optstring(L, 1, NULL);
  if (luaL_loadfilex(L, fname, "t") == LUA_OK) {
    if (env) {
      lua_pushvalue(L, 3);
      if (!lua_setupvalue(L, -2, 1)) lua_pop(L, 1);
    }
    return 1;
  }
  say_refused(L);
  luaL_pushfail(L);
  lua_insert(L, -2);
  return 2;
}

static int sb_dofile(lua_State *L) {
  const char *fname = luaL_optstring(L, 1, NULL);
  lua_settop(L, 1);
  if (luaL_loadfilex(L, fname, "t") != LUA_OK) {
    say_refused(L);
    return lua_error(L);
  }
  lua_call(L, 0, LUA_MULTRET);
  return lua_gettop(L) - 1;
}

/* package.searchers[2] of the sandbox: Lua files on package.path, loaded as
 * text only (the stock searcher accepts precompiled chunks). */
static int sb_lua_searcher(lua_State *L) {
  const char *name = luaL_checkstring(L, 1);
  lua_getglobal(L, "package");
  if (!lua_istable(L, -1)) return 0;
  lua_getfield(L, -1, "searchpath");
  lua_pushvalue(L, 1);
  lua_getfield(L, -3, "path");
  if (!lua_isstring(L, -1)) return luaL_error(L, "'package.path' must be a string");
  lua_call(L, 2, 2); /* searchpath(name, path) -> filename | nil, msg */
  if (lua_isnil(L, -2)) return 1; /* the "no file ..." message */
  const char *file = lua_tostring(L, -2);
  if (!file) return 0;
  if (luaL_loadfilex(L, file, "t") != LUA_OK) {
    say_refused(L);
    return luaL_error(L, "error loading module '%s' from file '%s':\n\t%s", name, file, lua_tostring(L, -1));
  }
  lua_pushvalue(L, -3); /* loader data: the file name */
  return 2;
}

static int sb_c_searcher(lua_State *L) {
  lua_pushfstring(L, "\n\tC module '%s' is refused by the sandbox (run with --unsafe to allow it)",
                  luaL_checkstring(L, 1));
  return 1;
}

static void wrap(lua_State *L, const char *lib, const char *fn, lua_CFunction w) {
  if (lib) {
    lua_getglobal(L, lib);
    lua_getfield(L, -1, fn);
  } else {
    lua_getglobal(L, fn);
  }
  lua_pushcclosure(L, w, 1);
  if (lib) {
    lua_setfield(L, -2, fn);
    lua_pop(L, 1);
  } else {
    lua_setglobal(L, fn);
  }
}

static void apply_sandbox(lua_State *L) {
  refuse(L, "os", "execute");
  refuse(L, "os", "tmpname");
  refuse(L, "io", "popen");
  refuse(L, "package", "loadlib");
  wrap(L, "io", "open", sb_io_open);
  wrap(L, "io", "output", sb_io_output);
  wrap(L, "os", "remove", sb_os_remove);
  wrap(L, "os", "rename", sb_os_rename);
  wrap(L, NULL, "load", sb_load);
  lua_pushcfunction(L, sb_loadfile);
  lua_setglobal(L, "loadfile");
  lua_pushcfunction(L, sb_dofile);
  lua_setglobal(L, "dofile");
  /* package: Lua modules as text only, no C searchers (3: cpath, 4:
   * all-in-one), an empty cpath and no loadlib */
  lua_getglobal(L, "package");
  lua_pushliteral(L, "");
  lua_setfield(L, -2, "cpath");
  lua_getfield(L, -1, "searchers");
  lua_pushcfunction(L, sb_lua_searcher);
  lua_rawseti(L, -2, 2);
  lua_pushcfunction(L, sb_c_searcher);
  lua_rawseti(L, -2, 3);
  lua_pushnil(L);
  lua_rawseti(L, -2, 4);
  lua_pop(L, 1);
  /* debug: keep traceback only (sethook would lift the timeout, getregistry
   * would reach the sandbox's own state) */
  lua_getfield(L, -1, "loaded");
  lua_createtable(L, 0, 1);
  lua_getglobal(L, "debug");
  lua_getfield(L, -1, "traceback");
  lua_setfield(L, -3, "traceback");
  lua_pop(L, 1);
  lua_pushvalue(L, -1);
  lua_setglobal(L, "debug");
  lua_setfield(L, -2, "debug");
  lua_pop(L, 2);
}

/* ---- timeout, Ctrl-C and the memory cap --------------------------------------- */

/* lua_Alloc with a cap: a growth past the limit is refused (Lua then raises
 * "not enough memory" after an emergency collection). */
static void *capped_alloc(void *ud, void *ptr, size_t osize, size_t nsize) {
  lua_mem *m = ud;
  if (!ptr) osize = 0; /* then osize is a type tag, not a size */
  if (nsize == 0) {
    free(ptr);
    m->used -= osize;
    if (m->used == 0) free(m); /* lua_close freed the state's last block */
    return NULL;
  }
  if (nsize > osize && stop_pending) return NULL; /* the script is being stopped */
  if (nsize > osize && (nsize - osize > m->limit || m->used + (nsize - osize) > m->limit)) {
    m->refused = 1;
    return NULL;
  }
  void *r = realloc(ptr, nsize);
  if (r) {
    m->used = m->used - osize + nsize;
    if (m->used > m->peak) m->peak = m->used;
  }
  return r;
}

static lua_mem *getmem(lua_State *L) {
  void *ud = NULL;
  return lua_getallocf(L, &ud) == capped_alloc ? ud : NULL;
}

/* Why the running chunk must stop (into buf), or NULL to go on. */
static const char *stop_reason(host_ctx *c, char *buf, size_t len) {
  if (!c || !c->armed) return NULL;
  if (interrupted) return "interrupted";
  if (c->timeout_s > 0) {
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    if (now.tv_sec > c->deadline.tv_sec || (now.tv_sec == c->deadline.tv_sec && now.tv_nsec >= c->deadline.tv_nsec)) {
      snprintf(buf, len, "timed out after %g s (--timeout)", c->timeout_s);
      return buf;
    }
  }
  return NULL;
}

static void stop(lua_State *L, const char *why) {
  host_ctx *c = getctx(L);
  if (c && !c->stop_msg[0]) {
    snprintf(c->stop_msg, sizeof c->stop_msg, "%s", why);
    lua_Debug d;
    for (int level = 0; lua_getstack(L, level, &d); level++)
      if (lua_getinfo(L, "Sl", &d) && d.currentline > 0) {
        snprintf(c->stop_msg, sizeof c->stop_msg, "%s:%d: %s", d.short_src, d.currentline, why);
        break;
      }
  }
  /* every instruction from now on fails, so a pcall loop cannot swallow it,
   * and every allocation, so a C function cannot either */
  stop_pending = 1;
  lua_sethook(L, stop_hook, LUA_MASKCOUNT, 1);
  /* Raised as a memory error (the allocator refuses now): Lua calls no
   * message handler for those, so a looping xpcall handler never runs. */
  lua_newuserdatauv(L, 1, 0);
  lua_pushstring(L, c && c->stop_msg[0] ? c->stop_msg : why);
  lua_error(L);
}

/* The budget of the running chunk (bf_lua_bounded_strlib and the hook):
 * raise "timed out after S s (--timeout)" or "interrupted" when it is over
 * its deadline or Ctrl-C was pressed; return otherwise. */
static void budget(lua_State *L) {
  char buf[96];
  const char *why = stop_reason(getctx(L), buf, sizeof buf);
  if (why) stop(L, why);
}

/* Installed for the state's whole life (coroutines inherit it when created);
 * it only acts while a chunk runs. */
static void stop_hook(lua_State *L, lua_Debug *ar) {
  (void)ar;
  budget(L);
}

static void arm(lua_State *L) {
  host_ctx *c = getctx(L);
  interrupted = 0;
  stop_pending = 0;
  stop_cause = 0;
  bf_store_interrupt_clear();
  c->stop_msg[0] = 0;
  c->script = NULL;
  if (c->timeout_s > 0) {
    clock_gettime(CLOCK_MONOTONIC, &c->deadline);
    double whole = floor(c->timeout_s);
    c->deadline.tv_sec += (time_t)whole;
    c->deadline.tv_nsec += (long)((c->timeout_s - whole) * 1e9);
    if (c->deadline.tv_nsec >= 1000000000L) {
      c->deadline.tv_sec++;
      c->deadline.tv_nsec -= 1000000000L;
    }
  }
  c->armed = 1;
  lua_mem *m = getmem(L);
  if (m) m->refused = 0;
  lua_sethook(L, stop_hook, LUA_MASKCOUNT, 1000);
  armed_L = L;
}

static void disarm(lua_State *L) {
  armed_L = NULL;
  running_L = NULL;
  getctx(L)->armed = 0;
  stop_pending = 0;
  interrupted = 0;
  bf_store_interrupt_clear();
  lua_sethook(L, stop_hook, LUA_MASKCOUNT, 1000);
}

static char *take_msg(lua_State *L);

/* ---- coroutines: the one being resumed is where a stop must land -------------- */

/* Re-raise the error of a resume: a stop stays a stop (a memory error, no
 * message handler), anything else as it was. */
static int rethrow(lua_State *L) {
  host_ctx *c = getctx(L);
  if (c && c->stop_msg[0]) stop(L, c->stop_msg);
  return lua_error(L);
}

/* Call upvalue 1 with this call's arguments while running_L is co. */
static int call_running(lua_State *L, lua_State *co) {
  lua_State *prev = running_L;
  lua_pushvalue(L, lua_upvalueindex(1));
  lua_insert(L, 1);
  if (co) running_L = co;
  int st = lua_pcall(L, lua_gettop(L) - 1, LUA_MULTRET, 0);
  running_L = prev;
  return st == LUA_OK ? lua_gettop(L) : rethrow(L);
}

static int co_resume(lua_State *L) { return call_running(L, lua_tothread(L, 1)); }

/* The function coroutine.wrap made (upvalue 1), its coroutine (upvalue 2). */
static int co_wrapped(lua_State *L) { return call_running(L, lua_tothread(L, lua_upvalueindex(2))); }

static int co_wrap(lua_State *L) {
  lua_pushvalue(L, lua_upvalueindex(1));
  lua_insert(L, 1);
  lua_call(L, lua_gettop(L) - 1, 1);
  if (!lua_getupvalue(L, -1, 1)) lua_pushnil(L); /* Lua's wrap keeps the coroutine as upvalue 1 */
  lua_pushcclosure(L, co_wrapped, 2);
  return 1;
}

/* The message of a failed chunk; an allocation refused for the cap becomes a
 * clear line instead of Lua's "not enough memory". */
static char *fail_msg(lua_State *L, int st) {
  host_ctx *c = getctx(L);
  if (c->stop_msg[0]) { /* stopped: whatever error unwound the chunk says so */
    lua_pop(L, 1);
    char *r = strdup(c->stop_msg);
    c->stop_msg[0] = 0;
    return r ? r : strdup("stopped");
  }
  if (stop_cause) { /* stopped by the watchdog at an allocation: no position known */
    char *r = NULL;
    const char *at = c->script ? c->script : "", *sep = c->script ? ": " : "";
    if (stop_cause == 1 ? asprintf(&r, "%s%sinterrupted", at, sep) < 0
                        : asprintf(&r, "%s%stimed out after %g s (--timeout)", at, sep, c->timeout_s) < 0)
      r = NULL;
    lua_pop(L, 1);
    return r ? r : strdup("stopped");
  }
  lua_mem *m = getmem(L);
  const char *orig = lua_tostring(L, -1);
  if (st == LUA_ERRMEM || (orig && strstr(orig, "not enough memory"))) {
    if (m && m->refused) {
      char *r = NULL;
      /* keep "file:line: " when the message has one */
      const char *pos = orig ? strstr(orig, ": not enough memory") : NULL;
      int plen = pos ? (int)(pos - orig) : 0;
      if (asprintf(&r, "%.*s%sscript exceeded the memory cap of %.0f MiB (raise it with --memory, e.g. --memory 4G)",
                   plen, pos ? orig : "", pos ? ": " : "", (double)m->limit / 1048576.0) < 0)
        r = NULL;
      m->refused = 0;
      lua_pop(L, 1);
      return r ? r : strdup("script exceeded the memory cap (raise it with --memory)");
    }
  }
  return take_msg(L);
}

/* ---- the verdict table ---------------------------------------------------------- */

/* Display width of UTF-8 text (code points; good enough for the names here). */
static size_t u8width(const char *s) {
  size_t w = 0;
  for (; *s; s++)
    if (((unsigned char)*s & 0xC0) != 0x80) w++;
  return w;
}

static void pad(FILE *out, const char *s, size_t width) {
  fputs(s, out);
  for (size_t w = u8width(s); w < width; w++) fputc(' ', out);
}

static void print_verdict(lua_State *L, FILE *out) {
  int n_failed = 0, n_checks = bf_lua_checks(L, &n_failed);
  const char *name, *detail;
  int ok;
  size_t w = 5;
  for (int i = 1; i <= n_checks; i++) {
    bf_lua_check_at(L, i, &name, &ok, &detail);
    char nb[512];
    size_t l = u8width(bf_inert(name, nb, sizeof nb));
    if (l > w) w = l;
  }
  int tty = isatty(fileno(out)) && !getenv("NO_COLOR");
  pad(out, "CHECK", w);
  fputs("  RESULT  DETAIL\n", out);
  for (int i = 1; i <= n_checks; i++) {
    bf_lua_check_at(L, i, &name, &ok, &detail);
    char nb[512], db[2048]; /* names in checks come from profiles: shown inert */
    pad(out, bf_inert(name, nb, sizeof nb), w);
    fputs(ok ? (tty ? "  \033[32mok\033[0m    " : "  ok    ") : (tty ? "  \033[31mFAILED\033[0m" : "  FAILED"), out);
    fprintf(out, "  %s\n", detail ? bf_inert(detail, db, sizeof db) : "");
  }
  fprintf(out, "verdict: %s (%d check%s, %d failed)\n", n_failed ? "FAIL" : "PASS", n_checks,
          n_checks == 1 ? "" : "s", n_failed);
  fflush(out);
  getctx(L)->printed = n_checks;
}

/* bifocal.verdict() shows the table on stdout, after what the script wrote. */
static void show_verdict(lua_State *L) {
  fflush(stdout);
  print_verdict(L, stdout);
}

lua_State *bf_lua_new(const bf_lua_opts *o, bf_err *err) {
  lua_State *L = luaL_newstate();
  if (!L) {
    bf_err_set(err, -ENOMEM, "not enough memory for the Lua interpreter");
    return NULL;
  }
  lua_mem *m = calloc(1, sizeof *m);
  if (!m) {
    lua_close(L);
    bf_err_set(err, -ENOMEM, "not enough memory for the Lua interpreter");
    return NULL;
  }
  /* count from what the state already holds, so used returns to exactly 0
   * when lua_close frees the last block */
  m->used = (size_t)lua_gc(L, LUA_GCCOUNT) * 1024 + (size_t)lua_gc(L, LUA_GCCOUNTB);
  m->limit = o && o->memory_bytes ? o->memory_bytes : BF_LUA_DEFAULT_MEMORY;
  if (m->limit < m->used + (1u << 20)) m->limit = m->used + (1u << 20);
  lua_setallocf(L, capped_alloc, m);
  host_ctx *c = lua_newuserdatauv(L, sizeof *c, 0);
  memset(c, 0, sizeof *c);
  c->sandbox = o ? o->sandbox : 1;
  c->timeout_s = o ? o->timeout_s : 0;
  if (o && o->out_dir) {
    struct stat st;
    if (!realpath(o->out_dir, c->out_real) || stat(c->out_real, &st) != 0 || !S_ISDIR(st.st_mode)) {
      bf_err_set(err, -ENOTDIR, "--out '%s' is not a directory (create it first)", o->out_dir);
      lua_close(L);
      return NULL;
    }
  }
  lua_rawsetp(L, LUA_REGISTRYINDEX, &HOST_KEY);
  bf_lua_module_opts mo = {.db_path = o && o->db_path ? o->db_path : "bifocal.db",
                           .out_dir = c->out_real[0] ? c->out_real : NULL,
                           .show_verdict = show_verdict};
  bf_lua_module_setup(L, &mo);
  luaL_openlibs(L);
  bf_lua_bounded_strlib(L, budget);
  wrap(L, "coroutine", "resume", co_resume);
  wrap(L, "coroutine", "wrap", co_wrap);
  if (c->sandbox) apply_sandbox(L);
  luaL_requiref(L, "bifocal", luaopen_bifocal, 1);
  lua_pop(L, 1);
  lua_sethook(L, stop_hook, LUA_MASKCOUNT, 1000);
  return L;
}

/* ---- finding scripts ------------------------------------------------------------ */

/* $BIFOCAL_SCRIPTS, then: a binary inside the build tree reads the source
 * tree's scripts/; any other (installed) binary only its own data directory,
 * found relative to the executable (so --destdir installs work), else the
 * configured install path. */
static void script_dirs(const char *dirs[3]) {
  static char exe_rel[PATH_MAX];
  const char *env = getenv("BIFOCAL_SCRIPTS");
  dirs[0] = env && *env ? env : NULL;
  dirs[1] = BF_SCRIPTS_INSTALL_DIR;
  dirs[2] = NULL;
  char exe[PATH_MAX], root[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n <= 0) return;
  exe[n] = 0;
  size_t rl = realpath(BF_BUILD_ROOT, root) ? strlen(root) : 0;
  if (rl && strncmp(exe, root, rl) == 0 && exe[rl] == '/') {
    dirs[1] = BF_SCRIPTS_SRC_DIR;
    return;
  }
  char *slash = strrchr(exe, '/');
  if (BF_SCRIPTS_EXE_REL[0] != '/' && slash) {
    *slash = 0;
    if ((size_t)snprintf(exe_rel, sizeof exe_rel, "%s/%s", exe, BF_SCRIPTS_EXE_REL) < sizeof exe_rel &&
        access(exe_rel, R_OK) == 0)
      dirs[1] = exe_rel;
  }
}

void bf_lua_script_names(void (*fn)(void *ud, const char *name), void *ud) {
  const char *dirs[3];
  script_dirs(dirs);
  for (size_t i = 0; i < 3; i++) {
    DIR *d = dirs[i] ? opendir(dirs[i]) : NULL;
    if (!d) continue;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
      size_t l = strlen(e->d_name);
      if (l > 4 && strcmp(e->d_name + l - 4, ".lua") == 0) fn(ud, e->d_name);
    }
    closedir(d);
  }
}

const char *bf_lua_find_script(const char *name, char *buf, size_t len) {
  if (access(name, R_OK) == 0 || strchr(name, '/')) return name;
  const char *dirs[3];
  script_dirs(dirs);
  for (size_t i = 0; i < sizeof dirs / sizeof dirs[0]; i++) {
    if (!dirs[i]) continue;
    char cand[PATH_MAX];
    if ((size_t)snprintf(cand, sizeof cand, "%s/%s", dirs[i], name) >= sizeof cand) continue;
    if (access(cand, R_OK) == 0 && len >= PATH_MAX && realpath(cand, buf)) return buf;
  }
  return name;
}

/* ---- running chunks ------------------------------------------------------------- */

/* Message handler: make sure the message reads "file:line: message". */
static int msgh(lua_State *L) {
  const char *msg = lua_tostring(L, 1);
  if (!msg) {
    if (luaL_callmeta(L, 1, "__tostring") && lua_type(L, -1) == LUA_TSTRING)
      msg = lua_tostring(L, -1);
    else
      msg = lua_pushfstring(L, "(error object is a %s value)", luaL_typename(L, 1));
  }
  /* has a position already? "something:123: " */
  const char *colon = strchr(msg, ':');
  int has_pos = 0;
  if (colon && colon > msg) {
    const char *p = colon + 1;
    while (*p >= '0' && *p <= '9') p++;
    has_pos = p > colon + 1 && *p == ':' && memchr(msg, '\n', (size_t)(colon - msg)) == NULL;
  }
  if (!has_pos) {
    lua_Debug ar;
    for (int level = 1; lua_getstack(L, level, &ar); level++) {
      lua_getinfo(L, "Sl", &ar);
      if (ar.currentline > 0) {
        msg = lua_pushfstring(L, "%s:%d: %s", ar.short_src, ar.currentline, msg);
        break;
      }
    }
  }
  lua_pushstring(L, msg);
  return 1;
}

static int docall(lua_State *L, int narg, int nres) {
  int base = lua_gettop(L) - narg;
  lua_pushcfunction(L, msgh);
  lua_insert(L, base);
  int st = lua_pcall(L, narg, nres, base);
  lua_remove(L, base);
  return st;
}

static char *take_msg(lua_State *L) {
  const char *m = lua_tostring(L, -1);
  char *r = strdup(m ? m : "(error object is not a string)");
  lua_pop(L, 1);
  return r;
}

/* Lua shortens long chunk names to "...tail"; give the script's full path back
 * so the message reads "path:line: message". */
static char *full_path_msg(char *msg, const char *path) {
  if (!msg || strncmp(msg, "...", 3) != 0) return msg;
  const char *tail = msg + 3, *colon = strchr(tail, ':');
  while (colon) {
    const char *p = colon + 1;
    while (*p >= '0' && *p <= '9') p++;
    if (p > colon + 1 && *p == ':') break;
    colon = strchr(colon + 1, ':');
  }
  if (!colon) return msg;
  size_t tl = (size_t)(colon - tail), pl = strlen(path);
  if (tl > pl || strncmp(path + pl - tl, tail, tl) != 0) return msg;
  size_t n = pl + strlen(colon) + 1;
  char *r = malloc(n);
  if (!r) return msg;
  snprintf(r, n, "%s%s", path, colon);
  free(msg);
  return r;
}

/* A script error into err: msg (malloc'd, freed here; NULL when out of
 * memory: then err says "script error"). Returns BF_LUA_ERROR. */
static int set_msg(bf_err *err, char *msg) {
  bf_err_set(err, BF_LUA_ERROR, "%s", msg ? msg : "script error");
  free(msg);
  return BF_LUA_ERROR;
}

int bf_lua_run_file(lua_State *L, const char *path, int argc, char **argv, bf_err *err) {
  bf_err_clear(err);
  arm(L);
  getctx(L)->script = path;
  lua_createtable(L, argc, 1);
  lua_pushstring(L, path);
  lua_rawseti(L, -2, 0);
  for (int i = 0; i < argc; i++) {
    lua_pushstring(L, argv[i]);
    lua_rawseti(L, -2, i + 1);
  }
  lua_setglobal(L, "arg");
  int st = luaL_loadfilex(L, path, "t");
  if (st != LUA_OK) {
    disarm(L);
    return set_msg(err, full_path_msg(fail_msg(L, st), path));
  }
  if (!lua_checkstack(L, argc + 4)) {
    disarm(L);
    return bf_err_set(err, BF_LUA_ERROR, "too many script arguments");
  }
  for (int i = 0; i < argc; i++) lua_pushstring(L, argv[i]);
  st = docall(L, argc, 0);
  disarm(L);
  fflush(stdout);
  if (st != LUA_OK) {
    return set_msg(err, full_path_msg(fail_msg(L, st), path));
  }
  int n_failed = 0, n_checks = bf_lua_checks(L, &n_failed);
  if (n_checks > getctx(L)->printed) print_verdict(L, stdout);
  return n_failed ? BF_LUA_CHECK_FAILED : BF_LUA_OK;
}

static void on_sigint(int sig) {
  (void)sig;
  bf_lua_interrupt();
}

/* The watchdog's signal: stop the armed state at its next instruction (the
 * hook may be 1000 instructions of slow C calls away) and cut a blocking
 * read short (EINTR). */
static void on_sigalrm(int sig) {
  (void)sig;
  if (stop_pending) stop_soon();
}

/* Grace after a stop before the process exits on its own: a finalizer runs
 * without hooks, and a loop in one cannot be stopped from inside. */
#define HARD_GRACE_NS 2000000000LL

typedef struct watchdog {
  pthread_t main;
  double timeout_s;
  int64_t start_ns;
  volatile int done;
} watchdog;

/* Every 50 ms: past the deadline (or after Ctrl-C), stop the state and
 * signal the main thread; past the grace, end the process with a message. */
static void *watchdog_main(void *ud) {
  watchdog *w = ud;
  int64_t deadline = w->timeout_s > 0 ? w->start_ns + (int64_t)(w->timeout_s * 1e9) : 0, hard = 0;
  struct timespec tick = {0, 50000000L};
  while (!w->done) {
    nanosleep(&tick, NULL);
    if (w->done) break;
    int64_t now = bf_mono_ns();
    int timed_out = deadline && now >= deadline;
    if (timed_out) {
      if (!stop_cause) stop_cause = 2;
      stop_pending = 1;
      bf_store_interrupt();
    }
    if ((timed_out || interrupted) && !hard) hard = now + HARD_GRACE_NS;
    if (stop_pending || timed_out) pthread_kill(w->main, SIGALRM);
    if (hard && now >= hard) {
      char msg[256];
      snprintf(msg, sizeof msg,
               "bifocal: the script did not stop %s (a finalizer or a C call that does not return); "
               "exiting\n",
               interrupted ? "2 s after Ctrl-C" : "within 2 s of its --timeout");
      hard_exit(msg);
    }
  }
  return NULL;
}

int bf_lua_run_main(lua_State *L, const char *path, int argc, char **argv, bf_err *err) {
  /* no SA_RESTART: Ctrl-C or the deadline also ends a read that blocks */
  struct sigaction sa = {0}, old, old_term, sa_alrm = {0}, old_alrm;
  sa.sa_handler = on_sigint;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, &old);
  sigaction(SIGTERM, &sa, &old_term);
  sa_alrm.sa_handler = on_sigalrm;
  sigemptyset(&sa_alrm.sa_mask);
  sigaction(SIGALRM, &sa_alrm, &old_alrm);
  watchdog w = {.main = pthread_self(), .timeout_s = getctx(L)->timeout_s, .start_ns = bf_mono_ns()};
  pthread_t th;
  /* the watchdog gets no signal: they all go to the main thread */
  sigset_t all, prev;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &prev);
  int have_dog = pthread_create(&th, NULL, watchdog_main, &w) == 0;
  pthread_sigmask(SIG_SETMASK, &prev, NULL);
  int rc = bf_lua_run_file(L, path, argc, argv, err);
  /* the finalizers run at close: under the same deadline, Ctrl-C and grace
   * (no hooks run in a finalizer: the allocator and the grace stop them) */
  closing = 1;
  lua_close(L);
  closing = 0;
  if (have_dog) {
    w.done = 1;
    pthread_join(th, NULL);
  }
  /* the state is gone: the next one starts unstopped */
  stop_pending = 0;
  interrupted = 0;
  bf_store_interrupt_clear();
  sigaction(SIGALRM, &old_alrm, NULL);
  sigaction(SIGTERM, &old_term, NULL);
  sigaction(SIGINT, &old, NULL);
  return rc;
}

static void print_values(lua_State *L, int n) {
  if (n <= 0) return;
  int base = lua_gettop(L) - n;
  lua_getglobal(L, "bifocal");
  lua_getfield(L, -1, "repr");
  lua_remove(L, -2);
  for (int i = 1; i <= n; i++) {
    lua_pushvalue(L, -1);
    lua_pushvalue(L, base + i);
    if (lua_pcall(L, 1, 1, 0) != LUA_OK || !lua_isstring(L, -1)) {
      lua_pop(L, 1);
      luaL_tolstring(L, base + i, NULL);
    }
    bf_fputs_inert(stdout, lua_tostring(L, -1)); /* values may hold names from profiles */
    fputs(i < n ? "\t" : "\n", stdout);
    lua_pop(L, 1);
  }
  fflush(stdout);
  lua_settop(L, base);
}

static int incomplete(lua_State *L, int st) {
  if (st != LUA_ERRSYNTAX) return 0;
  size_t l;
  const char *m = lua_tolstring(L, -1, &l);
  static const char eof[] = "<eof>";
  return m && l >= sizeof eof - 1 && strcmp(m + l - (sizeof eof - 1), eof) == 0;
}

int bf_lua_exec(lua_State *L, const char *chunk, const char *chunkname, int print_results, bf_err *err) {
  bf_err_clear(err);
  int top = lua_gettop(L);
  int st = LUA_ERRSYNTAX;
  if (print_results) {
    const char *ret = lua_pushfstring(L, "return %s;", chunk);
    st = luaL_loadbufferx(L, ret, strlen(ret), chunkname, "t");
    lua_remove(L, -2);
    if (st != LUA_OK) lua_pop(L, 1);
  }
  if (st != LUA_OK) st = luaL_loadbufferx(L, chunk, strlen(chunk), chunkname, "t");
  if (incomplete(L, st)) {
    lua_settop(L, top);
    return BF_LUA_INCOMPLETE;
  }
  if (st != LUA_OK) {
    set_msg(err, take_msg(L));
    lua_settop(L, top);
    return BF_LUA_ERROR;
  }
  arm(L);
  st = docall(L, 0, LUA_MULTRET);
  disarm(L);
  fflush(stdout);
  if (st != LUA_OK) {
    set_msg(err, fail_msg(L, st));
    lua_settop(L, top);
    return BF_LUA_ERROR;
  }
  print_values(L, lua_gettop(L) - top);
  lua_settop(L, top);
  return BF_LUA_OK;
}
