/* lua_bifocal.c — the `bifocal` Lua module and the interpreter setup of
 * `bifocal run` and the REPL. Userdata: bifocal.db (an open store),
 * bifocal.session (one session of a db), bifocal.samples (an iteration
 * buffer). Each has one metatable recipe and a checkX accessor; resources are
 * created closed and released by __gc/__close.
 */
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <lauxlib.h>
#include <lualib.h>

#include "correlate.h"
#include "lua_bifocal.h"
#include "lua_sandbox.h"
#include "profile.h"
#include "query.h"
#include "store.h"
#include "text.h"
#include "util.h"

#define DB_MT "bifocal.db"
#define SESSION_MT "bifocal.session"
#define SAMPLES_MT "bifocal.samples"

/* Per-state context, a userdata in the registry under CTX_KEY. */
typedef struct lua_ctx {
  char db_path[PATH_MAX];
  int sandbox;
  char out_real[PATH_MAX]; /* realpath of --out, "" = none */
  double timeout_s;
  struct timespec deadline; /* valid when timeout_s > 0 */
  int armed;                /* a chunk is running: deadline and Ctrl-C apply */
  int n_checks, n_failed, printed;
} lua_ctx;

/* The allocator's accounting (lua_setallocf ud). Freed by the allocator itself
 * when Lua frees its last block at lua_close (used back to 0), so a plain
 * lua_close needs no companion call. */
typedef struct lua_mem {
  size_t used, limit, peak;
  int refused; /* an allocation was refused for the cap */
} lua_mem;

static const char CTX_KEY = 'c';    /* registry: lua_ctx userdata */
static const char CHECKS_KEY = 'k'; /* registry: array of {name, ok, detail} */
static const char DEFDB_KEY = 'd';  /* registry: default bifocal.db of bifocal.session() */

static volatile sig_atomic_t interrupted;

void bf_lua_interrupt(void) { interrupted = 1; }

static lua_ctx *getctx(lua_State *L) {
  lua_rawgetp(L, LUA_REGISTRYINDEX, &CTX_KEY);
  lua_ctx *c = lua_touserdata(L, -1);
  lua_pop(L, 1);
  return c;
}

/* ---- bifocal.db ---------------------------------------------------------- */

typedef struct ldb {
  bf_store *s; /* NULL = closed */
} ldb;

static ldb *todb(lua_State *L, int idx) { return luaL_checkudata(L, idx, DB_MT); }

static bf_store *checkdb(lua_State *L, int idx) {
  ldb *d = todb(L, idx);
  if (!d->s) luaL_error(L, "attempt to use a closed database");
  return d->s;
}

/* Push a closed db userdata (acquire after, so a failure leaves nothing to leak). */
static ldb *newdb(lua_State *L) {
  ldb *d = lua_newuserdatauv(L, sizeof *d, 0);
  d->s = NULL;
  luaL_setmetatable(L, DB_MT);
  return d;
}

/* bifocal.open([path]) → db | nil, msg. Read-only. */
static int l_open(lua_State *L) {
  lua_ctx *c = getctx(L);
  const char *path = luaL_optstring(L, 1, c->db_path);
  ldb *d = newdb(L);
  const char *msg = NULL;
  int rc = bf_store_open(path, BF_STORE_READONLY, &d->s, &msg);
  if (rc < 0) {
    d->s = NULL;
    luaL_pushfail(L);
    lua_pushfstring(L, "%s", msg ? msg : strerror(-rc));
    return 2;
  }
  return 1;
}

static int db_close(lua_State *L) {
  ldb *d = todb(L, 1);
  bf_store_close(d->s);
  d->s = NULL;
  return 0;
}

static int db_tostring(lua_State *L) {
  ldb *d = todb(L, 1);
  if (d->s)
    lua_pushfstring(L, "bifocal.db (%s)", bf_store_path(d->s));
  else
    lua_pushliteral(L, "bifocal.db (closed)");
  return 1;
}

static int db_path(lua_State *L) {
  lua_pushstring(L, bf_store_path(checkdb(L, 1)));
  return 1;
}

static void set_str(lua_State *L, const char *k, const char *v) {
  if (!v) return;
  lua_pushstring(L, v);
  lua_setfield(L, -2, k);
}
static void set_int(lua_State *L, const char *k, int64_t v) {
  lua_pushinteger(L, (lua_Integer)v);
  lua_setfield(L, -2, k);
}
static void set_num(lua_State *L, const char *k, double v) {
  if (!isfinite(v)) return; /* missing stays nil, never 0 */
  lua_pushnumber(L, v);
  lua_setfield(L, -2, k);
}
static void set_pos_int(lua_State *L, const char *k, int64_t v) {
  if (v >= 0) set_int(L, k, v);
}
static void set_bool(lua_State *L, const char *k, int v) {
  lua_pushboolean(L, v);
  lua_setfield(L, -2, k);
}
static void set_pair(lua_State *L, const char *k, double a, double b) {
  if (!isfinite(a) || !isfinite(b)) return;
  lua_createtable(L, 2, 0);
  lua_pushnumber(L, a);
  lua_rawseti(L, -2, 1);
  lua_pushnumber(L, b);
  lua_rawseti(L, -2, 2);
  lua_setfield(L, -2, k);
}

static void push_info(lua_State *L, const bf_session_info *in) {
  lua_createtable(L, 0, 28);
  set_int(L, "id", in->id);
  set_str(L, "kind", in->kind);
  set_str(L, "clock", in->clock);
  set_str(L, "mode", in->mode);
  lua_pushnumber(L, in->rate_hz);
  lua_setfield(L, -2, "rate_hz");
  lua_pushnumber(L, in->achieved_rate_hz);
  lua_setfield(L, -2, "achieved_rate_hz");
  set_int(L, "start_ns", in->start_ns);
  set_int(L, "duration_ns", in->duration_ns);
  lua_pushnumber(L, (double)in->duration_ns / 1e9);
  lua_setfield(L, -2, "duration_s");
  set_str(L, "host", in->host);
  set_int(L, "pid", in->pid);
  set_str(L, "command", in->command);
  set_str(L, "python_version", in->python_version);
  set_str(L, "python_build", in->python_build);
  set_str(L, "profiler_version", in->profiler_version);
  set_str(L, "commit", in->commit);
  set_str(L, "label", in->label);
  set_int(L, "samples", in->samples);
  set_int(L, "sample_count", in->samples); /* s.samples is the iterator method */
  set_int(L, "missed", in->missed);
  set_int(L, "invalid", in->invalid);
  set_int(L, "profiler_cpu_ns", in->profiler_cpu_ns);
  set_str(L, "status", in->status);
  set_int(L, "expires_at_ns", in->expires_at_ns);
  set_int(L, "parent_id", in->parent_id);
  set_bool(L, "redacted", in->redacted);
  set_int(L, "created_ns", in->created_ns);
  set_str(L, "extra_json", in->extra_json);
  char exe[1024], ver[64]; /* the interpreter that ran, from extra.python */
  bf_session_interp(in, exe, sizeof exe, ver, sizeof ver);
  if (exe[0]) set_str(L, "python_executable", exe);
}

