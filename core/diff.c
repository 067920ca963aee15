/* diff.c — what changed between two sessions: per-function change of self
 * and total share with a two-proportion z-test, and the differential flame
 * graph. Sessions of different kind, clock, mode or rate are flagged. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "correlate.h"
#include "diff.h"
#include "jsonw.h"
#include "query.h"
#include "session_json.h"
#include "store_int.h"
#include "views_int.h"

static int same_str(const char *a, const char *b) {
  return (!a && !b) || (a && b && strcmp(a, b) == 0);
}

int bf_diff_compatible(bf_store *s, int64_t a, int64_t b, bf_err *why) {
  bf_session_info *ia = NULL, *ib = NULL;
  bf_err_clear(why);
  int rc = bf_store_session_get(s, a, &ia);
  if (!rc) rc = bf_store_session_get(s, b, &ib);
  if (rc) goto out;
  char w[512] = ""; /* every field that differs, "; "-separated */
  size_t n = 0;
#define WHY(...)                                                        \
  do {                                                                  \
    if (n < sizeof w) n += (size_t)snprintf(w + n, sizeof w - n, n ? "; " : ""); \
    if (n < sizeof w) n += (size_t)snprintf(w + n, sizeof w - n, __VA_ARGS__);   \
  } while (0)
  if (bf_q_kind_of(ia) != bf_q_kind_of(ib) || !same_str(ia->kind, ib->kind))
    WHY("kind differs (%s vs %s)", ia->kind, ib->kind);
  if (bf_q_clock_of(ia) != bf_q_clock_of(ib))
    WHY("clock differs (%s vs %s)", ia->clock ? ia->clock : "?", ib->clock ? ib->clock : "?");
  if (!same_str(ia->mode, ib->mode))
    WHY("mode differs (%s vs %s)", ia->mode ? ia->mode : "?", ib->mode ? ib->mode : "?");
  double ra = ia->rate_hz, rb = ib->rate_hz;
  if (fabs(ra - rb) > 0.01 * (ra > rb ? ra : rb)) WHY("rate differs (%g Hz vs %g Hz)", ra, rb);
#undef WHY
  rc = w[0] ? bf_err_set(why, BF_DIFF_NOT_COMPARABLE, "%s", w) : BF_DIFF_COMPARABLE;
out:
  bf_session_info_free(ia);
  bf_session_info_free(ib);
  return rc;
}

typedef struct drow {
  const bf_func_row *a, *b; /* NULL when absent from that session */
  double sa, sb, ta, tb;    /* shares */
  double z, p;              /* self-share test; p < 0 when not tested */
  double key;
} drow;

static int cmp_drow(const void *x, const void *y) {
  const drow *a = x, *b = y;
  return a->key < b->key ? 1 : a->key > b->key ? -1 : 0;
}

/* Two-proportion z-test of k1/n1 vs k2/n2. OUT: *z, *p (two-sided). */
static void ztest(double p1, double n1, double p2, double n2, double *z, double *p) {
  if (n1 <= 0 || n2 <= 0) {
    *z = 0;
    *p = -1;
    return;
  }
  double pool = (p1 * n1 + p2 * n2) / (n1 + n2);
  double se = sqrt(pool * (1 - pool) * (1 / n1 + 1 / n2));
  if (se <= 0) {
    *z = 0;
    *p = p1 == p2 ? 1 : 0;
    return;
  }
  *z = (p2 - p1) / se;
  *p = erfc(fabs(*z) / sqrt(2.0));
}

static void json_side(bf_jw *w, const char *key, const bf_func_row *r, double self, double total) {
  bf_jw_key(w, key);
  bf_jw_obj(w);
  bf_jw_knum(w, "self_share", self);
  bf_jw_knum(w, "total_share", total);
  if (r && r->self_samples >= 0) {
    bf_jw_kint(w, "self_samples", r->self_samples);
    bf_jw_kint(w, "total_samples", r->total_samples);
  } else if (r) {
    bf_jw_kint(w, "calls", r->calls);
    bf_jw_kint(w, "self_ns", r->self_ns);
    bf_jw_kint(w, "total_ns", r->total_ns);
  } else {
    bf_jw_kbool(w, "observed", 0);
  }
  bf_jw_end(w);
}

