/* lua_int.h — internal to core/lua/: what the files of the `bifocal` module
 * share. The userdata types (bifocal.db, bifocal.session, bifocal.samples),
 * the per-state context, the field setters, and the C functions that
 * lua_module.c registers (one file per group: db, session, samples, stats).
 */
#ifndef BF_LUA_INT_H
#define BF_LUA_INT_H

#include <limits.h>
#include <math.h>
#include <stdint.h>

#include <lauxlib.h>
#include <lua.h>

#include "lua_bifocal.h"
#include "store.h"

#define DB_MT "bifocal.db"
#define SESSION_MT "bifocal.session"
#define SAMPLES_MT "bifocal.samples"

/* Per-state context of the module, a userdata in the registry (lua_module.c). */
typedef struct bf_lua_ctx {
  char db_path[PATH_MAX];                  /* bifocal.open() with no argument */
  char out_dir[PATH_MAX];                  /* bifocal.out_dir, "" = none */
  void (*show_verdict)(lua_State *L);      /* bifocal.verdict() shows the checks with it; NULL: nothing */
  int n_checks, n_failed;
} bf_lua_ctx;

/* The context of L (created with defaults by luaopen_bifocal when absent). */
bf_lua_ctx *bf_lua_getctx(lua_State *L);

typedef struct bf_lua_db {
  bf_store *s; /* NULL = closed */
} bf_lua_db;

typedef struct bf_lua_session {
  int64_t id;
  bf_store *s;
} bf_lua_sref;

/* ---- setters of the table on top of the stack: missing stays nil, never 0 ---- */

static inline void bf_lua_set_str(lua_State *L, const char *k, const char *v) {
  if (!v) return;
  lua_pushstring(L, v);
  lua_setfield(L, -2, k);
}
static inline void bf_lua_set_int(lua_State *L, const char *k, int64_t v) {
  lua_pushinteger(L, (lua_Integer)v);
  lua_setfield(L, -2, k);
}
static inline void bf_lua_set_num(lua_State *L, const char *k, double v) {
  if (!isfinite(v)) return; /* missing stays nil, never 0 */
  lua_pushnumber(L, v);
  lua_setfield(L, -2, k);
}
static inline void bf_lua_set_pos_int(lua_State *L, const char *k, int64_t v) {
  if (v >= 0) bf_lua_set_int(L, k, v);
}
/* A function's identity fields: file, qualname, firstlineno and name
 * ("qualname (file:line)"), in that order. */
static inline void bf_lua_set_func_ident(lua_State *L, const char *file, const char *qualname, int64_t firstlineno) {
  bf_lua_set_str(L, "file", file);
  bf_lua_set_str(L, "qualname", qualname);
  bf_lua_set_int(L, "firstlineno", firstlineno);
  lua_pushfstring(L, "%s (%s:%I)", qualname, file, (lua_Integer)firstlineno);
  lua_setfield(L, -2, "name");
}
static inline void bf_lua_set_bool(lua_State *L, const char *k, int v) {
  lua_pushboolean(L, v);
  lua_setfield(L, -2, k);
}
static inline void bf_lua_set_pair(lua_State *L, const char *k, double a, double b) {
  if (!isfinite(a) || !isfinite(b)) return;
  lua_createtable(L, 2, 0);
  lua_pushnumber(L, a);
  lua_rawseti(L, -2, 1);
  lua_pushnumber(L, b);
  lua_rawseti(L, -2, 2);
  lua_setfield(L, -2, k);
}

/* ---- lua_db.c: bifocal.open, bifocal.session, the db methods ---- */

/* The store of the db argument at idx; raises when it is closed. */
bf_store *bf_lua_checkdb(lua_State *L, int idx);
int bf_lua_open(lua_State *L);
int bf_lua_default_session(lua_State *L);
int bf_lua_db_session(lua_State *L);
int bf_lua_db_sessions(lua_State *L);
int bf_lua_db_path(lua_State *L);
int bf_lua_db_close(lua_State *L);
int bf_lua_db_tostring(lua_State *L);

/* ---- lua_session.c: session objects, functions, threads, frames ---- */

/* A session argument; raises when its db is closed. */
bf_lua_sref bf_lua_checksession(lua_State *L, int idx);
/* Read {thread=, since=, until=|to=} at index t into f (thread: native tid or name). */
void bf_lua_opt_filter(lua_State *L, int t, bf_lua_sref ss, bf_sample_filter *f);
/* Push the frames of a stack, outermost first. */
void bf_lua_push_stack(lua_State *L, bf_store *s, int64_t stack_id);
int bf_lua_session_tostring(lua_State *L);
int bf_lua_session_eq(lua_State *L);
int bf_lua_session_index(lua_State *L);
int bf_lua_session_info(lua_State *L);
int bf_lua_session_functions(lua_State *L);
int bf_lua_session_func(lua_State *L);
int bf_lua_session_threads(lua_State *L);
int bf_lua_db_stack(lua_State *L);

/* ---- lua_samples.c: samples cursor, stacks, edges, call records ---- */

int bf_lua_session_samples(lua_State *L);
int bf_lua_session_stacks(lua_State *L);
int bf_lua_session_edges(lua_State *L);
int bf_lua_session_calls(lua_State *L);
int bf_lua_samples_release(lua_State *L);
int bf_lua_samples_tostring(lua_State *L);

/* ---- lua_memory.c: s:memory{} on sampled and traced sessions ---- */

int bf_lua_session_memory(lua_State *L);

/* ---- lua_stats.c: bifocal.join and bifocal.stats ---- */

int bf_lua_join(lua_State *L);
int bf_lua_st_mean(lua_State *L);
int bf_lua_st_median(lua_State *L);
int bf_lua_st_percentile(lua_State *L);
int bf_lua_st_stdev(lua_State *L);
int bf_lua_st_spearman(lua_State *L);
int bf_lua_st_wilson(lua_State *L);
int bf_lua_st_two_proportion(lua_State *L);

#endif