/* Push a session userdata of the db at index dbi for session id (must exist). */
static int push_session(lua_State *L, int dbi, bf_store *s, int64_t id) {
  dbi = lua_absindex(L, dbi);
  bf_session_info *in = NULL;
  if (bf_store_session_get(s, id, &in) < 0) {
    luaL_pushfail(L);
    lua_pushstring(L, bf_store_errmsg(s));
    return 2;
  }
  int64_t *u = lua_newuserdatauv(L, sizeof *u, 2);
  *u = id;
  luaL_setmetatable(L, SESSION_MT);
  lua_pushvalue(L, dbi);
  lua_setiuservalue(L, -2, 1);
  push_info(L, in);
  bf_session_info_free(in);
  lua_setiuservalue(L, -2, 2);
  return 1;
}

/* db:session(id_or_label) → session | nil, msg */
static int db_session(lua_State *L) {
  bf_store *s = checkdb(L, 1);
  int64_t id;
  if (lua_isinteger(L, 2)) {
    id = lua_tointeger(L, 2);
  } else {
    const char *key = luaL_checkstring(L, 2);
    if (bf_store_session_resolve(s, key, &id) < 0) {
      luaL_pushfail(L);
      lua_pushstring(L, bf_store_errmsg(s));
      return 2;
    }
  }
  return push_session(L, 1, s, id);
}

/* db:sessions() → array of session objects, oldest first */
static int db_sessions(lua_State *L) {
  bf_store *s = checkdb(L, 1);
  bf_session_info **v = NULL;
  size_t n = 0;
  if (bf_store_session_list(s, &v, &n) < 0) return luaL_error(L, "%s", bf_store_errmsg(s));
  lua_createtable(L, (int)n, 0);
  int k = 0;
  for (size_t i = 0; i < n; i++) {
    int64_t id = v[i]->id;
    bf_session_info_free(v[i]);
    if (push_session(L, 1, s, id) == 1)
      lua_rawseti(L, -2, ++k);
    else
      lua_pop(L, 2);
  }
  free(v);
  return 1;
}

/* ---- bifocal.session ------------------------------------------------------ */

typedef struct lsession {
  int64_t id;
  bf_store *s;
} lsession;

/* Check a session argument; its db must be open. */
static lsession checksession(lua_State *L, int idx) {
  int64_t *u = luaL_checkudata(L, idx, SESSION_MT);
  lua_getiuservalue(L, idx, 1);
  ldb *d = lua_touserdata(L, -1);
  lua_pop(L, 1);
  if (!d || !d->s) luaL_error(L, "attempt to use a session of a closed database");
  return (lsession){*u, d->s};
}

static int session_tostring(lua_State *L) {
  int64_t *u = luaL_checkudata(L, 1, SESSION_MT);
  lua_getiuservalue(L, 1, 2);
  lua_getfield(L, -1, "kind");
  lua_getfield(L, -2, "clock");
  lua_getfield(L, -3, "label");
  const char *label = lua_tostring(L, -1);
  lua_pushfstring(L, "session %I (%s, %s clock%s%s)", (lua_Integer)*u, luaL_optstring(L, -3, "?"),
                  luaL_optstring(L, -2, "?"), label ? ", " : "", label ? label : "");
  return 1;
}

static int session_eq(lua_State *L) {
  int64_t *a = luaL_checkudata(L, 1, SESSION_MT), *b = luaL_checkudata(L, 2, SESSION_MT);
  lua_getiuservalue(L, 1, 1);
  lua_getiuservalue(L, 2, 1);
  lua_pushboolean(L, *a == *b && lua_rawequal(L, -1, -2));
  return 1;
}

/* s.field: a method, else a metadata field (s.kind, s.clock, s.duration_s, ...) */
static int session_index(lua_State *L) {
  luaL_checkudata(L, 1, SESSION_MT);
  luaL_getmetafield(L, 1, "__methods");
  lua_pushvalue(L, 2);
  if (lua_rawget(L, -2) != LUA_TNIL) return 1;
  lua_getiuservalue(L, 1, 2);
  lua_pushvalue(L, 2);
  lua_rawget(L, -2);
  return 1;
}

static int session_info(lua_State *L) {
  luaL_checkudata(L, 1, SESSION_MT);
  lua_getiuservalue(L, 1, 2);
  /* a copy, so a script editing it cannot change what s.kind says */
  lua_newtable(L);
  lua_pushnil(L);
  while (lua_next(L, -3)) {
    lua_pushvalue(L, -2);
    lua_insert(L, -2);
    lua_rawset(L, -4);
  }
  return 1;
}

static void push_func_row(lua_State *L, const bf_func_row *r, int traced) {
  lua_createtable(L, 0, 24);
  set_int(L, "id", r->function_id);
  set_str(L, "file", r->file);
  set_str(L, "qualname", r->qualname);
  set_int(L, "firstlineno", r->firstlineno);
  lua_pushfstring(L, "%s (%s:%I)", r->qualname, r->file, (lua_Integer)r->firstlineno);
  lua_setfield(L, -2, "name");
  set_num(L, "self_share", r->self_share);
  set_num(L, "total_share", r->total_share);
  if (!traced) {
    set_pos_int(L, "self_samples", r->self_samples);
    set_pos_int(L, "total_samples", r->total_samples);
    set_num(L, "self_weight", r->self_weight);
    set_num(L, "total_weight", r->total_weight);
    set_pair(L, "self_ci", r->self_lo, r->self_hi);
    set_pair(L, "total_ci", r->total_lo, r->total_hi);
  } else {
    set_pos_int(L, "calls", r->calls);
    set_pos_int(L, "primitive_calls", r->primitive_calls);
    set_pos_int(L, "resumes", r->resumes);
    set_pos_int(L, "self_ns", r->self_ns);
    set_pos_int(L, "total_ns", r->total_ns);
    int64_t pc = r->primitive_calls > 0 ? r->primitive_calls : r->calls;
    if (pc > 0 && r->total_ns >= 0) set_num(L, "per_call_ns", (double)r->total_ns / (double)pc);
    set_pos_int(L, "p50_ns", r->p50_ns);
    set_pos_int(L, "p90_ns", r->p90_ns);
    set_pos_int(L, "p99_ns", r->p99_ns);
    set_pos_int(L, "max_ns", r->max_ns);
  }
}

static int64_t opt_ns_field(lua_State *L, int t, const char *k) {
  int64_t v = 0;
  if (lua_getfield(L, t, k) != LUA_TNIL) {
    if (!lua_isnumber(L, -1)) luaL_error(L, "option '%s' must be a number of seconds", k);
    v = (int64_t)(lua_tonumber(L, -1) * 1e9);
  }
  lua_pop(L, 1);
  return v;
}

/* Read {thread=, since=, until=} at index t into f (thread: native tid or name). */
static void opt_filter(lua_State *L, int t, lsession ss, bf_sample_filter *f) {
  memset(f, 0, sizeof *f);
  if (lua_isnoneornil(L, t)) return;
  luaL_checktype(L, t, LUA_TTABLE);
  f->since_ns = opt_ns_field(L, t, "since");
  f->until_ns = opt_ns_field(L, t, "until");
  if (!f->until_ns) f->until_ns = opt_ns_field(L, t, "to"); /* `until` is a keyword: {to = 2.5} reads better */
  if (lua_getfield(L, t, "thread") != LUA_TNIL) {
    int isnum = 0;
    lua_Integer want = lua_tointegerx(L, -1, &isnum);
    const char *name = lua_tostring(L, -1);
    bf_thread_ref *th = NULL;
    size_t n = 0;
    if (bf_store_threads(ss.s, ss.id, &th, &n) < 0) luaL_error(L, "%s", bf_store_errmsg(ss.s));
    for (size_t i = 0; i < n; i++)
      if ((isnum && th[i].native_tid == want) || (!isnum && name && th[i].name && strcmp(th[i].name, name) == 0))
        f->thread_id = th[i].id;
    bf_thread_refs_free(th, n);
    if (!f->thread_id) luaL_error(L, "session %I has no thread '%s'", (lua_Integer)ss.id, name ? name : "?");
  }
  lua_pop(L, 1);
}

