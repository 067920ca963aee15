/* correlate.c — join a sampled and a traced session by function identity and
 * derive the call rate both lenses imply; terminal and JSON output. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "correlate.h"

#include "jsonw.h"
#include "store_int.h"
#include "text.h"
#include "util.h"

static int cmp_dbl_idx(const void *a, const void *b, void *ctx) {
  const double *v = ctx;
  double x = v[*(const size_t *)a], y = v[*(const size_t *)b];
  return (x > y) - (x < y);
}

/* Average ranks (1-based), ties share the mean rank. */
static int ranks(const double *v, size_t n, double *out) {
  size_t *idx = malloc(n * sizeof *idx);
  if (!idx) return -ENOMEM;
  for (size_t i = 0; i < n; i++) idx[i] = i;
  qsort_r(idx, n, sizeof *idx, cmp_dbl_idx, (void *)v);
  for (size_t i = 0; i < n;) {
    size_t j = i;
    while (j + 1 < n && v[idx[j + 1]] == v[idx[i]]) j++;
    double r = ((double)i + (double)j) / 2 + 1;
    for (size_t k = i; k <= j; k++) out[idx[k]] = r;
    i = j + 1;
  }
  free(idx);
  return 0;
}

double bf_spearman(const double *x, const double *y, size_t n) {
  if (n < 2) return NAN;
  double *rx = malloc(n * sizeof *rx), *ry = malloc(n * sizeof *ry);
  double res = NAN;
  if (!rx || !ry || ranks(x, n, rx) || ranks(y, n, ry)) goto out;
  /* Pearson on the ranks: correct with ties, unlike 1 - 6Σd²/(n(n²-1)). */
  double mx = 0, my = 0;
  for (size_t i = 0; i < n; i++) {
    mx += rx[i];
    my += ry[i];
  }
  mx /= (double)n;
  my /= (double)n;
  double sxy = 0, sxx = 0, syy = 0;
  for (size_t i = 0; i < n; i++) {
    sxy += (rx[i] - mx) * (ry[i] - my);
    sxx += (rx[i] - mx) * (rx[i] - mx);
    syy += (ry[i] - my) * (ry[i] - my);
  }
  if (sxx > 0 && syy > 0) res = sxy / sqrt(sxx * syy);
out:
  free(rx);
  free(ry);
  return res;
}

static int cmp_join(const void *a, const void *b) {
  const bf_join_row *x = a, *y = b;
  if (x->observed != y->observed) return x->observed ? -1 : 1;
  if (x->observed) {
    if (x->self_share != y->self_share) return x->self_share < y->self_share ? 1 : -1;
    if (x->total_share != y->total_share) return x->total_share < y->total_share ? 1 : -1;
  } else if (x->self_ns != y->self_ns) {
    return x->self_ns < y->self_ns ? 1 : -1;
  }
  int c = strcmp(x->qualname, y->qualname);
  return c ? c : strcmp(x->file, y->file);
}

/* ---- the interpreter a session ran (extra.python) ------------------------- */

void bf_session_interp(const bf_session_info *in, char *exe, size_t exe_len, char *ver, size_t ver_len) {
  const char *py, *v;
  exe[0] = ver[0] = 0;
  if (in->extra_json && bf_json_find(in->extra_json, "python", &py) == 0) {
    if (bf_json_find(py, "executable", &v) == 0 && *v == '"' && !bf_json_string(v, exe, exe_len)) exe[0] = 0;
    if (bf_json_find(py, "version", &v) == 0 && *v == '"' && !bf_json_string(v, ver, ver_len)) ver[0] = 0;
  }
  if (!ver[0] && in->python_version) {
    char q[80];
    snprintf(q, sizeof q, "\"%.64s\"", in->python_version);
    if (!bf_json_string(q, ver, ver_len)) ver[0] = 0;
  }
}