static const char *stars(double p) {
  return p < 0 ? "   " : p < 0.001 ? "***" : p < 0.01 ? "** " : p < 0.05 ? "*  " : "   ";
}

/* Joins the two profiles on function id into rows sorted by change.
 * OUT: *rows_out (caller frees), *n_out. */
static int diff_rows(const bf_profile *pa, const bf_profile *pb, drow **rows_out, size_t *n_out) {
  bf_map3 idx = {0};
  drow *rows = calloc(pa->n + pb->n + 1, sizeof *rows);
  if (!rows) return -ENOMEM;
  size_t n = 0;
  for (size_t i = 0; i < pa->n; i++) {
    rows[n].a = &pa->rows[i];
    if (bf_map3_put(&idx, pa->rows[i].function_id, 0, 0, (int64_t)n)) {
      bf_map3_free(&idx);
      free(rows);
      return -ENOMEM;
    }
    n++;
  }
  for (size_t i = 0; i < pb->n; i++) {
    int64_t *hit = bf_map3_get(&idx, pb->rows[i].function_id, 0, 0);
    if (hit)
      rows[*hit].b = &pb->rows[i];
    else
      rows[n++].b = &pb->rows[i];
  }
  bf_map3_free(&idx);
  int tested = !pa->traced && !pb->traced;
  double na = (double)pa->total_samples, nb = (double)pb->total_samples;
  for (size_t i = 0; i < n; i++) {
    drow *r = &rows[i];
    r->sa = r->a ? r->a->self_share : 0;
    r->ta = r->a ? r->a->total_share : 0;
    r->sb = r->b ? r->b->self_share : 0;
    r->tb = r->b ? r->b->total_share : 0;
    if (tested)
      ztest(r->sa, na, r->sb, nb, &r->z, &r->p);
    else
      r->z = 0, r->p = -1;
    double ds = fabs(r->sb - r->sa), dt = fabs(r->tb - r->ta);
    r->key = ds * 1000 + dt; /* self change first, total breaks ties */
  }
  qsort(rows, n, sizeof *rows, cmp_drow);
  *rows_out = rows;
  *n_out = n;
  return 0;
}

/* What the two sides are, before the rows. */
typedef struct diff_head {
  const bf_session_info *ia, *ib;
  const bf_profile *pa, *pb;
  int incompatible, tested;
  const char *why;
} diff_head;

/* The head of the JSON object, up to the open "functions" array. */
static void diff_head_json(bf_jw *w, const bf_diff_opts *o, const diff_head *h) {
  FILE *f;
  bf_jw_obj(w);
  bf_jw_key(w, "a");
  if ((f = bf_jw_file(w))) bf_session_json(f, h->ia);
  bf_jw_key(w, "b");
  if ((f = bf_jw_file(w))) bf_session_json(f, h->ib);
  bf_jw_kbool(w, "comparable", !h->incompatible);
  bf_jw_kstr(w, "why", h->incompatible ? h->why : NULL);
  bf_jw_knum(w, "threshold_pp", o->threshold_pp);
  bf_jw_kstr(w, "test", h->tested ? "two-proportion z-test on self share, two-sided" : "none (traced figures are exact)");
  bf_jw_key(w, "functions");
  bf_jw_arr(w);
}