/* s:functions([{sort="self"|"total", thread=, since=, until=}]) → array of rows */
static int session_functions(lua_State *L) {
  lsession ss = checksession(L, 1);
  bf_sample_filter f;
  opt_filter(L, 2, ss, &f);
  bf_sort sort = BF_SORT_SELF;
  if (lua_istable(L, 2)) {
    static const char *const sorts[] = {"self", "total", NULL};
    lua_getfield(L, 2, "sort");
    if (!lua_isnil(L, -1)) sort = luaL_checkoption(L, -1, "self", sorts) ? BF_SORT_TOTAL : BF_SORT_SELF;
    lua_pop(L, 1);
  }
  bf_profile *p = NULL;
  if (bf_profile_functions(ss.s, ss.id, &f, sort, &p) < 0) return luaL_error(L, "%s", bf_store_errmsg(ss.s));
  lua_createtable(L, (int)p->n, 0);
  for (size_t i = 0; i < p->n; i++) {
    push_func_row(L, &p->rows[i], p->traced);
    lua_rawseti(L, -2, (lua_Integer)i + 1);
  }
  bf_profile_free(p);
  return 1;
}

static int name_matches(lua_State *L, int row, const char *want) {
  lua_getfield(L, row, "qualname");
  lua_getfield(L, row, "file");
  const char *q = lua_tostring(L, -2), *file = lua_tostring(L, -1);
  int ok = 0;
  if (q && strcmp(q, want) == 0) ok = 1;
  if (!ok && q) { /* "Class.method" matches "method" */
    size_t lq = strlen(q), lw = strlen(want);
    ok = lq > lw && q[lq - lw - 1] == '.' && strcmp(q + lq - lw, want) == 0;
  }
  if (!ok && q && file) { /* "path/file.py:qualname" */
    const char *colon = strrchr(want, ':');
    if (colon && strcmp(colon + 1, q) == 0) {
      size_t lf = strlen(file), lp = (size_t)(colon - want);
      ok = lf >= lp && strncmp(file + lf - lp, want, lp) == 0;
    }
  }
  lua_pop(L, 2);
  return ok;
}

/* s:func(name) → row | nil, msg. name: "qualname", "method" or "file.py:qualname";
 * the row with the largest self figure when several match. */
static int session_func(lua_State *L) {
  lsession ss = checksession(L, 1);
  const char *want = luaL_checkstring(L, 2);
  lua_settop(L, 2);
  lua_pushcfunction(L, session_functions);
  lua_pushvalue(L, 1);
  lua_call(L, 1, 1);
  lua_Integer n = luaL_len(L, 3);
  for (lua_Integer i = 1; i <= n; i++) {
    lua_rawgeti(L, 3, i);
    if (name_matches(L, 4, want)) return 1;
    lua_pop(L, 1);
  }
  lua_getiuservalue(L, 1, 2);
  lua_getfield(L, -1, "kind");
  int traced = lua_isstring(L, -1) && strcmp(lua_tostring(L, -1), "traced") == 0;
  luaL_pushfail(L);
  lua_pushfstring(L, "function '%s' %s in session %I", want, traced ? "was not traced" : "not observed",
                  (lua_Integer)ss.id);
  return 2;
}

static int session_threads(lua_State *L) {
  lsession ss = checksession(L, 1);
  bf_thread_ref *th = NULL;
  size_t n = 0;
  if (bf_store_threads(ss.s, ss.id, &th, &n) < 0) return luaL_error(L, "%s", bf_store_errmsg(ss.s));
  lua_createtable(L, (int)n, 0);
  for (size_t i = 0; i < n; i++) {
    lua_createtable(L, 0, 3);
    set_int(L, "id", th[i].id);
    set_int(L, "native_tid", th[i].native_tid);
    set_str(L, "name", th[i].name);
    lua_rawseti(L, -2, (lua_Integer)i + 1);
  }
  bf_thread_refs_free(th, n);
  return 1;
}

/* Push {qualname=, file=, firstlineno=, line=} for one frame. */
static void push_frame(lua_State *L, bf_store *s, int64_t frame_id) {
  int64_t fid = 0, line = 0;
  bf_function_ref ref = {0};
  if (bf_store_frame_get(s, frame_id, &fid, &line) < 0 || bf_store_function_get(s, fid, &ref) < 0)
    luaL_error(L, "%s", bf_store_errmsg(s));
  lua_createtable(L, 0, 5);
  set_int(L, "function_id", fid);
  set_str(L, "qualname", ref.qualname);
  set_str(L, "file", ref.file);
  set_int(L, "firstlineno", ref.firstlineno);
  set_int(L, "line", line);
}

/* Push the frames of a stack, outermost first. */
static void push_stack(lua_State *L, bf_store *s, int64_t stack_id) {
  int64_t *frames = NULL;
  size_t n = 0;
  if (stack_id > 0 && bf_store_stack_frames(s, stack_id, &frames, &n) < 0) luaL_error(L, "%s", bf_store_errmsg(s));
  /* copy into GC-owned memory so push_frame may raise without a leak */
  int64_t *v = lua_newuserdatauv(L, (n ? n : 1) * sizeof *v, 0);
  if (n) memcpy(v, frames, n * sizeof *v);
  free(frames);
  lua_createtable(L, (int)n, 0);
  for (size_t i = 0; i < n; i++) {
    push_frame(L, s, v[i]);
    lua_rawseti(L, -2, (lua_Integer)i + 1);
  }
  lua_remove(L, -2);
}

/* db:stack(id) → array of frames, outermost first */
static int db_stack(lua_State *L) {
  bf_store *s = checkdb(L, 1);
  push_stack(L, s, (int64_t)luaL_checkinteger(L, 2));
  return 1;
}

/* ---- bifocal.samples: a streaming cursor behind a generic-for iterator ----
 * Memory is one stored chunk whatever the session's size (core/query.h). */

typedef struct lsamples {
  bf_q_cursor *c; /* NULL = closed */
  int64_t read;
  ldb *db;        /* kept alive by uservalue 1 (userdata never move) */
} lsamples;

static int samples_release(lua_State *L) {
  lsamples *b = luaL_checkudata(L, 1, SAMPLES_MT);
  bf_q_timeline_close(b->c);
  b->c = NULL;
  return 0;
}

static int samples_tostring(lua_State *L) {
  lsamples *b = luaL_checkudata(L, 1, SAMPLES_MT);
  lua_pushfstring(L, "bifocal.samples (%I read%s)", (lua_Integer)b->read, b->c ? "" : ", closed");
  return 1;
}