int bf_sessions_interp_differ(const bf_session_info *a, const bf_session_info *b, bf_err *why) {
  char ea[512], eb[512], va[64], vb[64];
  bf_session_interp(a, ea, sizeof ea, va, sizeof va);
  bf_session_interp(b, eb, sizeof eb, vb, sizeof vb);
  int differ = (va[0] && vb[0] && strcmp(va, vb) != 0) || (ea[0] && eb[0] && strcmp(ea, eb) != 0);
  bf_err_clear(why);
  if (differ)
    bf_err_set(why, 1, "sessions %lld and %lld ran different interpreters: Python %s (%s) vs Python %s (%s)",
             (long long)a->id, (long long)b->id, va[0] ? va : "?", ea[0] ? ea : "executable unknown",
             vb[0] ? vb : "?", eb[0] ? eb : "executable unknown");
  return differ;
}

void bf_session_line_add_exe(const bf_session_info *in, const bf_session_info *other, char *buf, size_t len) {
  char exe[1024], ver[64];
  if (!bf_sessions_interp_differ(in, other, NULL)) return;
  bf_session_interp(in, exe, sizeof exe, ver, sizeof ver);
  /* a header line is fitted to the terminal: keep the path's end, which tells most */
  const char *e = exe;
  size_t el = strlen(exe);
  if (el > 40) {
    e = exe + el - 39;
    while (((unsigned char)*e & 0xc0) == 0x80) e++;
  }
  size_t n = strlen(buf);
  if (exe[0] && n < len) snprintf(buf + n, len - n, " · %s%s", e == exe ? "" : "…", e);
}

static int is_kind(const bf_session_info *in, const char *k) { return in->kind && strcmp(in->kind, k) == 0; }

/* The wall or CPU time the sampled session's shares are fractions of. */
static double join_budget(const bf_join *j, const bf_session_info *si, const bf_profile *sp, size_t nth) {
  int cpu = strcmp(j->clock, "cpu") == 0;
  if (cpu && sp->total_weight > (double)sp->total_samples) return sp->total_weight; /* weights are CPU ns */
  if (is_kind(si, "sampled") && si->achieved_rate_hz > 0)
    /* one sample per thread per tick: each stands for one tick interval of
     * that thread's wall time, whatever the thread's lifetime */
    return (double)sp->total_samples * 1e9 / si->achieved_rate_hz;
  return (double)j->sampled_duration_ns * (double)(nth ? nth : 1);
}

/* The exact figures of traced row t on joined row o. */
static void join_traced_figures(bf_join_row *o, const bf_func_row *t) {
  o->traced = 1;
  o->calls = t->calls;
  o->primitive_calls = t->primitive_calls;
  o->self_ns = t->self_ns;
  o->total_ns = t->total_ns;
  o->traced_self_share = t->self_share;
  int64_t pc = t->primitive_calls > 0 ? t->primitive_calls : t->calls;
  o->per_call_ns = pc > 0 && t->total_ns > 0 ? (double)t->total_ns / (double)pc : NAN;
}

/* Row o from sampled row r and, when traced too, traced row t (else NULL).
 * A function seen by both adds its (sampled self share, traced self ns)
 * pair to xs/ys for the rank correlation. */
static void join_sampled_row(bf_join *j, bf_join_row *o, const bf_func_row *r, const bf_func_row *t, double *xs,
                             double *ys) {
  o->file = r->file;
  o->qualname = r->qualname;
  o->firstlineno = r->firstlineno;
  o->observed = r->total_samples > 0 || r->total_weight > 0;
  o->self_samples = r->self_samples;
  o->total_samples = r->total_samples;
  o->self_share = r->self_share;
  o->total_share = r->total_share;
  o->self_lo = r->self_lo;
  o->self_hi = r->self_hi;
  o->total_lo = r->total_lo;
  o->total_hi = r->total_hi;
  o->sampled_ns = r->total_share * j->budget_ns;
  o->calls = o->primitive_calls = o->self_ns = o->total_ns = -1;
  o->per_call_ns = o->calls_per_s = o->traced_self_share = NAN;
  if (!t) return;
  join_traced_figures(o, t);
  if (o->observed && isfinite(o->per_call_ns) && j->sampled_duration_ns > 0)
    o->calls_per_s = (o->sampled_ns / o->per_call_ns) / ((double)j->sampled_duration_ns / 1e9);
  if (o->observed) {
    xs[j->n_both] = o->self_share;
    ys[j->n_both] = (double)t->self_ns;
    j->n_both++;
  }
}

