/* lua_samples.c — what a session holds, read through core/query.h:
 * s:samples (bifocal.samples, a streaming cursor behind a generic-for
 * iterator: memory is one stored chunk whatever the session's size),
 * s:stacks, s:edges and s:calls (traced sessions).
 */
#include <stdlib.h>
#include <string.h>

#include "lua_int.h"
#include "query.h"

typedef struct lsamples {
  bf_q_cursor *c; /* NULL = closed */
  int64_t read;
  bf_lua_db *db;  /* kept alive by uservalue 1 (userdata never move) */
} lsamples;

int bf_lua_samples_release(lua_State *L) {
  lsamples *b = luaL_checkudata(L, 1, SAMPLES_MT);
  bf_q_timeline_close(b->c);
  b->c = NULL;
  return 0;
}

int bf_lua_samples_tostring(lua_State *L) {
  lsamples *b = luaL_checkudata(L, 1, SAMPLES_MT);
  lua_pushfstring(L, "bifocal.samples (%I read%s)", (lua_Integer)b->read, b->c ? "" : ", closed");
  return 1;
}

static int samples_next(lua_State *L) {
  lsamples *b = lua_touserdata(L, lua_upvalueindex(1)); /* our own upvalue: no type check per sample */
  if (!b->c) return 0;
  /* the cursor reads through the db: refuse to go on once it is closed */
  bf_lua_db *d = b->db;
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
int bf_lua_session_samples(lua_State *L) {
  bf_lua_sref ss = bf_lua_checksession(L, 1);
  bf_sample_filter f;
  bf_lua_opt_filter(L, 2, ss, &f);
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
int bf_lua_session_stacks(lua_State *L) {
  bf_lua_sref ss = bf_lua_checksession(L, 1);
  bf_sample_filter f;
  bf_lua_opt_filter(L, 2, ss, &f);
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
    bf_lua_set_int(L, "stack_id", sc[i].stack_id);
    bf_lua_set_int(L, "count", sc[i].count);
    bf_lua_set_int(L, "weight", sc[i].weight);
    bf_lua_push_stack(L, ss.s, sc[i].stack_id);
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
  bf_lua_set_int(L, "id", fid);
  bf_lua_set_str(L, "qualname", ref.qualname);
  bf_lua_set_str(L, "file", ref.file);
  bf_lua_set_int(L, "firstlineno", ref.firstlineno);
}

/* The state of the edge and call-record callbacks that fill an array. */
typedef struct rec_ud {
  lua_State *L;
  bf_store *s;
  int64_t only_fid; /* 0 = all (call records) */
  lua_Integer n;
} rec_ud;

static int push_edge(void *ud, const bf_trace_edge *te) {
  rec_ud *e = ud;
  lua_State *L = e->L;
  lua_createtable(L, 0, 6);
  push_function(L, e->s, te->caller_function_id);
  lua_setfield(L, -2, "caller");
  push_function(L, e->s, te->callee_function_id);
  lua_setfield(L, -2, "callee");
  bf_lua_set_int(L, "calls", te->calls);
  bf_lua_set_int(L, "primitive_calls", te->primitive_calls);
  bf_lua_set_int(L, "self_ns", te->self_ns);
  bf_lua_set_int(L, "total_ns", te->total_ns);
  lua_rawseti(L, -2, ++e->n);
  return 0;
}

/* s:edges() → array of {caller (nil = thread root), callee, calls, primitive_calls, self_ns, total_ns} */
int bf_lua_session_edges(lua_State *L) {
  bf_lua_sref ss = bf_lua_checksession(L, 1);
  lua_newtable(L);
  rec_ud e = {L, ss.s, 0, 0};
  if (bf_q_trace_edges(ss.s, ss.id, push_edge, &e) < 0) return luaL_error(L, "%s", bf_store_errmsg(ss.s));
  return 1;
}

static int push_record(void *ud, const bf_call_record *r) {
  rec_ud *e = ud;
  if (e->only_fid && r->function_id != e->only_fid) return 0;
  lua_State *L = e->L;
  lua_createtable(L, 0, 7);
  push_function(L, e->s, r->function_id);
  lua_setfield(L, -2, "func");
  bf_lua_set_int(L, "thread_id", r->thread_id);
  bf_lua_set_int(L, "start_ns", r->start_ns);
  bf_lua_set_int(L, "duration_ns", r->duration_ns);
  bf_lua_set_int(L, "depth", r->depth);
  push_function(L, e->s, r->parent_function_id);
  lua_setfield(L, -2, "parent");
  lua_rawseti(L, -2, ++e->n);
  return 0;
}

/* s:calls([qualname]) → array of per-call records {func, thread_id, start_ns,
 * duration_ns, depth, parent} (focus-mode traced sessions), optionally of one function */
int bf_lua_session_calls(lua_State *L) {
  bf_lua_sref ss = bf_lua_checksession(L, 1);
  int64_t only = 0;
  if (!lua_isnoneornil(L, 2)) {
    const char *want = luaL_checkstring(L, 2);
    lua_settop(L, 2);
    lua_pushcfunction(L, bf_lua_session_func);
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