static int samples_next(lua_State *L) {
  lsamples *b = lua_touserdata(L, lua_upvalueindex(1)); /* our own upvalue: no type check per sample */
  if (!b->c) return 0;
  /* the cursor reads through the db: refuse to go on once it is closed */
  ldb *d = b->db;
  if (!d || !d->s) {
    bf_q_timeline_close(b->c);
    b->c = NULL;
    return luaL_error(L, "the database was closed during the iteration of its samples");
  }
  const bf_sample *smp = NULL;
  int rc = bf_q_timeline_next(b->c, &smp);
  if (rc <= 0) {
    bf_q_timeline_close(b->c);
    b->c = NULL;
    if (rc < 0) return luaL_error(L, "%s", bf_store_errmsg(d->s));
    return 0;
  }
  b->read++;
  /* keys are upvalues 2..11 (interned once): lua_setfield would strcmp each one */
  lua_createtable(L, 0, 10);
#define SMP_INT(k, v)                       \
  lua_pushvalue(L, lua_upvalueindex(k));    \
  lua_pushinteger(L, (lua_Integer)(v));     \
  lua_rawset(L, -3)
#define SMP_BOOL(k, v)                      \
  lua_pushvalue(L, lua_upvalueindex(k));    \
  lua_pushboolean(L, (v) != 0);             \
  lua_rawset(L, -3)
  SMP_INT(2, smp->thread_id);
  SMP_INT(3, smp->stack_id);
  SMP_INT(4, smp->ts_ns);
  SMP_INT(5, smp->flags);
  SMP_INT(6, smp->count);
  SMP_INT(7, smp->weight);
  SMP_BOOL(8, smp->flags & BF_SAMPLE_GIL);
  SMP_BOOL(9, smp->flags & BF_SAMPLE_ON_CPU);
  SMP_BOOL(10, smp->flags & BF_SAMPLE_IDLE);
  SMP_BOOL(11, smp->flags & BF_SAMPLE_GC);
#undef SMP_INT
#undef SMP_BOOL
  return 1;
}

/* for smp in s:samples([filter]) do ... end — smp = {thread_id, stack_id, ts_ns,
 * flags, count, weight, gil, on_cpu, idle, gc}; db:stack(smp.stack_id) for frames. */
static int session_samples(lua_State *L) {
  lsession ss = checksession(L, 1);
  bf_sample_filter f;
  opt_filter(L, 2, ss, &f);
  lsamples *b = lua_newuserdatauv(L, sizeof *b, 1);
  b->c = NULL;
  b->read = 0;
  luaL_setmetatable(L, SAMPLES_MT);
  lua_getiuservalue(L, 1, 1); /* the db, kept alive while the cursor is */
  b->db = lua_touserdata(L, -1);
  lua_setiuservalue(L, -2, 1);
  if (bf_q_timeline_open(ss.s, ss.id, &f, &b->c) < 0) return luaL_error(L, "%s", bf_store_errmsg(ss.s));
  int bi = lua_gettop(L);
  static const char *const keys[] = {"thread_id", "stack_id", "ts_ns", "flags", "count",
                                     "weight",    "gil",      "on_cpu", "idle", "gc"};
  lua_pushvalue(L, bi);
  for (int k = 0; k < 10; k++) lua_pushstring(L, keys[k]);
  lua_pushcclosure(L, samples_next, 11);
  lua_pushnil(L);
  lua_pushnil(L);
  lua_pushvalue(L, bi); /* to-be-closed value of the generic for */
  return 4;
}

typedef struct stack_count {
  int64_t stack_id, count, weight;
} stack_count;

static int cmp_stack_count(const void *a, const void *b) {
  const stack_count *x = a, *y = b;
  if (x->count != y->count) return x->count < y->count ? 1 : -1;
  return (x->stack_id > y->stack_id) - (x->stack_id < y->stack_id);
}

/* s:stacks([filter]) → array of {stack_id, count, weight, frames}, most frequent first */
static int session_stacks(lua_State *L) {
  lsession ss = checksession(L, 1);
  bf_sample_filter f;
  opt_filter(L, 2, ss, &f);
  bf_q_stacks *q = NULL;
  if (bf_q_stacks_load(ss.s, ss.id, &f, &q) < 0) return luaL_error(L, "%s", bf_store_errmsg(ss.s));
  /* GC-owned, so an error while building the result leaks nothing */
  if (bf_q_stacks_merge_threads(q) < 0) {
    bf_q_stacks_free(q);
    return luaL_error(L, "not enough memory for the stacks of session %I", (lua_Integer)ss.id);
  }
  stack_count *sc = lua_newuserdatauv(L, (q->n ? q->n : 1) * sizeof *sc, 0);
  size_t nd = q->n;
  for (size_t i = 0; i < nd; i++) sc[i] = (stack_count){q->v[i].stack_id, q->v[i].count, (int64_t)q->v[i].weight};
  bf_q_stacks_free(q);
  qsort(sc, nd, sizeof *sc, cmp_stack_count);
  lua_createtable(L, (int)nd, 0);
  for (size_t i = 0; i < nd; i++) {
    lua_createtable(L, 0, 4);
    set_int(L, "stack_id", sc[i].stack_id);
    set_int(L, "count", sc[i].count);
    set_int(L, "weight", sc[i].weight);
    push_stack(L, ss.s, sc[i].stack_id);
    lua_setfield(L, -2, "frames");
    lua_rawseti(L, -2, (lua_Integer)i + 1);
  }
  return 1;
}

static void push_function(lua_State *L, bf_store *s, int64_t fid) {
  if (fid <= 0) {
    lua_pushnil(L);
    return;
  }
  bf_function_ref ref = {0};
  if (bf_store_function_get(s, fid, &ref) < 0) luaL_error(L, "%s", bf_store_errmsg(s));
  lua_createtable(L, 0, 4);
  set_int(L, "id", fid);
  set_str(L, "qualname", ref.qualname);
  set_str(L, "file", ref.file);
  set_int(L, "firstlineno", ref.firstlineno);
}

typedef struct edge_ud {
  lua_State *L;
  bf_store *s;
  lua_Integer n;
} edge_ud;

static int push_edge(void *ud, const bf_trace_edge *te) {
  edge_ud *e = ud;
  lua_State *L = e->L;
  lua_createtable(L, 0, 6);
  push_function(L, e->s, te->caller_function_id);
  lua_setfield(L, -2, "caller");
  push_function(L, e->s, te->callee_function_id);
  lua_setfield(L, -2, "callee");
  set_int(L, "calls", te->calls);
  set_int(L, "primitive_calls", te->primitive_calls);
  set_int(L, "self_ns", te->self_ns);
  set_int(L, "total_ns", te->total_ns);
  lua_rawseti(L, -2, ++e->n);
  return 0;
}

/* s:edges() → array of {caller (nil = thread root), callee, calls, primitive_calls, self_ns, total_ns} */
static int session_edges(lua_State *L) {
  lsession ss = checksession(L, 1);
  lua_newtable(L);
  edge_ud e = {L, ss.s, 0};
  if (bf_q_trace_edges(ss.s, ss.id, push_edge, &e) < 0) return luaL_error(L, "%s", bf_store_errmsg(ss.s));
  return 1;
}

typedef struct rec_ud {
  lua_State *L;
  bf_store *s;
  int64_t only_fid; /* 0 = all */
  lua_Integer n;
} rec_ud;