static void diff_head_text(FILE *out, const bf_diff_opts *o, const diff_head *h) {
  const char *dim = o->color ? "\033[2m" : "";
  const char *bo = o->color ? "\033[1m" : "", *rst = o->color ? "\033[0m" : "";
  char la[512], lb[512];
  bf_session_line(h->ia, 0, la, sizeof la);
  bf_session_line(h->ib, 0, lb, sizeof lb);
  bf_session_line_add_exe(h->ia, h->ib, la, sizeof la);
  bf_session_line_add_exe(h->ib, h->ia, lb, sizeof lb);
  int width = o->width > 40 ? o->width : 80;
  fprintf(out, "%sA%s ", bo, rst);
  bf_put_fit(out, la, width - 2);
  fprintf(out, "\n%sB%s ", bo, rst);
  bf_put_fit(out, lb, width - 2);
  fputc('\n', out);
  if (h->tested)
    fprintf(out, "A: %lld samples, B: %lld samples\n", (long long)h->pa->total_samples,
            (long long)h->pb->total_samples);
  else
    fprintf(out, "A: traced %.3f s, B: traced %.3f s (exact figures, no test)\n", (double)h->pa->total_ns / 1e9,
            (double)h->pb->total_ns / 1e9);
  if (h->incompatible) fprintf(out, "warning: not comparable: %s\n", h->why);
  fprintf(out, "%s SELF A  SELF B    Δ SELF               p   Δ TOTAL  FUNCTION%s\n", dim, rst);
}

static void diff_row_json(bf_jw *w, const drow *r) {
  const bf_func_row *f = r->b ? r->b : r->a;
  double ds = r->sb - r->sa, dt = r->tb - r->ta;
  bf_jw_obj(w);
  bf_jw_kstr(w, "qualname", f->qualname);
  bf_jw_kstr(w, "file", f->file);
  bf_jw_kint(w, "firstlineno", f->firstlineno);
  json_side(w, "a", r->a, r->sa, r->ta);
  json_side(w, "b", r->b, r->sb, r->tb);
  bf_jw_knum(w, "self_delta_pp", ds * 100);
  bf_jw_knum(w, "total_delta_pp", dt * 100);
  bf_jw_knum(w, "z", r->p < 0 ? NAN : r->z);
  bf_jw_knum(w, "p_value", r->p < 0 ? NAN : r->p);
  bf_jw_key(w, "significant");
  if (r->p < 0)
    bf_jw_null(w);
  else
    bf_jw_bool(w, r->p < 0.05);
  bf_jw_end(w);
}

/* A share cell: the percentage, "0.0%" when present but never seen, "—" when absent. */
static void share_cell(char *buf, size_t len, const bf_func_row *f, double share) {
  if (f && f->total_samples != 0)
    snprintf(buf, len, "%.1f%%", share * 100);
  else
    snprintf(buf, len, "%s", f ? "0.0%" : "—");
}

static void diff_row_text(FILE *out, const bf_diff_opts *o, const drow *r, double thr) {
  const bf_func_row *f = r->b ? r->b : r->a;
  double ds = r->sb - r->sa, dt = r->tb - r->ta;
  char ca[16], cb[16], pv[16];
  share_cell(ca, sizeof ca, r->a, r->sa);
  share_cell(cb, sizeof cb, r->b, r->sb);
  if (r->p < 0)
    snprintf(pv, sizeof pv, "exact");
  else if (r->p < 0.001)
    snprintf(pv, sizeof pv, "<0.001");
  else
    snprintf(pv, sizeof pv, "%.3f", r->p);
  const char *col = "", *rst = "";
  if (o->color && (r->p < 0 ? fabs(ds) >= thr : r->p < 0.05) && ds != 0) {
    col = ds > 0 ? "\033[31m" : "\033[34m";
    rst = "\033[0m";
  }
  int fw = (o->width > 40 ? o->width : 80) - 51;
  if (fw < 16) fw = 16;
  char loc[1024];
  bf_fit_func(loc, sizeof loc, f->qualname, f->file, f->firstlineno, fw);
  fprintf(out, "%7s %7s %s%+7.1fpp %s%s %7s %+7.1fpp  %s\n", ca, cb, col, ds * 100, stars(r->p), rst, pv,
          dt * 100, loc);
}

