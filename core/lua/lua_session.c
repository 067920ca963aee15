/* lua_session.c — bifocal.session objects: metadata fields and methods
 * (info, functions, func, threads), the {thread=, since=, until=} filter the
 * session methods share, and the frames of a stack (db:stack).
 */
#include <stdlib.h>
#include <string.h>

#include "lua_int.h"
#include "profile.h"

/* Check a session argument; its db must be open. */
bf_lua_sref bf_lua_checksession(lua_State *L, int idx) {
  int64_t *u = luaL_checkudata(L, idx, SESSION_MT);
  lua_getiuservalue(L, idx, 1);
  bf_lua_db *d = lua_touserdata(L, -1);
  lua_pop(L, 1);
  if (!d || !d->s) luaL_error(L, "attempt to use a session of a closed database");
  return (bf_lua_sref){*u, d->s};
}

int bf_lua_session_tostring(lua_State *L) {
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

int bf_lua_session_eq(lua_State *L) {
  int64_t *a = luaL_checkudata(L, 1, SESSION_MT), *b = luaL_checkudata(L, 2, SESSION_MT);
  lua_getiuservalue(L, 1, 1);
  lua_getiuservalue(L, 2, 1);
  lua_pushboolean(L, *a == *b && lua_rawequal(L, -1, -2));
  return 1;
}

/* s.field: a method, else a metadata field (s.kind, s.clock, s.duration_s, ...) */
int bf_lua_session_index(lua_State *L) {
  luaL_checkudata(L, 1, SESSION_MT);
  luaL_getmetafield(L, 1, "__methods");
  lua_pushvalue(L, 2);
  if (lua_rawget(L, -2) != LUA_TNIL) return 1;
  lua_getiuservalue(L, 1, 2);
  lua_pushvalue(L, 2);
  lua_rawget(L, -2);
  return 1;
}

int bf_lua_session_info(lua_State *L) {
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
  bf_lua_set_int(L, "id", r->function_id);
  bf_lua_set_func_ident(L, r->file, r->qualname, r->firstlineno);
  bf_lua_set_num(L, "self_share", r->self_share);
  bf_lua_set_num(L, "total_share", r->total_share);
  if (!traced) {
    bf_lua_set_pos_int(L, "self_samples", r->self_samples);
    bf_lua_set_pos_int(L, "total_samples", r->total_samples);
    bf_lua_set_num(L, "self_weight", r->self_weight);
    bf_lua_set_num(L, "total_weight", r->total_weight);
    bf_lua_set_pair(L, "self_ci", r->self_lo, r->self_hi);
    bf_lua_set_pair(L, "total_ci", r->total_lo, r->total_hi);
  } else {
    bf_lua_set_pos_int(L, "calls", r->calls);
    bf_lua_set_pos_int(L, "primitive_calls", r->primitive_calls);
    bf_lua_set_pos_int(L, "resumes", r->resumes);
    bf_lua_set_pos_int(L, "self_ns", r->self_ns);
    bf_lua_set_pos_int(L, "total_ns", r->total_ns);
    int64_t pc = r->primitive_calls > 0 ? r->primitive_calls : r->calls;
    if (pc > 0 && r->total_ns >= 0) bf_lua_set_num(L, "per_call_ns", (double)r->total_ns / (double)pc);
    bf_lua_set_pos_int(L, "p50_ns", r->p50_ns);
    bf_lua_set_pos_int(L, "p90_ns", r->p90_ns);
    bf_lua_set_pos_int(L, "p99_ns", r->p99_ns);
    bf_lua_set_pos_int(L, "max_ns", r->max_ns);
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
void bf_lua_opt_filter(lua_State *L, int t, bf_lua_sref ss, bf_sample_filter *f) {
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
int bf_lua_session_functions(lua_State *L) {
  bf_lua_sref ss = bf_lua_checksession(L, 1);
  bf_sample_filter f;
  bf_lua_opt_filter(L, 2, ss, &f);
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
  int traced = p->traced;
  bf_profile_free(p);
  if (!traced) bf_lua_add_kernel_split(L, ss.s, ss.id, &f);
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
int bf_lua_session_func(lua_State *L) {
  bf_lua_sref ss = bf_lua_checksession(L, 1);
  const char *want = luaL_checkstring(L, 2);
  lua_settop(L, 2);
  lua_pushcfunction(L, bf_lua_session_functions);
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

int bf_lua_session_threads(lua_State *L) {
  bf_lua_sref ss = bf_lua_checksession(L, 1);
  bf_thread_ref *th = NULL;
  size_t n = 0;
  if (bf_store_threads(ss.s, ss.id, &th, &n) < 0) return luaL_error(L, "%s", bf_store_errmsg(ss.s));
  lua_createtable(L, (int)n, 0);
  for (size_t i = 0; i < n; i++) {
    lua_createtable(L, 0, 3);
    bf_lua_set_int(L, "id", th[i].id);
    bf_lua_set_int(L, "native_tid", th[i].native_tid);
    bf_lua_set_str(L, "name", th[i].name);
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
  bf_lua_set_int(L, "function_id", fid);
  bf_lua_set_str(L, "qualname", ref.qualname);
  bf_lua_set_str(L, "file", ref.file);
  bf_lua_set_int(L, "firstlineno", ref.firstlineno);
  bf_lua_set_int(L, "line", line);
}

/* Push the frames of a stack, outermost first. */
void bf_lua_push_stack(lua_State *L, bf_store *s, int64_t stack_id) {
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
int bf_lua_db_stack(lua_State *L) {
  bf_store *s = bf_lua_checkdb(L, 1);
  bf_lua_push_stack(L, s, (int64_t)luaL_checkinteger(L, 2));
  return 1;
}