static int push_record(void *ud, const bf_call_record *r) {
  rec_ud *e = ud;
  if (e->only_fid && r->function_id != e->only_fid) return 0;
  lua_State *L = e->L;
  lua_createtable(L, 0, 7);
  push_function(L, e->s, r->function_id);
  lua_setfield(L, -2, "func");
  set_int(L, "thread_id", r->thread_id);
  set_int(L, "start_ns", r->start_ns);
  set_int(L, "duration_ns", r->duration_ns);
  set_int(L, "depth", r->depth);
  push_function(L, e->s, r->parent_function_id);
  lua_setfield(L, -2, "parent");
  lua_rawseti(L, -2, ++e->n);
  return 0;
}

/* s:calls([qualname]) → array of per-call records {func, thread_id, start_ns,
 * duration_ns, depth, parent} (focus-mode traced sessions), optionally of one function */
static int session_calls(lua_State *L) {
  lsession ss = checksession(L, 1);
  int64_t only = 0;
  if (!lua_isnoneornil(L, 2)) {
    const char *want = luaL_checkstring(L, 2);
    lua_settop(L, 2);
    lua_pushcfunction(L, session_func);
    lua_pushvalue(L, 1);
    lua_pushvalue(L, 2);
    lua_call(L, 2, 2);
    if (lua_isnil(L, -2)) return 2; /* nil, msg */
    lua_getfield(L, -2, "id");
    only = lua_tointeger(L, -1);
    (void)want;
  }
  lua_newtable(L);
  rec_ud e = {L, ss.s, only, 0};
  if (bf_q_call_records(ss.s, ss.id, push_record, &e) < 0)
    return luaL_error(L, "%s", bf_store_errmsg(ss.s));
  return 1;
}

/* ---- join ------------------------------------------------------------------ */

static void push_join(lua_State *L, const bf_join *j) {
  lua_createtable(L, (int)j->n, 0);
  for (size_t i = 0; i < j->n; i++) {
    const bf_join_row *r = &j->rows[i];
    lua_createtable(L, 0, 24);
    set_str(L, "file", r->file);
    set_str(L, "qualname", r->qualname);
    set_int(L, "firstlineno", r->firstlineno);
    lua_pushfstring(L, "%s (%s:%I)", r->qualname, r->file, (lua_Integer)r->firstlineno);
    lua_setfield(L, -2, "name");
    set_bool(L, "observed", r->observed);
    if (r->observed) {
      set_int(L, "self_samples", r->self_samples);
      set_int(L, "total_samples", r->total_samples);
      set_num(L, "self_share", r->self_share);
      set_num(L, "total_share", r->total_share);
      set_pair(L, "self_ci", r->self_lo, r->self_hi);
      set_pair(L, "total_ci", r->total_lo, r->total_hi);
      set_num(L, "sampled_ns", r->sampled_ns);
    }
    set_bool(L, "traced", r->traced);
    if (r->traced) {
      set_int(L, "calls", r->calls);
      set_int(L, "primitive_calls", r->primitive_calls);
      set_int(L, "self_ns", r->self_ns);
      set_int(L, "total_ns", r->total_ns);
      set_num(L, "traced_self_share", r->traced_self_share);
      set_num(L, "per_call_ns", r->per_call_ns);
    }
    set_num(L, "calls_per_s", r->calls_per_s);
    lua_rawseti(L, -2, (lua_Integer)i + 1);
  }
  lua_createtable(L, 0, 10);
  set_int(L, "sampled", j->sampled_id);
  set_int(L, "traced", j->traced_id);
  set_int(L, "samples", j->sampled_samples);
  set_int(L, "sampled_duration_ns", j->sampled_duration_ns);
  set_int(L, "sampled_threads", j->sampled_threads);
  set_num(L, "budget_ns", j->budget_ns);
  set_int(L, "traced_ns", j->traced_ns);
  set_int(L, "n_both", (int64_t)j->n_both);
  set_num(L, "spearman", j->spearman);
  set_str(L, "clock", j->clock);
  if (j->interp_warning[0]) set_str(L, "interpreters_differ", j->interp_warning);
}

/* bifocal.join(sampled, traced) → rows, summary | nil, msg (sessions of one db) */
static int l_join(lua_State *L) {
  lsession a = checksession(L, 1), b = checksession(L, 2);
  lua_getiuservalue(L, 1, 1);
  lua_getiuservalue(L, 2, 1);
  luaL_argcheck(L, lua_rawequal(L, -1, -2) || strcmp(bf_store_path(a.s), bf_store_path(b.s)) == 0, 2,
                "sessions of different databases");
  bf_join *j = NULL;
  if (bf_join_sessions(a.s, a.id, b.id, &j) < 0) {
    luaL_pushfail(L);
    lua_pushstring(L, bf_store_errmsg(a.s));
    return 2;
  }
  /* push_join only allocates Lua memory; on OOM the join would leak, which is
   * acceptable next to a Lua memory error */
  push_join(L, j);
  bf_join_free(j);
  return 2;
}

/* bifocal.session(id_or_label) → session of the default database | nil, msg */
static int l_session(lua_State *L) {
  if (lua_rawgetp(L, LUA_REGISTRYINDEX, &DEFDB_KEY) == LUA_TNIL) {
    lua_pop(L, 1);
    lua_pushcfunction(L, l_open);
    lua_call(L, 0, 2);
    if (lua_isnil(L, -2)) return 2;
    lua_pop(L, 1);
    lua_pushvalue(L, -1);
    lua_rawsetp(L, LUA_REGISTRYINDEX, &DEFDB_KEY);
  }
  lua_insert(L, 1);
  lua_settop(L, 2);
  return db_session(L);
}

/* ---- statistics ---------------------------------------------------------------- */

static double *checknumbers(lua_State *L, int idx, size_t *n) {
  luaL_checktype(L, idx, LUA_TTABLE);
  lua_Integer len = luaL_len(L, idx);
  double *v = lua_newuserdatauv(L, (size_t)(len > 0 ? len : 1) * sizeof *v, 0); /* GC-owned scratch */
  for (lua_Integer i = 1; i <= len; i++) {
    lua_geti(L, idx, i);
    int ok;
    v[i - 1] = lua_tonumberx(L, -1, &ok);
    if (!ok) luaL_argerror(L, idx, lua_pushfstring(L, "item %I is not a number", i));
    lua_pop(L, 1);
  }
  *n = (size_t)len;
  return v;
}

