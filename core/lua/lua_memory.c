/* lua_memory.c — s:memory{}: memory per function on both kinds of session
 * (core/memory_join.h), the Lua side of the memory join (scripts/memory.lua).
 *
 * Traced (trace --memory): exact allocs, alloc/freed/live bytes and counts,
 * calls and bytes per call; with {blocks=true}, the largest blocks still live
 * at the end with their stacks. Sampled (record --memory): resident growth and
 * shrink per function (self and total), the growth share and its 95% interval.
 */
#include <errno.h>
#include <string.h>

#include "lua_int.h"
#include "memory_join.h"
#include "trace_memory.h"

static void push_row(lua_State *L, const bf_mem_row *r, int traced) {
  lua_createtable(L, 0, 20);
  if (r->function_id) {
    bf_lua_set_func_ident(L, r->file ? r->file : "?", r->qualname ? r->qualname : "?", r->firstlineno);
  } else { /* traced: allocations made with no Python function on the stack */
    bf_lua_set_str(L, "qualname", "<no Python frame>");
    bf_lua_set_str(L, "name", "<no Python frame>");
  }
  bf_lua_set_str(L, "lens", traced ? "traced" : "sampled");
  if (traced) {
    bf_lua_set_int(L, "allocs", r->allocs);
    bf_lua_set_int(L, "alloc_bytes", r->alloc_bytes);
    bf_lua_set_int(L, "frees", r->frees);
    bf_lua_set_int(L, "freed_bytes", r->freed_bytes);
    bf_lua_set_int(L, "live_count", r->live_count);
    bf_lua_set_int(L, "live_bytes", r->live_bytes);
    bf_lua_set_int(L, "calls", r->calls);
    bf_lua_set_num(L, "alloc_share", r->alloc_share);
    bf_lua_set_num(L, "live_share", r->live_share);
    if (r->calls > 0) {
      bf_lua_set_num(L, "alloc_bytes_per_call", (double)r->alloc_bytes / (double)r->calls);
      bf_lua_set_num(L, "live_bytes_per_call", (double)r->live_bytes / (double)r->calls);
    }
  } else {
    bf_lua_set_num(L, "growth_bytes", r->growth_bytes);
    bf_lua_set_num(L, "shrink_bytes", r->shrink_bytes);
    bf_lua_set_num(L, "net_bytes", r->growth_bytes - r->shrink_bytes);
    bf_lua_set_num(L, "total_growth_bytes", r->total_growth_bytes);
    bf_lua_set_num(L, "total_shrink_bytes", r->total_shrink_bytes);
    bf_lua_set_int(L, "growth_changes", r->growth_changes);
    bf_lua_set_num(L, "growth_share", r->growth_share);
    bf_lua_set_pair(L, "growth_ci", r->growth_lo, r->growth_hi);
    bf_lua_set_num(L, "total_growth_share", r->total_growth_share);
  }
}

typedef struct top_ud {
  lua_State *L;
  bf_store *s;
  lua_Integer n;
} top_ud;

static int push_ident(lua_State *L, bf_store *s, int64_t fid) {
  bf_function_ref fr = {0};
  if (fid && bf_store_function_get(s, fid, &fr) < 0) return -EIO;
  lua_createtable(L, 0, 4);
  if (fid) bf_lua_set_func_ident(L, fr.file, fr.qualname, fr.firstlineno);
  else bf_lua_set_str(L, "name", "<no Python frame>");
  return 0;
}

static int on_top(void *ud, const bf_trace_memory_top *t) {
  top_ud *u = ud;
  lua_State *L = u->L;
  if (push_ident(L, u->s, t->function_id) < 0) return -EIO;
  bf_lua_set_int(L, "rank", t->rank);
  bf_lua_set_int(L, "size_bytes", t->size_bytes);
  lua_createtable(L, (int)t->nstack, 0);
  for (size_t i = 0; i < t->nstack; i++) {
    if (push_ident(L, u->s, t->stack[i]) < 0) return -EIO;
    lua_rawseti(L, -2, (lua_Integer)i + 1);
  }
  lua_setfield(L, -2, "stack");
  lua_rawseti(L, -2, ++u->n);
  return 0;
}

/* s:memory{blocks=true}: the largest live blocks of a traced session. */
static int push_blocks(lua_State *L, bf_lua_sref ss) {
  int has = bf_store_trace_memory_has(ss.s, ss.id);
  if (has < 0) return luaL_error(L, "%s", bf_store_errmsg(ss.s));
  if (!has) {
    luaL_pushfail(L);
    lua_pushfstring(L, "session %I has no traced memory blocks (trace it with `bifocal trace --memory`)",
                    (lua_Integer)ss.id);
    return 2;
  }
  lua_newtable(L);
  top_ud u = {L, ss.s, 0};
  if (bf_store_trace_memory_top_foreach(ss.s, ss.id, on_top, &u) < 0)
    return luaL_error(L, "%s", bf_store_errmsg(ss.s));
  return 1;
}

/* s:memory([{limit=N, blocks=true, thread=, since=, until=}]) → rows, summary | nil, msg */
int bf_lua_session_memory(lua_State *L) {
  bf_lua_sref ss = bf_lua_checksession(L, 1);
  bf_sample_filter f;
  bf_lua_opt_filter(L, 2, ss, &f);
  lua_Integer limit = 0;
  if (lua_istable(L, 2)) {
    if (lua_getfield(L, 2, "blocks") != LUA_TNIL && lua_toboolean(L, -1)) return push_blocks(L, ss);
    lua_pop(L, 1);
    if (lua_getfield(L, 2, "limit") != LUA_TNIL) {
      limit = luaL_checkinteger(L, -1);
      if (limit < 0) luaL_argerror(L, 2, "limit must be >= 0");
    }
    lua_pop(L, 1);
  }
  bf_mem_table *t = NULL;
  int rc = bf_mem_table_load(ss.s, ss.id, &f, &t);
  if (rc == -ENODATA) {
    luaL_pushfail(L);
    lua_pushstring(L, bf_store_errmsg(ss.s));
    return 2;
  }
  if (rc < 0) return luaL_error(L, "%s", bf_store_errmsg(ss.s));
  size_t n = limit > 0 && (size_t)limit < t->n ? (size_t)limit : t->n;
  lua_createtable(L, (int)n, 0);
  for (size_t i = 0; i < n; i++) {
    push_row(L, &t->rows[i], t->traced);
    lua_rawseti(L, -2, (lua_Integer)i + 1);
  }
  lua_createtable(L, 0, 8);
  bf_lua_set_str(L, "lens", t->traced ? "traced" : "sampled");
  bf_lua_set_int(L, "functions", (int64_t)t->n);
  if (t->traced) {
    bf_lua_set_int(L, "alloc_bytes", t->alloc_bytes);
    bf_lua_set_int(L, "live_bytes", t->live_bytes);
  } else {
    bf_lua_set_num(L, "growth_bytes", t->growth_bytes);
    bf_lua_set_num(L, "shrink_bytes", t->shrink_bytes);
    bf_lua_set_int(L, "changes", t->changes);
    bf_lua_set_num(L, "effective_changes", t->n_eff);
  }
  bf_mem_table_free(t);
  return 2;
}