/* Row o from a traced function the sampler never saw. */
static void join_traced_row(bf_join_row *o, const bf_func_row *t) {
  o->file = t->file;
  o->qualname = t->qualname;
  o->firstlineno = t->firstlineno;
  o->observed = 0;
  o->self_samples = o->total_samples = -1;
  o->self_share = o->total_share = o->self_lo = o->self_hi = o->total_lo = o->total_hi = NAN;
  o->sampled_ns = NAN;
  join_traced_figures(o, t);
  o->calls_per_s = NAN;
}

int bf_join_sessions(bf_store *s, int64_t sampled_id, int64_t traced_id, bf_join **out) {
  *out = NULL;
  bf_session_info *si = NULL, *ti = NULL;
  bf_profile *sp = NULL, *tp = NULL;
  bf_join *j = NULL;
  bf_thread_ref *th = NULL;
  size_t nth = 0;
  double *xs = NULL, *ys = NULL;
  int64_t *tidx = NULL;
  int rc;
  if ((rc = bf_store_session_get(s, sampled_id, &si)) || (rc = bf_store_session_get(s, traced_id, &ti))) goto out;
  if (is_kind(si, "traced")) {
    rc = bf_store_fail(s, -EINVAL, "session %lld is traced; give a sampled or imported session first",
                       (long long)sampled_id);
    goto out;
  }
  if (!is_kind(ti, "traced")) {
    rc = bf_store_fail(s, -EINVAL, "session %lld is %s, not traced", /* remedy: repl/cli_hints.c */
                       (long long)traced_id, ti->kind ? ti->kind : "of unknown kind");
    goto out;
  }
  if ((rc = bf_profile_functions(s, sampled_id, NULL, BF_SORT_SELF, &sp)) ||
      (rc = bf_profile_functions(s, traced_id, NULL, BF_SORT_SELF, &tp)) ||
      (rc = bf_store_threads(s, sampled_id, &th, &nth)))
    goto out;
  j = calloc(1, sizeof *j);
  size_t cap = sp->n + tp->n;
  if (!j || !(j->rows = calloc(cap ? cap : 1, sizeof *j->rows)) || !(xs = malloc((cap + 1) * sizeof *xs)) ||
      !(ys = malloc((cap + 1) * sizeof *ys)) || !(tidx = malloc((tp->n + 1) * sizeof *tidx))) {
    rc = bf_store_fail(s, -ENOMEM, "out of memory");
    goto out;
  }
  j->sampled_id = sampled_id;
  j->traced_id = traced_id;
  bf_err iw = BF_ERR_INIT;
  bf_sessions_interp_differ(si, ti, &iw);
  size_t iwn = strnlen(iw.msg, sizeof j->interp_warning - 1); /* cut as before, at 1199 bytes */
  memcpy(j->interp_warning, iw.msg, iwn);
  j->interp_warning[iwn] = '\0';
  j->sampled_samples = sp->total_samples;
  j->sampled_duration_ns = si->duration_ns > 0 ? si->duration_ns : 0;
  j->sampled_threads = (int64_t)nth;
  j->traced_ns = tp->total_ns;
  snprintf(j->clock_buf, sizeof j->clock_buf, "%s", si->clock ? si->clock : "wall");
  j->clock = j->clock_buf;
  j->budget_ns = join_budget(j, si, sp, nth);

  /* function ids are interned once per database, so they are the identity */
  bf_map3 tmap = {0};
  for (size_t i = 0; i < tp->n; i++) {
    tidx[i] = 0;
    if (bf_map3_put(&tmap, tp->rows[i].function_id, 0, 0, (int64_t)i)) {
      bf_map3_free(&tmap);
      rc = bf_store_fail(s, -ENOMEM, "out of memory");
      goto out;
    }
  }
  size_t n = 0;
  for (size_t i = 0; i < sp->n; i++) {
    int64_t *hit = bf_map3_get(&tmap, sp->rows[i].function_id, 0, 0);
    if (hit) tidx[*hit] = 1;
    join_sampled_row(j, &j->rows[n++], &sp->rows[i], hit ? &tp->rows[*hit] : NULL, xs, ys);
  }
  for (size_t i = 0; i < tp->n; i++) {
    if (tidx[i]) continue;
    join_traced_row(&j->rows[n++], &tp->rows[i]);
  }
  bf_map3_free(&tmap);
  j->n = n;
  j->spearman = bf_spearman(xs, ys, j->n_both);
  qsort(j->rows, j->n, sizeof *j->rows, cmp_join);
  *out = j;
  j = NULL;
  rc = 0;
out:
  free(xs);
  free(ys);
  free(tidx);
  bf_thread_refs_free(th, nth);
  bf_profile_free(sp);
  bf_profile_free(tp);
  bf_session_info_free(si);
  bf_session_info_free(ti);
  bf_join_free(j);
  return rc;
}