static int cmp_dbl(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static int st_mean(lua_State *L) {
  size_t n;
  double *v = checknumbers(L, 1, &n);
  if (!n) return 0;
  double s = 0;
  for (size_t i = 0; i < n; i++) s += v[i];
  lua_pushnumber(L, s / (double)n);
  return 1;
}

static double pctl(double *v, size_t n, double p) {
  qsort(v, n, sizeof *v, cmp_dbl);
  double pos = p / 100.0 * (double)(n - 1);
  size_t lo = (size_t)floor(pos), hi = (size_t)ceil(pos);
  return v[lo] + (v[hi] - v[lo]) * (pos - (double)lo);
}

static int st_percentile(lua_State *L) {
  size_t n;
  double *v = checknumbers(L, 1, &n);
  double p = luaL_checknumber(L, 2);
  luaL_argcheck(L, p >= 0 && p <= 100, 2, "percentile must be in 0..100");
  if (!n) return 0;
  lua_pushnumber(L, pctl(v, n, p));
  return 1;
}

static int st_median(lua_State *L) {
  size_t n;
  double *v = checknumbers(L, 1, &n);
  if (!n) return 0;
  lua_pushnumber(L, pctl(v, n, 50));
  return 1;
}

static int st_stdev(lua_State *L) {
  size_t n;
  double *v = checknumbers(L, 1, &n);
  if (n < 2) return 0;
  double m = 0, s = 0;
  for (size_t i = 0; i < n; i++) m += v[i];
  m /= (double)n;
  for (size_t i = 0; i < n; i++) s += (v[i] - m) * (v[i] - m);
  lua_pushnumber(L, sqrt(s / (double)(n - 1)));
  return 1;
}

static int st_spearman(lua_State *L) {
  size_t nx, ny;
  double *x = checknumbers(L, 1, &nx);
  double *y = checknumbers(L, 2, &ny);
  luaL_argcheck(L, nx == ny, 2, "both lists must have the same length");
  double r = bf_spearman(x, y, nx);
  if (!isfinite(r)) return 0;
  lua_pushnumber(L, r);
  return 1;
}

static int st_wilson(lua_State *L) {
  double k = luaL_checknumber(L, 1), n = luaL_checknumber(L, 2);
  luaL_argcheck(L, k >= 0 && k <= n, 1, "need 0 <= k <= n");
  double lo, hi;
  bf_wilson(k, n, &lo, &hi);
  lua_pushnumber(L, lo);
  lua_pushnumber(L, hi);
  return 2;
}

/* two_proportion(k1, n1, k2, n2) → z, p (two-sided, pooled); z > 0 when the
 * second proportion is larger. */
static int st_two_proportion(lua_State *L) {
  double k1 = luaL_checknumber(L, 1), n1 = luaL_checknumber(L, 2);
  double k2 = luaL_checknumber(L, 3), n2 = luaL_checknumber(L, 4);
  luaL_argcheck(L, n1 > 0 && k1 >= 0 && k1 <= n1, 1, "need 0 <= k1 <= n1 and n1 > 0");
  luaL_argcheck(L, n2 > 0 && k2 >= 0 && k2 <= n2, 3, "need 0 <= k2 <= n2 and n2 > 0");
  double p1 = k1 / n1, p2 = k2 / n2, pp = (k1 + k2) / (n1 + n2);
  double se = sqrt(pp * (1 - pp) * (1 / n1 + 1 / n2));
  double z = se > 0 ? (p2 - p1) / se : 0;
  lua_pushnumber(L, z);
  lua_pushnumber(L, se > 0 ? erfc(fabs(z) / sqrt(2.0)) : 1.0);
  return 2;
}

/* ---- checks and the verdict ---------------------------------------------------- */

/* bifocal.check(name, ok, [detail]) → ok (boolean) */
static int l_check(lua_State *L) {
  const char *name = luaL_checkstring(L, 1);
  luaL_checkany(L, 2);
  int ok = lua_toboolean(L, 2);
  const char *detail = lua_isnoneornil(L, 3) ? NULL : luaL_tolstring(L, 3, NULL);
  lua_ctx *c = getctx(L);
  lua_rawgetp(L, LUA_REGISTRYINDEX, &CHECKS_KEY);
  lua_createtable(L, 0, 3);
  lua_pushstring(L, name);
  lua_setfield(L, -2, "name");
  lua_pushboolean(L, ok);
  lua_setfield(L, -2, "ok");
  if (detail) {
    lua_pushstring(L, detail);
    lua_setfield(L, -2, "detail");
  }
  lua_rawseti(L, -2, ++c->n_checks);
  if (!ok) c->n_failed++;
  lua_pushboolean(L, ok);
  return 1;
}

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
  lua_ctx *c = getctx(L);
  lua_rawgetp(L, LUA_REGISTRYINDEX, &CHECKS_KEY);
  int t = lua_gettop(L);
  size_t w = 5;
  for (int i = 1; i <= c->n_checks; i++) {
    lua_rawgeti(L, t, i);
    lua_getfield(L, -1, "name");
    char nb[512];
    size_t l = u8width(bf_inert(lua_tostring(L, -1), nb, sizeof nb));
    if (l > w) w = l;
    lua_pop(L, 2);
  }
  int tty = isatty(fileno(out)) && !getenv("NO_COLOR");
  pad(out, "CHECK", w);
  fputs("  RESULT  DETAIL\n", out);
  for (int i = 1; i <= c->n_checks; i++) {
    lua_rawgeti(L, t, i);
    lua_getfield(L, -1, "name");
    lua_getfield(L, -2, "ok");
    lua_getfield(L, -3, "detail");
    int ok = lua_toboolean(L, -2);
    char nb[512], db[2048]; /* names in checks come from profiles: shown inert */
    pad(out, bf_inert(lua_tostring(L, -3), nb, sizeof nb), w);
    fputs(ok ? (tty ? "  \033[32mok\033[0m    " : "  ok    ") : (tty ? "  \033[31mFAILED\033[0m" : "  FAILED"), out);
    fprintf(out, "  %s\n", lua_isstring(L, -1) ? bf_inert(lua_tostring(L, -1), db, sizeof db) : "");
    lua_pop(L, 4);
  }
  fprintf(out, "verdict: %s (%d check%s, %d failed)\n", c->n_failed ? "FAIL" : "PASS", c->n_checks,
          c->n_checks == 1 ? "" : "s", c->n_failed);
  fflush(out);
  lua_settop(L, t - 1);
  c->printed = c->n_checks;
}

/* bifocal.verdict() → passed, n_failed (prints the table of checks) */
static int l_verdict(lua_State *L) {
  fflush(stdout);
  print_verdict(L, stdout);
  lua_ctx *c = getctx(L);
  lua_pushboolean(L, c->n_failed == 0);
  lua_pushinteger(L, c->n_failed);
  return 2;
}

/* ---- formatting helpers ---------------------------------------------------------- */

static int l_fmt_ns(lua_State *L) {
  if (lua_isnoneornil(L, 1)) {
    lua_pushliteral(L, "-");
    return 1;
  }
  char buf[32];
  bf_fmt_ns(luaL_checknumber(L, 1), buf, sizeof buf);
  lua_pushstring(L, buf);
  return 1;
}

/* bifocal.pct(share [, digits]) → "12.3%" ("not observed" for nil) */
static int l_pct(lua_State *L) {
  if (lua_isnoneornil(L, 1)) {
    lua_pushliteral(L, "not observed");
    return 1;
  }
  double v = luaL_checknumber(L, 1);
  int d = (int)luaL_optinteger(L, 2, 1);
  luaL_argcheck(L, d >= 0 && d <= 9, 2, "digits must be 0..9");
  char buf[64];
  snprintf(buf, sizeof buf, "%.*f%%", d, v * 100);
  lua_pushstring(L, buf);
  return 1;
}

/* bifocal.inert(s): s with control characters and invalid UTF-8 as escapes
 * (\n, \x1b, \u202e), safe to print on a terminal. */
static int l_inert(lua_State *L) {
  const char *s = luaL_checkstring(L, 1);
  luaL_Buffer b;
  luaL_buffinit(L, &b);
  char buf[256];
  const char *r = bf_inert(s, buf, sizeof buf);
  if (r == s) {
    lua_settop(L, 1);
    return 1;
  }
  /* escape in pieces so any length fits */
  size_t n = strlen(s), at = 0;
  while (at < n) {
    char piece[64], out[64 * 6 + 8];
    size_t k = n - at < 60 ? n - at : 60;
    /* do not split a UTF-8 sequence: back up to a lead byte */
    while (k < n - at && k > 1 && ((unsigned char)s[at + k] & 0xC0) == 0x80) k--;
    memcpy(piece, s + at, k);
    piece[k] = 0;
    luaL_addstring(&b, bf_inert(piece, out, sizeof out));
    at += k;
  }
  luaL_pushresult(&b);
  return 1;
}

