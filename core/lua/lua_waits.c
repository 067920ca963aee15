/* lua_waits.c — the kernel lens in Lua: s:waits{} (wait targets ranked by
 * share of the wall time) and the kernel split added to s:functions rows. */
#include <string.h>

#include "lua_int.h"
#include "profile.h"
#include "waits.h"

/* {cpu={share=, ci={lo,hi}}, runq=..., network=..., ...} of units u. */
static void push_split(lua_State *L, const double *u, const bf_kw *k) {
  double n = (double)k->total_samples, tw = k->total_weight;
  lua_createtable(L, 0, BF_KW_N);
  for (unsigned c = 1; c < BF_KW_N; c++) {
    double share = tw > 0 ? u[c] / tw : 0, lo, hi;
    bf_wilson(share * n, n, &lo, &hi);
    lua_createtable(L, 0, 2);
    bf_lua_set_num(L, "share", share);
    bf_lua_set_pair(L, "ci", lo, hi);
    lua_setfield(L, -2, bf_kw_name(c));
  }
}

/* s:waits([{thread=, since=, until=}]) → array of {class, target, share, ci,
 * samples, wall_ns, threads, under={file, qualname, firstlineno}|nil},
 * largest first; the table's field `split` holds the whole split. */
int bf_lua_session_waits(lua_State *L) {
  bf_lua_sref ss = bf_lua_checksession(L, 1);
  bf_sample_filter f;
  bf_lua_opt_filter(L, 2, ss, &f);
  bf_kw *k = NULL;
  if (bf_kw_load(ss.s, ss.id, &f, &k) < 0) return luaL_error(L, "%s", bf_store_errmsg(ss.s));
  lua_createtable(L, (int)k->ntargets, 1);
  for (size_t i = 0; i < k->ntargets; i++) {
    const bf_kw_target *t = &k->targets[i];
    lua_createtable(L, 0, 9);
    bf_lua_set_str(L, "class", bf_kw_name(t->wait));
    bf_lua_set_str(L, "target", t->wait == BF_KW_RUNQ ? "[waiting for CPU]"
                                : t->wait == BF_WAIT_CPU ? "[on CPU]" : t->text);
    bf_lua_set_num(L, "share", t->share);
    bf_lua_set_pair(L, "ci", t->lo, t->hi);
    bf_lua_set_num(L, "samples", t->samples);
    bf_lua_set_num(L, "wall_ns", t->units);
    bf_lua_set_int(L, "threads", t->threads);
    bf_function_ref ref;
    if (t->under_function_id && bf_store_function_get(ss.s, t->under_function_id, &ref) == 0) {
      lua_createtable(L, 0, 3);
      bf_lua_set_func_ident(L, ref.file, ref.qualname, ref.firstlineno);
      lua_setfield(L, -2, "under");
    }
    lua_rawseti(L, -2, (lua_Integer)i + 1);
  }
  push_split(L, k->units, k);
  lua_setfield(L, -2, "split");
  bf_kw_free(k);
  return 1;
}

void bf_lua_add_kernel_split(lua_State *L, bf_store *s, int64_t session_id, const bf_sample_filter *f) {
  /* rows array at the top; each row's id is its function id */
  bf_kw *k = NULL;
  if (bf_kw_load(s, session_id, f, &k) < 0) {
    luaL_error(L, "%s", bf_store_errmsg(s));
    return;
  }
  if (k->kernel_units <= 0) {
    bf_kw_free(k);
    return;
  }
  lua_Integer n = luaL_len(L, -1);
  for (lua_Integer i = 1; i <= n; i++) {
    lua_rawgeti(L, -1, i);
    lua_getfield(L, -1, "id");
    const bf_kw_func *kf = bf_kw_func_find(k, (int64_t)lua_tointeger(L, -1));
    lua_pop(L, 1);
    if (kf) {
      push_split(L, kf->units, k);
      lua_setfield(L, -2, "kernel");
    }
    lua_pop(L, 1);
  }
  bf_kw_free(k);
}