/* The rows past the threshold, up to the limit, then the footer. */
static void diff_body(FILE *out, bf_jw *w, const bf_diff_opts *o, const drow *rows, size_t n) {
  size_t limit = o->limit > 0 ? (size_t)o->limit : o->json ? n : 25, shown = 0, hidden = 0;
  double thr = o->threshold_pp / 100.0;
  for (size_t i = 0; i < n; i++) {
    const drow *r = &rows[i];
    double ds = r->sb - r->sa, dt = r->tb - r->ta;
    if ((fabs(ds) < thr && fabs(dt) < thr && !(thr == 0)) || shown >= limit) {
      hidden++;
      continue;
    }
    if (o->json)
      diff_row_json(w, r);
    else
      diff_row_text(out, o, r, thr);
    shown++;
  }
  if (o->json) {
    bf_jw_end(w);
    bf_jw_kint(w, "hidden", (long long)hidden);
    bf_jw_end(w);
    fputc('\n', out);
  } else {
    if (!shown) fprintf(out, "  no function changed by %.1f pp or more\n", o->threshold_pp);
    if (hidden)
      fprintf(out, "%zu more below %.1f pp or past %s\n", hidden, o->threshold_pp,
              o->limit_option ? o->limit_option : "the row limit");
    fputs("— = not observed; * p<0.05 ** p<0.01 *** p<0.001 (two-proportion z-test)\n", out);
  }
}

int bf_diff_functions(bf_store *s, int64_t a, int64_t b, const bf_diff_opts *o, FILE *out) {
  bf_diff_opts def = {0};
  if (!o) o = &def;
  bf_profile *pa = NULL, *pb = NULL;
  bf_session_info *ia = NULL, *ib = NULL;
  drow *rows = NULL;
  size_t n = 0;
  bf_err why = BF_ERR_INIT;
  int incompatible = bf_diff_compatible(s, a, b, &why);
  int rc = incompatible < 0 ? incompatible : 0;
  if (!rc) rc = bf_profile_functions(s, a, &o->filter_a, BF_SORT_SELF, &pa);
  if (!rc) rc = bf_profile_functions(s, b, &o->filter_b, BF_SORT_SELF, &pb);
  if (!rc) rc = bf_store_session_get(s, a, &ia);
  if (!rc) rc = bf_store_session_get(s, b, &ib);
  if (!rc) rc = diff_rows(pa, pb, &rows, &n);
  if (rc) goto out;
  diff_head h = {ia, ib, pa, pb, incompatible, !pa->traced && !pb->traced, why.msg};
  bf_jw jw;
  bf_jw_init(&jw, out);
  if (o->json)
    diff_head_json(&jw, o, &h);
  else
    diff_head_text(out, o, &h);
  diff_body(out, &jw, o, rows, n);
out:
  if (rc == -ENOMEM) bf_store_fail(s, rc, "out of memory");
  free(rows);
  bf_profile_free(pa);
  bf_profile_free(pb);
  bf_session_info_free(ia);
  bf_session_info_free(ib);
  return rc;
}

int bf_diff_flame(bf_store *s, int64_t a, int64_t b, const bf_diff_opts *o, FILE *out) {
  bf_diff_opts def = {0};
  if (!o) o = &def;
  bf_wstacks *wa = NULL, *wb = NULL;
  int rc = bf_wstacks_load(s, a, &o->filter_a, &wa);
  if (!rc) rc = bf_wstacks_load(s, b, &o->filter_b, &wb);
  if (!rc) {
    char title[160], la[512], lb[512], sub[1100];
    snprintf(title, sizeof title, "bifocal differential flame graph — session %lld → %lld", (long long)a,
             (long long)b);
    bf_session_line(wa->info, 0, la, sizeof la);
    bf_session_line(wb->info, 0, lb, sizeof lb);
    bf_session_line_add_exe(wa->info, wb->info, la, sizeof la);
    bf_session_line_add_exe(wb->info, wa->info, lb, sizeof lb);
    snprintf(sub, sizeof sub, "widths: B (%s); red = share grew since A (%s), blue = shrank", lb, la);
    rc = bf_flame_write(s, wb, wa, title, sub, out);
  }
  bf_wstacks_free(wa);
  bf_wstacks_free(wb);
  return rc;
}