/* Parts of the module written in Lua: table printing and value display. */
static const char prelude[] =
    "local bifocal = ...\n"
    "function bifocal.print_table(header, rows)\n"
    "  local w = {}\n"
    "  local function cell(v) if v == nil then return '-' end return bifocal.inert(tostring(v)) end\n"
    "  for i, h in ipairs(header) do w[i] = utf8.len(h) or #h end\n"
    "  for _, r in ipairs(rows) do for i = 1, #header do\n"
    "    local s = cell(r[i]); local l = utf8.len(s) or #s; if l > w[i] then w[i] = l end end end\n"
    "  local function line(r)\n"
    "    local out = {}\n"
    "    for i = 1, #header do\n"
    "      local s = cell(r[i]); local pad = string.rep(' ', w[i] - (utf8.len(s) or #s))\n"
    "      if i == #header then out[i] = s elseif type(r[i]) == 'number' then out[i] = pad .. s else out[i] = s .. pad end\n"
    "    end\n"
    "    io.write(table.concat(out, '  '), '\\n')\n"
    "  end\n"
    "  line(header)\n"
    "  for _, r in ipairs(rows) do line(r) end\n"
    "end\n"
    "function bifocal.parse_args(args, defaults, usage)\n"
    "  defaults = defaults or {}\n"
    "  local pos, opt = {}, {}\n"
    "  for k, v in pairs(defaults) do opt[k] = v end\n"
    "  local function bad(msg) error(msg .. (usage and ('\\n' .. usage) or ''), 3) end\n"
    "  local i = 1\n"
    "  while i <= #args do\n"
    "    local a = args[i]\n"
    "    local name, val = a:match('^%-%-([%w%-_]+)=(.*)$')\n"
    "    if not name then name = a:match('^%-%-([%w%-_]+)$') end\n"
    "    if name then\n"
    "      local d = defaults[name]\n"
    "      if d == nil then bad('unknown option --' .. name) end\n"
    "      if type(d) == 'boolean' then opt[name] = true\n"
    "      else\n"
    "        if val == nil then i = i + 1; val = args[i] end\n"
    "        if val == nil then bad('option --' .. name .. ' needs a value') end\n"
    "        if type(d) == 'number' then\n"
    "          local n = tonumber(val)\n"
    "          if not n then bad('option --' .. name .. ' needs a number, not ' .. val) end\n"
    "          val = n\n"
    "        end\n"
    "        opt[name] = val\n"
    "      end\n"
    "    else pos[#pos + 1] = a end\n"
    "    i = i + 1\n"
    "  end\n"
    "  return pos, opt\n"
    "end\n"
    "function bifocal.repr(v, depth)\n"
    "  depth = depth or 2\n"
    "  if type(v) == 'string' then return string.format('%q', v) end\n"
    "  if type(v) ~= 'table' or depth <= 0 then return tostring(v) end\n"
    "  local parts, n = {}, #v\n"
    "  for i = 1, math.min(n, 20) do parts[#parts + 1] = bifocal.repr(v[i], depth - 1) end\n"
    "  if n > 20 then parts[#parts + 1] = '... (' .. n .. ' items)' end\n"
    "  local keys = {}\n"
    "  for k in pairs(v) do if not (math.type(k) == 'integer' and k >= 1 and k <= n) then keys[#keys + 1] = k end end\n"
    "  table.sort(keys, function(a, b) return tostring(a) < tostring(b) end)\n"
    "  for _, k in ipairs(keys) do\n"
    "    local ks = (type(k) == 'string' and k:match('^[%a_][%w_]*$')) and k or '[' .. bifocal.repr(k, 0) .. ']'\n"
    "    parts[#parts + 1] = ks .. ' = ' .. bifocal.repr(v[k], depth - 1)\n"
    "  end\n"
    "  return '{' .. table.concat(parts, ', ') .. '}'\n"
    "end\n";

static const luaL_Reg db_meth[] = {{"session", db_session}, {"sessions", db_sessions}, {"stack", db_stack},
                                   {"path", db_path},       {"close", db_close},       {NULL, NULL}};
static const luaL_Reg db_metameth[] = {{"__index", NULL}, {"__gc", db_close}, {"__close", db_close},
                                       {"__tostring", db_tostring}, {NULL, NULL}};
static const luaL_Reg session_meth[] = {{"info", session_info},       {"functions", session_functions},
                                        {"func", session_func},       {"threads", session_threads},
                                        {"samples", session_samples}, {"stacks", session_stacks},
                                        {"edges", session_edges},     {"calls", session_calls},
                                        {NULL, NULL}};
static const luaL_Reg session_metameth[] = {
    {"__index", session_index}, {"__tostring", session_tostring}, {"__eq", session_eq}, {NULL, NULL}};
static const luaL_Reg samples_metameth[] = {
    {"__gc", samples_release}, {"__close", samples_release}, {"__tostring", samples_tostring}, {NULL, NULL}};
static const luaL_Reg stats_funcs[] = {{"mean", st_mean},         {"median", st_median},
                                       {"percentile", st_percentile}, {"stdev", st_stdev},
                                       {"spearman", st_spearman}, {"wilson", st_wilson},
                                       {"two_proportion", st_two_proportion}, {NULL, NULL}};
static const luaL_Reg bifocal_funcs[] = {{"open", l_open},       {"session", l_session}, {"join", l_join},
                                         {"check", l_check},     {"verdict", l_verdict}, {"fmt_ns", l_fmt_ns},
                                         {"pct", l_pct},         {"inert", l_inert},     {NULL, NULL}};

static void create_metas(lua_State *L) {
  luaL_newmetatable(L, DB_MT);
  luaL_setfuncs(L, db_metameth, 0);
  luaL_newlibtable(L, db_meth);
  luaL_setfuncs(L, db_meth, 0);
  lua_setfield(L, -2, "__index");
  lua_pop(L, 1);
  luaL_newmetatable(L, SESSION_MT);
  luaL_setfuncs(L, session_metameth, 0);
  luaL_newlibtable(L, session_meth);
  luaL_setfuncs(L, session_meth, 0);
  lua_setfield(L, -2, "__methods");
  lua_pop(L, 1);
  luaL_newmetatable(L, SAMPLES_MT);
  luaL_setfuncs(L, samples_metameth, 0);
  lua_pop(L, 1);
}

