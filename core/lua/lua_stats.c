/* lua_stats.c — the correlate and gate helpers: bifocal.join (a sampled and
 * a traced session side by side) and bifocal.stats (mean, median,
 * percentile, stdev, spearman, wilson, two_proportion).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "correlate.h"
#include "lua_int.h"
#include "profile.h"

/* ---- join ------------------------------------------------------------------ */

static void push_join(lua_State *L, const bf_join *j) {
  lua_createtable(L, (int)j->n, 0);
  for (size_t i = 0; i < j->n; i++) {
    const bf_join_row *r = &j->rows[i];
    lua_createtable(L, 0, 24);
    bf_lua_set_func_ident(L, r->file, r->qualname, r->firstlineno);
    bf_lua_set_bool(L, "observed", r->observed);
    if (r->observed) {
      bf_lua_set_int(L, "self_samples", r->self_samples);
      bf_lua_set_int(L, "total_samples", r->total_samples);
      bf_lua_set_num(L, "self_share", r->self_share);
      bf_lua_set_num(L, "total_share", r->total_share);
      bf_lua_set_pair(L, "self_ci", r->self_lo, r->self_hi);
      bf_lua_set_pair(L, "total_ci", r->total_lo, r->total_hi);
      bf_lua_set_num(L, "sampled_ns", r->sampled_ns);
    }
    bf_lua_set_bool(L, "traced", r->traced);
    if (r->traced) {
      bf_lua_set_int(L, "calls", r->calls);
      bf_lua_set_int(L, "primitive_calls", r->primitive_calls);
      bf_lua_set_int(L, "self_ns", r->self_ns);
      bf_lua_set_int(L, "total_ns", r->total_ns);
      bf_lua_set_num(L, "traced_self_share", r->traced_self_share);
      bf_lua_set_num(L, "per_call_ns", r->per_call_ns);
    }
    bf_lua_set_num(L, "calls_per_s", r->calls_per_s);
    lua_rawseti(L, -2, (lua_Integer)i + 1);
  }
  lua_createtable(L, 0, 10);
  bf_lua_set_int(L, "sampled", j->sampled_id);
  bf_lua_set_int(L, "traced", j->traced_id);
  bf_lua_set_int(L, "samples", j->sampled_samples);
  bf_lua_set_int(L, "sampled_duration_ns", j->sampled_duration_ns);
  bf_lua_set_int(L, "sampled_threads", j->sampled_threads);
  bf_lua_set_num(L, "budget_ns", j->budget_ns);
  bf_lua_set_int(L, "traced_ns", j->traced_ns);
  bf_lua_set_int(L, "n_both", (int64_t)j->n_both);
  bf_lua_set_num(L, "spearman", j->spearman);
  bf_lua_set_str(L, "clock", j->clock);
  if (j->interp_warning[0]) bf_lua_set_str(L, "interpreters_differ", j->interp_warning);
}

/* bifocal.join(sampled, traced) → rows, summary | nil, msg (sessions of one db) */
int bf_lua_join(lua_State *L) {
  bf_lua_sref a = bf_lua_checksession(L, 1), b = bf_lua_checksession(L, 2);
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

int bf_lua_st_mean(lua_State *L) {
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

int bf_lua_st_percentile(lua_State *L) {
  size_t n;
  double *v = checknumbers(L, 1, &n);
  double p = luaL_checknumber(L, 2);
  luaL_argcheck(L, p >= 0 && p <= 100, 2, "percentile must be in 0..100");
  if (!n) return 0;
  lua_pushnumber(L, pctl(v, n, p));
  return 1;
}

int bf_lua_st_median(lua_State *L) {
  size_t n;
  double *v = checknumbers(L, 1, &n);
  if (!n) return 0;
  lua_pushnumber(L, pctl(v, n, 50));
  return 1;
}

int bf_lua_st_stdev(lua_State *L) {
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

int bf_lua_st_spearman(lua_State *L) {
  size_t nx, ny;
  double *x = checknumbers(L, 1, &nx);
  double *y = checknumbers(L, 2, &ny);
  luaL_argcheck(L, nx == ny, 2, "both lists must have the same length");
  double r = bf_spearman(x, y, nx);
  if (!isfinite(r)) return 0;
  lua_pushnumber(L, r);
  return 1;
}

int bf_lua_st_wilson(lua_State *L) {
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
int bf_lua_st_two_proportion(lua_State *L) {
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