void bf_join_free(bf_join *j) {
  if (!j) return;
  free(j->rows);
  free(j);
}

static void fmt_rate(double v, char *buf, size_t len) {
  if (!isfinite(v))
    snprintf(buf, len, "-");
  else if (v >= 1e6)
    snprintf(buf, len, "%.2fM/s", v / 1e6);
  else if (v >= 1e3)
    snprintf(buf, len, "%.1fk/s", v / 1e3);
  else
    snprintf(buf, len, "%.1f/s", v);
}

void bf_join_print(const bf_join *j, FILE *out, int limit, const char *limit_option, int color) {
  const char *dim = color ? "\033[2m" : "", *rst = color ? "\033[0m" : "", *b = color ? "\033[1m" : "";
  size_t lim = limit <= 0 || (size_t)limit > j->n ? j->n : (size_t)limit;
  fprintf(out, "%ssampled %lld × traced %lld%s · %lld samples · %s clock · %zu functions in both", b,
          (long long)j->sampled_id, (long long)j->traced_id, rst, (long long)j->sampled_samples,
          bf_inert(j->clock, (char[64]){0}, 64),
          j->n_both);
  if (isfinite(j->spearman))
    fprintf(out, " · spearman %.3f\n", j->spearman);
  else
    fputs(" · spearman n/a\n", out);
  fprintf(out, "%s%-6s %-13s %6s %7s %9s %9s %9s %9s  %s%s\n", dim, "SELF", " 95% CI", "TOTAL", "SAMPLES", "CALLS",
          "PER CALL", "TR.SELF", "EST.RATE", "FUNCTION", rst);
  for (size_t i = 0; i < lim; i++) {
    const bf_join_row *r = &j->rows[i];
    char self[16], ci[24], tot[16], smp[16], calls[24], pc[32], ts[32], rate[24];
    if (r->observed) {
      snprintf(self, sizeof self, "%5.1f%%", r->self_share * 100);
      snprintf(ci, sizeof ci, "[%.1f-%.1f]", r->self_lo * 100, r->self_hi * 100);
      snprintf(tot, sizeof tot, "%5.1f%%", r->total_share * 100);
      snprintf(smp, sizeof smp, "%lld", (long long)r->self_samples);
    } else {
      snprintf(self, sizeof self, "%s", "n/o");
      snprintf(ci, sizeof ci, "%s", "not observed");
      snprintf(tot, sizeof tot, "%s", "-");
      snprintf(smp, sizeof smp, "%s", "0");
    }
    if (r->traced) {
      snprintf(calls, sizeof calls, "%lld", (long long)r->calls);
      bf_fmt_ns(isfinite(r->per_call_ns) ? r->per_call_ns : -1, pc, sizeof pc);
      bf_fmt_ns((double)r->self_ns, ts, sizeof ts);
    } else {
      snprintf(calls, sizeof calls, "%s", "untraced");
      snprintf(pc, sizeof pc, "-");
      snprintf(ts, sizeof ts, "-");
    }
    fmt_rate(r->calls_per_s, rate, sizeof rate);
    char qb[1024], fb[1024]; /* names are untrusted: shown inert */
    fprintf(out, "%-6s %-13s %6s %7s %9s %9s %9s %9s  %s  %s:%lld\n", self, ci, tot, smp, calls, pc, ts, rate,
            bf_inert(r->qualname, qb, sizeof qb), bf_inert(r->file, fb, sizeof fb), (long long)r->firstlineno);
  }
  if (lim < j->n) {
    char how[64] = ""; /* the option is the caller's */
    if (limit_option) snprintf(how, sizeof how, " (use %s)", limit_option);
    fprintf(out, "%s… %zu more%s%s\n", dim, j->n - lim, how, rst);
  }
}