int luaopen_bifocal(lua_State *L) {
  if (lua_rawgetp(L, LUA_REGISTRYINDEX, &CTX_KEY) == LUA_TNIL) { /* opened without bf_lua_new */
    lua_ctx *c = lua_newuserdatauv(L, sizeof *c, 0);
    memset(c, 0, sizeof *c);
    snprintf(c->db_path, sizeof c->db_path, "bifocal.db");
    lua_rawsetp(L, LUA_REGISTRYINDEX, &CTX_KEY);
  }
  lua_pop(L, 1);
  lua_newtable(L);
  lua_rawsetp(L, LUA_REGISTRYINDEX, &CHECKS_KEY);
  create_metas(L);
  luaL_newlib(L, bifocal_funcs);
  luaL_newlib(L, stats_funcs);
  lua_setfield(L, -2, "stats");
  lua_pushliteral(L, BF_VERSION);
  lua_setfield(L, -2, "version");
  lua_ctx *c = getctx(L);
  if (c->out_real[0]) {
    lua_pushstring(L, c->out_real);
    lua_setfield(L, -2, "out_dir");
  }
  if (luaL_loadbuffer(L, prelude, sizeof prelude - 1, "=bifocal") != LUA_OK) return lua_error(L);
  lua_pushvalue(L, -2);
  lua_call(L, 1, 0);
  return 1;
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
  lua_ctx *c = getctx(L);
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

static int sb_io_open(lua_State *L) {
  const char *path = luaL_checkstring(L, 1);
  const char *mode = luaL_optstring(L, 2, "r");
  int w = strpbrk(mode, "wa+") != NULL;
  if (w) check_write_path(L, path, "writing");
  lua_pushvalue(L, lua_upvalueindex(1));
  lua_insert(L, 1);
  mode_t um = w ? umask(077) : 0; /* files a script creates are 0600, like every output */
  lua_call(L, lua_gettop(L) - 1, LUA_MULTRET);
  if (w) umask(um);
  return lua_gettop(L);
}

static int sb_io_output(lua_State *L) {
  int w = lua_type(L, 1) == LUA_TSTRING;
  if (w) check_write_path(L, lua_tostring(L, 1), "writing");
  lua_pushvalue(L, lua_upvalueindex(1));
  lua_insert(L, 1);
  mode_t um = w ? umask(077) : 0; /* 0600, like every output */
  lua_call(L, lua_gettop(L) - 1, LUA_MULTRET);
  if (w) umask(um);
  return lua_gettop(L);
}

static int sb_os_remove(lua_State *L) {
  check_write_path(L, luaL_checkstring(L, 1), "removing");
  lua_pushvalue(L, lua_upvalueindex(1));
  lua_insert(L, 1);
  lua_call(L, lua_gettop(L) - 1, LUA_MULTRET);
  return lua_gettop(L);
}

static int sb_os_rename(lua_State *L) {
  check_write_path(L, luaL_checkstring(L, 1), "renaming");
  check_write_path(L, luaL_checkstring(L, 2), "renaming to");
  lua_pushvalue(L, lua_upvalueindex(1));
  lua_insert(L, 1);
  lua_call(L, lua_gettop(L) - 1, LUA_MULTRET);
  return lua_gettop(L);
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
static const char *stop_reason(lua_ctx *c, char *buf, size_t len) {
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
  /* every instruction from now on fails, so a pcall loop cannot swallow it */
  lua_sethook(L, lua_gethook(L), LUA_MASKCOUNT, 1);
  lua_Debug d;
  for (int level = 0; lua_getstack(L, level, &d); level++)
    if (lua_getinfo(L, "Sl", &d) && d.currentline > 0) {
      lua_pushfstring(L, "%s:%d: %s", d.short_src, d.currentline, why);
      lua_error(L);
    }
  lua_pushstring(L, why);
  lua_error(L);
}

void bf_lua_budget(lua_State *L) {
  char buf[96];
  const char *why = stop_reason(getctx(L), buf, sizeof buf);
  if (why) stop(L, why);
}

/* Installed for the state's whole life (coroutines inherit it when created);
 * it only acts while a chunk runs. */
static void stop_hook(lua_State *L, lua_Debug *ar) {
  (void)ar;
  bf_lua_budget(L);
}

static void arm(lua_State *L) {
  lua_ctx *c = getctx(L);
  interrupted = 0;
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
}

static void disarm(lua_State *L) {
  getctx(L)->armed = 0;
  lua_sethook(L, stop_hook, LUA_MASKCOUNT, 1000);
}

static char *take_msg(lua_State *L);

/* The message of a failed chunk; an allocation refused for the cap becomes a
 * clear line instead of Lua's "not enough memory". */
static char *fail_msg(lua_State *L, int st) {
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

lua_State *bf_lua_new(const bf_lua_opts *o, char *err, size_t errlen) {
  lua_State *L = luaL_newstate();
  if (!L) {
    snprintf(err, errlen, "not enough memory for the Lua interpreter");
    return NULL;
  }
  lua_mem *m = calloc(1, sizeof *m);
  if (!m) {
    lua_close(L);
    snprintf(err, errlen, "not enough memory for the Lua interpreter");
    return NULL;
  }
  /* count from what the state already holds, so used returns to exactly 0
   * when lua_close frees the last block */
  m->used = (size_t)lua_gc(L, LUA_GCCOUNT) * 1024 + (size_t)lua_gc(L, LUA_GCCOUNTB);
  m->limit = o && o->memory_bytes ? o->memory_bytes : BF_LUA_DEFAULT_MEMORY;
  if (m->limit < m->used + (1u << 20)) m->limit = m->used + (1u << 20);
  lua_setallocf(L, capped_alloc, m);
  lua_ctx *c = lua_newuserdatauv(L, sizeof *c, 0);
  memset(c, 0, sizeof *c);
  snprintf(c->db_path, sizeof c->db_path, "%s", o && o->db_path ? o->db_path : "bifocal.db");
  c->sandbox = o ? o->sandbox : 1;
  c->timeout_s = o ? o->timeout_s : 0;
  if (o && o->out_dir) {
    struct stat st;
    if (!realpath(o->out_dir, c->out_real) || stat(c->out_real, &st) != 0 || !S_ISDIR(st.st_mode)) {
      snprintf(err, errlen, "--out '%s' is not a directory (create it first)", o->out_dir);
      lua_close(L);
      return NULL;
    }
  }
  lua_rawsetp(L, LUA_REGISTRYINDEX, &CTX_KEY);
  luaL_openlibs(L);
  bf_lua_bounded_strlib(L);
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

int bf_lua_run_file(lua_State *L, const char *path, int argc, char **argv, char **errmsg) {
  *errmsg = NULL;
  arm(L);
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
    *errmsg = full_path_msg(fail_msg(L, st), path);
    return 2;
  }
  if (!lua_checkstack(L, argc + 4)) {
    disarm(L);
    *errmsg = strdup("too many script arguments");
    return 2;
  }
  for (int i = 0; i < argc; i++) lua_pushstring(L, argv[i]);
  st = docall(L, argc, 0);
  disarm(L);
  fflush(stdout);
  if (st != LUA_OK) {
    *errmsg = full_path_msg(fail_msg(L, st), path);
    return 2;
  }
  lua_ctx *c = getctx(L);
  if (c->n_checks > c->printed) print_verdict(L, stdout);
  return c->n_failed ? 1 : 0;
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

int bf_lua_exec(lua_State *L, const char *chunk, const char *chunkname, int print_results, char **errmsg) {
  *errmsg = NULL;
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
    return 1;
  }
  if (st != LUA_OK) {
    *errmsg = take_msg(L);
    lua_settop(L, top);
    return 2;
  }
  arm(L);
  st = docall(L, 0, LUA_MULTRET);
  disarm(L);
  fflush(stdout);
  if (st != LUA_OK) {
    *errmsg = fail_msg(L, st);
    lua_settop(L, top);
    return 2;
  }
  print_values(L, lua_gettop(L) - top);
  lua_settop(L, top);
  return 0;
}