/* key: v when ok, else null. */
static void knum_or_null(bf_jw *w, const char *key, int ok, double v) {
  bf_jw_key(w, key);
  if (ok)
    bf_jw_num(w, v);
  else
    bf_jw_null(w);
}

/* key: [lo,hi] when the function was observed, else null. */
static void kci_or_null(bf_jw *w, const char *key, int observed, double lo, double hi) {
  bf_jw_key(w, key);
  if (!observed) {
    bf_jw_null(w);
    return;
  }
  bf_jw_arr(w);
  bf_jw_num(w, lo);
  bf_jw_num(w, hi);
  bf_jw_end(w);
}

/* One row of "functions". */
static void join_row_json(bf_jw *w, const bf_join_row *r) {
  int o = r->observed, t = r->traced;
  bf_jw_obj(w);
  bf_jw_kstr(w, "file", r->file);
  bf_jw_kstr(w, "qualname", r->qualname);
  bf_jw_kint(w, "firstlineno", r->firstlineno);
  bf_jw_kbool(w, "observed", o);
  knum_or_null(w, "self_share", o, r->self_share);
  kci_or_null(w, "self_ci", o, r->self_lo, r->self_hi);
  knum_or_null(w, "total_share", o, r->total_share);
  kci_or_null(w, "total_ci", o, r->total_lo, r->total_hi);
  knum_or_null(w, "self_samples", r->self_samples >= 0, (double)r->self_samples);
  knum_or_null(w, "total_samples", r->total_samples >= 0, (double)r->total_samples);
  knum_or_null(w, "sampled_ns", o, r->sampled_ns);
  bf_jw_kbool(w, "traced", t);
  knum_or_null(w, "calls", t, (double)r->calls);
  knum_or_null(w, "primitive_calls", t, (double)r->primitive_calls);
  knum_or_null(w, "self_ns", t, (double)r->self_ns);
  knum_or_null(w, "total_ns", t, (double)r->total_ns);
  bf_jw_knum(w, "per_call_ns", r->per_call_ns);
  bf_jw_knum(w, "calls_per_s", r->calls_per_s);
  bf_jw_end(w);
}

void bf_join_json(const bf_join *j, FILE *out) {
  bf_jw w;
  bf_jw_init(&w, out);
  bf_jw_obj(&w);
  bf_jw_kint(&w, "sampled", j->sampled_id);
  bf_jw_kint(&w, "traced", j->traced_id);
  bf_jw_kstr(&w, "clock", j->clock);
  bf_jw_kint(&w, "samples", j->sampled_samples);
  bf_jw_kint(&w, "sampled_duration_ns", j->sampled_duration_ns);
  bf_jw_kint(&w, "sampled_threads", j->sampled_threads);
  bf_jw_knum(&w, "budget_ns", j->budget_ns);
  bf_jw_kint(&w, "traced_ns", j->traced_ns);
  bf_jw_kint(&w, "n_both", (long long)j->n_both);
  bf_jw_knum(&w, "spearman", j->spearman);
  bf_jw_kstr(&w, "interpreters_differ", j->interp_warning[0] ? j->interp_warning : NULL);
  bf_jw_key(&w, "functions");
  bf_jw_arr(&w);
  for (size_t i = 0; i < j->n; i++) join_row_json(&w, &j->rows[i]);
  bf_jw_end(&w);
  bf_jw_end(&w);
  fputc('\n', out);
}
