/* view_memory.c — the far lens's memory views (sessions recorded with
 * record --memory): growth, shrink and net resident bytes per function
 * (self and total) with 95% intervals, a flame graph weighted by bytes of
 * growth, and the resident-memory timeline. All read bf_store_memory_*. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "exports.h"
#include "ident.h"
#include "jsonw.h"
#include "map.h"
#include "profile.h"
#include "query.h"
#include "session_json.h"
#include "store_int.h"
#include "vec.h"
#include "views.h"
#include "views_int.h"

/* One (thread, stack) of memory rows: resident and anonymous growth and
 * shrink (bytes, both >= 0), and how many rows grew. */
typedef struct magg {
  int64_t thread_id, stack_id;
  double g, sh, ag, ash;
  int64_t ng;
} magg;

typedef struct mload {
  magg *v;
  size_t n, cap;
  bf_map3 idx;     /* (stack, thread) → index in v */
  double g, sh, ag, ash, g2; /* totals; g2 = sum of squared growths (for the interval) */
  int64_t rows, ng;
  int anon;        /* rank by anonymous instead of resident bytes */
} mload;

static int mload_row(void *ud, const bf_memory_sample *m) {
  mload *l = ud;
  int64_t *k = bf_map3_get(&l->idx, m->stack_id, m->thread_id, 0);
  if (!k) {
    if (bf_vec_grow((void **)&l->v, &l->cap, l->n + 1, sizeof *l->v, 256)) return -ENOMEM;
    if (bf_map3_put(&l->idx, m->stack_id, m->thread_id, 0, (int64_t)l->n)) return -ENOMEM;
    l->v[l->n] = (magg){.thread_id = m->thread_id, .stack_id = m->stack_id};
    k = bf_map3_get(&l->idx, m->stack_id, m->thread_id, 0);
    l->n++;
  }
  magg *a = &l->v[*k];
  double r = (double)m->rss_delta, an = (double)m->anon_delta;
  if (r > 0) a->g += r, l->g += r;
  else a->sh -= r, l->sh -= r;
  if (an > 0) a->ag += an, l->ag += an;
  else a->ash -= an, l->ash -= an;
  double grow = l->anon ? an : r;
  if (grow > 0) {
    a->ng++;
    l->ng++;
    l->g2 += grow * grow;
  }
  l->rows++;
  return 0;
}

static int mload_run(bf_store *s, int64_t sid, const bf_sample_filter *f, int anon, mload *l) {
  memset(l, 0, sizeof *l);
  l->anon = anon;
  int rc = bf_store_memory_foreach(s, sid, f, mload_row, l);
  if (rc == -ENOMEM) bf_store_fail(s, rc, "out of memory");
  return rc;
}

static void mload_free(mload *l) {
  free(l->v);
  bf_map3_free(&l->idx);
}

/* -ENODATA with a message when the session has no memory rows at all. */
static int need_memory(bf_store *s, int64_t sid) {
  int64_t rows = 0, pts = 0;
  int rc = bf_store_memory_count(s, sid, &rows, &pts);
  if (rc) return rc;
  if (rows || pts) return 0;
  return bf_store_fail(s, -ENODATA,
                       "session %lld has no memory samples: record it with `bifocal record --memory` "
                       "(the memory views read only such sessions)",
                       (long long)sid);
}

/* ---- memory as weighted stacks (flame graph, exports) ---------------------- */

static int push_frames(bf_store *s, bf_wstacks *w, int64_t stack_id, size_t *off, uint32_t *depth) {
  int64_t *frames = NULL;
  size_t nf = 0;
  int rc = bf_store_stack_frames(s, stack_id, &frames, &nf);
  if (rc) return rc;
  size_t cap = w->fcap;
  if (bf_vec_grow((void **)&w->fids, &cap, w->nf + nf, sizeof *w->fids, 4096) ||
      bf_vec_grow((void **)&w->lines, &w->fcap, w->nf + nf, sizeof *w->lines, 4096)) {
    free(frames);
    return bf_store_fail(s, -ENOMEM, "out of memory");
  }
  for (size_t j = 0; j < nf && !rc; j++) rc = bf_store_frame_get(s, frames[j], &w->fids[w->nf + j], &w->lines[w->nf + j]);
  free(frames);
  if (rc) return rc;
  *off = w->nf;
  *depth = (uint32_t)nf;
  w->nf += nf;
  return 0;
}

static int wthreads_fill(bf_store *s, int64_t sid, bf_wstacks *w) {
  bf_thread_ref *th = NULL;
  size_t nth = 0;
  int rc = bf_store_threads(s, sid, &th, &nth);
  if (rc) return rc;
  w->threads = calloc(nth ? nth : 1, sizeof *w->threads);
  if (!w->threads) {
    bf_thread_refs_free(th, nth);
    return bf_store_fail(s, -ENOMEM, "out of memory");
  }
  for (size_t i = 0; i < nth; i++) {
    w->threads[i] = (bf_wthread){.id = th[i].id, .native_tid = th[i].native_tid, .name = th[i].name};
    th[i].name = NULL;
  }
  w->nthreads = nth;
  bf_thread_refs_free(th, nth);
  return 0;
}

int bf_wstacks_load_memory(bf_store *s, int64_t session_id, const bf_sample_filter *f, int anon,
                           bf_wstacks **out) {
  *out = NULL;
  mload l;
  bf_wstacks *w = calloc(1, sizeof *w);
  if (!w) return bf_store_fail(s, -ENOMEM, "out of memory");
  w->by_weight = 1;
  w->unit = "bytes";
  int rc = bf_store_session_get(s, session_id, &w->info);
  if (!rc) rc = need_memory(s, session_id);
  if (!rc) rc = wthreads_fill(s, session_id, w);
  if (!rc) rc = mload_run(s, session_id, f, anon, &l);
  else memset(&l, 0, sizeof l);
  for (size_t k = 0; !rc && k < l.n; k++) {
    const magg *a = &l.v[k];
    double grow = anon ? a->ag : a->g;
    int32_t ti = -1;
    for (size_t i = 0; i < w->nthreads; i++)
      if (w->threads[i].id == a->thread_id) ti = (int32_t)i;
    w->total_count += a->ng;
    w->total_weight += grow;
    if (grow <= 0) continue;
    if (ti < 0 || a->stack_id == 0) { /* no Python frame known: counted, in no row */
      w->empty_count += a->ng;
      w->empty_weight += grow;
      if (ti >= 0) w->threads[ti].empty_count += a->ng, w->threads[ti].empty_weight += grow;
      continue;
    }
    w->threads[ti].count += a->ng;
    w->threads[ti].weight += grow;
    if (bf_vec_grow((void **)&w->v, &w->cap, w->n + 1, sizeof *w->v, 256)) {
      rc = bf_store_fail(s, -ENOMEM, "out of memory");
      break;
    }
    bf_wstack *st = &w->v[w->n];
    *st = (bf_wstack){.thread = ti, .count = a->ng, .weight = grow, .stack_id = a->stack_id};
    if ((rc = push_frames(s, w, a->stack_id, &st->off, &st->depth))) break;
    w->n++;
  }
  mload_free(&l);
  if (rc) {
    bf_wstacks_free(w);
    return rc;
  }
  *out = w;
  return 0;
}

int bf_view_memory_flame(bf_store *s, int64_t session_id, const bf_view_opts *o, FILE *out) {
  bf_wstacks *w = NULL;
  int rc = bf_wstacks_load_memory(s, session_id, o ? &o->filter : NULL, 0, &w);
  if (rc) return rc;
  char title[128], sub[1024];
  snprintf(title, sizeof title, "bifocal memory flame graph (resident growth) — session %lld", (long long)session_id);
  bf_session_line(w->info, 1, sub, sizeof sub);
  size_t n = strlen(sub);
  snprintf(sub + n, sizeof sub - n, " · %.0f bytes of resident growth in %lld changes", w->total_weight,
           (long long)w->total_count);
  rc = bf_flame_write(s, w, NULL, title, sub, out);
  bf_wstacks_free(w);
  return rc;
}

static void put_sanitized(FILE *out, const char *str) {
  for (; *str; str++) fputc(*str == ';' ? ':' : (*str == '\n' || *str == '\r') ? ' ' : *str, out);
}

/* Collapsed stacks weighted by bytes of resident growth (FlameGraph input;
 * frames as bf_export_collapsed writes them, threads merged per line). */
int bf_export_memory_collapsed(bf_store *s, int64_t session_id, const bf_sample_filter *f, FILE *out) {
  bf_wstacks *w = NULL;
  int rc = bf_wstacks_load_memory(s, session_id, f, 0, &w);
  if (rc) return rc;
  if (w->empty_weight >= 0.5) fprintf(out, "%s %.0f\n", BF_NO_PYTHON_FRAME, w->empty_weight);
  for (size_t i = 0; i < w->n && !rc; i++) {
    const bf_wstack *st = &w->v[i];
    for (uint32_t d = 0; d < st->depth && !rc; d++) {
      bf_function_ref fr;
      int64_t line = w->lines[st->off + d];
      if ((rc = bf_store_function_get(s, w->fids[st->off + d], &fr))) break;
      if (d) fputc(';', out);
      put_sanitized(out, fr.qualname);
      if (bf_ident_is_unknown(fr.file, fr.firstlineno) && line == 0) continue;
      fputs(" (", out);
      put_sanitized(out, fr.file);
      fprintf(out, ":%lld:%lld)", (long long)fr.firstlineno, (long long)line);
    }
    if (!rc) fprintf(out, " %.0f\n", st->weight);
  }
  bf_wstacks_free(w);
  return rc;
}

/* ---- functions --memory ------------------------------------------------------ */

/* Per function: resident growth/shrink as the innermost frame (self) and
 * anywhere on the stack (total, once per stack), anonymous likewise. */
typedef struct mfn {
  int64_t fid;
  double g[2], sh[2], ag[2], ash[2]; /* [0] self, [1] total */
  int64_t ng[2];
} mfn;

typedef struct mtable {
  mfn *v;
  size_t n, cap;
  bf_map3 idx;
  int sort_total;
} mtable;

static mfn *mfn_get(mtable *t, int64_t fid) {
  int64_t *k = bf_map3_get(&t->idx, fid, 0, 0);
  if (k) return &t->v[*k];
  if (bf_vec_grow((void **)&t->v, &t->cap, t->n + 1, sizeof *t->v, 64)) return NULL;
  if (bf_map3_put(&t->idx, fid, 0, 0, (int64_t)t->n)) return NULL;
  t->v[t->n] = (mfn){.fid = fid};
  return &t->v[t->n++];
}

static void mfn_add(mfn *f, int k, const magg *a) {
  f->g[k] += a->g;
  f->sh[k] += a->sh;
  f->ag[k] += a->ag;
  f->ash[k] += a->ash;
  f->ng[k] += a->ng;
}

static int mtable_build(bf_store *s, const mload *l, mtable *t) {
  int64_t *fids = NULL;
  size_t fcap = 0;
  int rc = 0;
  for (size_t i = 0; i < l->n && !rc; i++) {
    const magg *a = &l->v[i];
    if (!a->stack_id) continue;
    int64_t *frames = NULL;
    size_t nf = 0;
    if ((rc = bf_store_stack_frames(s, a->stack_id, &frames, &nf))) break;
    if (bf_vec_grow((void **)&fids, &fcap, nf + 1, sizeof *fids, 64)) rc = -ENOMEM;
    for (size_t j = 0; j < nf && !rc; j++) {
      int64_t line;
      rc = bf_store_frame_get(s, frames[j], &fids[j], &line);
    }
    free(frames);
    for (size_t j = 0; j < nf && !rc; j++) {
      int dup = 0; /* recursion: a function counts once per stack in total */
      for (size_t k = 0; k < j && !dup; k++) dup = fids[k] == fids[j];
      mfn *f = dup ? NULL : mfn_get(t, fids[j]);
      if (!dup && !f) rc = -ENOMEM;
      if (f) mfn_add(f, 1, a);
    }
    if (!rc && nf) {
      mfn *f = mfn_get(t, fids[nf - 1]);
      if (!f) rc = -ENOMEM;
      else mfn_add(f, 0, a);
    }
  }
  free(fids);
  if (rc == -ENOMEM) bf_store_fail(s, rc, "out of memory");
  return rc;
}

static int cmp_self(const void *a, const void *b) {
  const mfn *x = a, *y = b;
  return x->g[0] < y->g[0] ? 1 : x->g[0] > y->g[0] ? -1 : x->g[1] < y->g[1] ? 1 : x->g[1] > y->g[1] ? -1 : 0;
}
static int cmp_total(const void *a, const void *b) {
  const mfn *x = a, *y = b;
  return x->g[1] < y->g[1] ? 1 : x->g[1] > y->g[1] ? -1 : x->g[0] < y->g[0] ? 1 : x->g[0] > y->g[0] ? -1 : 0;
}

/* Share of all growth and its 95% interval: Wilson on the effective number
 * of growth changes (Kish: (sum w)^2 / sum w^2), as the changes differ in size. */
static void growth_share(const mload *l, double g, double *share, double *lo, double *hi) {
  double n_eff = l->g2 > 0 ? l->g * l->g / l->g2 : 0;
  double p = l->g > 0 ? g / l->g : 0;
  *share = p;
  if (n_eff > 0) bf_wilson(p * n_eff, n_eff, lo, hi);
  else *lo = *hi = 0;
}

static void fmt_bytes(char *buf, size_t len, double v) {
  double a = fabs(v);
  if (a >= 1073741824.0) snprintf(buf, len, "%.2f GiB", v / 1073741824.0);
  else if (a >= 1048576.0) snprintf(buf, len, "%.1f MiB", v / 1048576.0);
  else if (a >= 1024.0) snprintf(buf, len, "%.1f KiB", v / 1024.0);
  else snprintf(buf, len, "%.0f B", v);
}

/* A byte total as a whole number (the sums are whole; %.0f as ever). */
static void jw_kbytes(bf_jw *w, const char *key, double v) {
  char buf[48];
  snprintf(buf, sizeof buf, "%.0f", v);
  bf_jw_key(w, key);
  bf_jw_raw(w, buf);
}

/* "session": the session's metadata object. */
static void jw_session(bf_jw *w, const bf_session_info *in) {
  bf_jw_key(w, "session");
  FILE *f = bf_jw_file(w);
  if (f) bf_session_json(f, in);
}

static void json_fn(bf_store *s, const mload *l, const mfn *f, bf_jw *w) {
  bf_function_ref fr = {0};
  bf_store_function_get(s, f->fid, &fr);
  bf_jw_obj(w);
  bf_jw_kstr(w, "qualname", fr.qualname ? fr.qualname : "?");
  bf_jw_kstr(w, "file", fr.file ? fr.file : "?");
  bf_jw_kint(w, "firstlineno", (long long)fr.firstlineno);
  static const char *const part[2] = {"self", "total"};
  for (int k = 0; k < 2; k++) {
    double sh, lo, hi;
    growth_share(l, f->g[k], &sh, &lo, &hi);
    bf_jw_key(w, part[k]);
    bf_jw_obj(w);
    jw_kbytes(w, "growth_bytes", f->g[k]);
    jw_kbytes(w, "shrink_bytes", f->sh[k]);
    jw_kbytes(w, "net_bytes", f->g[k] - f->sh[k]);
    bf_jw_kint(w, "growth_changes", (long long)f->ng[k]);
    bf_jw_knum(w, "growth_share", sh);
    bf_jw_key(w, "growth_ci95");
    bf_jw_arr(w);
    bf_jw_num(w, lo);
    bf_jw_num(w, hi);
    bf_jw_end(w);
    jw_kbytes(w, "anon_growth_bytes", f->ag[k]);
    jw_kbytes(w, "anon_shrink_bytes", f->ash[k]);
    bf_jw_end(w);
  }
  bf_jw_end(w);
}

static void write_json(bf_store *s, const bf_session_info *in, const mload *l, const mtable *t, size_t limit,
                       FILE *out) {
  bf_jw w;
  bf_jw_init(&w, out);
  bf_jw_obj(&w);
  jw_session(&w, in);
  bf_jw_key(&w, "memory");
  bf_jw_obj(&w);
  bf_jw_kstr(&w, "source", "statm");
  bf_jw_kint(&w, "changes", (long long)l->rows);
  bf_jw_kint(&w, "growth_changes", (long long)l->ng);
  jw_kbytes(&w, "growth_bytes", l->g);
  jw_kbytes(&w, "shrink_bytes", l->sh);
  jw_kbytes(&w, "net_bytes", l->g - l->sh);
  jw_kbytes(&w, "anon_growth_bytes", l->ag);
  jw_kbytes(&w, "anon_shrink_bytes", l->ash);
  bf_jw_knum(&w, "effective_changes", l->g2 > 0 ? l->g * l->g / l->g2 : 0);
  bf_jw_end(&w);
  bf_jw_key(&w, "functions");
  bf_jw_arr(&w);
  for (size_t i = 0; i < t->n && i < limit; i++) json_fn(s, l, &t->v[i], &w);
  bf_jw_end(&w);
  bf_jw_kint(&w, "more", (long long)(t->n > limit ? t->n - limit : 0));
  bf_jw_end(&w);
  fputc('\n', out);
}

static void write_text(bf_store *s, const bf_session_info *in, const mload *l, const mtable *t, size_t limit,
                       const bf_view_opts *o, FILE *out) {
  int width = o && o->width > 0 ? o->width : 80;
  bf_put_title(out, "memory", in, width, o && o->color);
  fputc('\n', out);
  char g[32], sh[32], net[32], ag[32], ash[32];
  fmt_bytes(g, sizeof g, l->g);
  fmt_bytes(sh, sizeof sh, l->sh);
  fmt_bytes(net, sizeof net, l->g - l->sh);
  fmt_bytes(ag, sizeof ag, l->ag);
  fmt_bytes(ash, sizeof ash, l->ash);
  fprintf(out, "resident: grew %s in %lld changes, shrank %s, net %s (anonymous: grew %s, shrank %s)\n", g,
          (long long)l->ng, sh, net, ag, ash);
  if (!l->ng) {
    fputs("no resident growth observed in this session or window\n", out);
    return;
  }
  fputs(" GROWTH  95% CI          SELF GROW  SHRINK     NET        TOTAL  TOTAL GROW  FUNCTION\n", out);
  int fw = width - 84;
  if (fw < 24) fw = 24;
  for (size_t i = 0; i < t->n && i < limit; i++) {
    const mfn *f = &t->v[i];
    double sp, lo, hi, tp, tlo, thi;
    growth_share(l, f->g[0], &sp, &lo, &hi);
    growth_share(l, f->g[1], &tp, &tlo, &thi);
    char sg[32], ss[32], sn[32], tg[32], ci[32], name[1200];
    fmt_bytes(sg, sizeof sg, f->g[0]);
    fmt_bytes(ss, sizeof ss, f->sh[0]);
    fmt_bytes(sn, sizeof sn, f->g[0] - f->sh[0]);
    fmt_bytes(tg, sizeof tg, f->g[1]);
    snprintf(ci, sizeof ci, "[%.1f-%.1f]", lo * 100, hi * 100);
    bf_function_ref fr = {0};
    bf_store_function_get(s, f->fid, &fr);
    bf_fit_func(name, sizeof name, fr.qualname ? fr.qualname : "?", fr.file ? fr.file : "?", fr.firstlineno, fw);
    fprintf(out, "%6.1f%%  %-14s  %-10s %-10s %-10s %5.1f%%  %-10s  %s\n", sp * 100, ci, sg, ss, sn, tp * 100,
            tg, name);
  }
  if (t->n > limit) {
    fprintf(out, "… %zu more", t->n - limit);
    if (o && o->limit_option) fprintf(out, " (%s N)", o->limit_option);
    fputc('\n', out);
  }
  fputs("growth = resident bytes gained between two samples, charged to the stack that ran (the GIL holder);\n"
        "a shrink is never counted as growth. Resident size lags allocation: see docs/memory.md\n", out);
}

int bf_view_memory_functions(bf_store *s, int64_t session_id, const bf_view_opts *o, FILE *out) {
  bf_session_info *in = NULL;
  mload l;
  memset(&l, 0, sizeof l);
  mtable t = {0};
  int rc = bf_store_session_get(s, session_id, &in);
  if (!rc) rc = need_memory(s, session_id);
  if (!rc) rc = mload_run(s, session_id, o ? &o->filter : NULL, 0, &l);
  if (!rc) rc = mtable_build(s, &l, &t);
  if (!rc) {
    qsort(t.v, t.n, sizeof *t.v, o && o->sort == BF_SORT_TOTAL ? cmp_total : cmp_self);
    size_t limit = !o || o->limit == 0 ? 25 : o->limit < 0 ? t.n : (size_t)o->limit;
    if (o && o->json) write_json(s, in, &l, &t, limit, out);
    else write_text(s, in, &l, &t, limit, o, out);
  }
  mload_free(&l);
  free(t.v);
  bf_map3_free(&t.idx);
  bf_session_info_free(in);
  return rc;
}

/* ---- the resident-memory timeline (heatmap --memory) -------------------------- */

typedef struct mtl {
  bf_memory_point *v;
  size_t n, cap;
} mtl;

static int mtl_add(void *ud, const bf_memory_point *p) {
  mtl *t = ud;
  if (bf_vec_grow((void **)&t->v, &t->cap, t->n + 1, sizeof *t->v, 256)) return -ENOMEM;
  t->v[t->n++] = *p;
  return 0;
}

static void timeline_json(const bf_session_info *in, const mtl *t, const double *rss, const double *anon,
                          const double *py, int nb, double bucket_ns, FILE *out) {
  bf_jw w;
  bf_jw_init(&w, out);
  bf_jw_obj(&w);
  jw_session(&w, in);
  bf_jw_key(&w, "memory_timeline");
  bf_jw_obj(&w);
  bf_jw_kint(&w, "points", (long long)t->n);
  jw_kbytes(&w, "bucket_ns", bucket_ns);
  bf_jw_key(&w, "buckets");
  bf_jw_arr(&w);
  for (int b = 0; b < nb; b++) {
    bf_jw_obj(&w);
    jw_kbytes(&w, "start_ns", b * bucket_ns);
    jw_kbytes(&w, "rss_bytes", rss[b]);
    jw_kbytes(&w, "anon_bytes", anon[b]);
    /* pymalloc's pools in use; -1 where it was not read */
    jw_kbytes(&w, "python_pool_bytes", py[b]);
    bf_jw_end(&w);
  }
  bf_jw_end(&w);
  bf_jw_end(&w);
  bf_jw_end(&w);
  fputc('\n', out);
}

static void timeline_text(const bf_session_info *in, const double *rss, const double *anon, const double *py,
                          int nb, double bucket_ns, const bf_view_opts *o, FILE *out) {
  int width = o && o->width > 0 ? o->width : 80;
  bf_put_title(out, "resident memory over time", in, width, o && o->color);
  fputc('\n', out);
  double lo = rss[0], hi = rss[0];
  for (int b = 0; b < nb; b++) {
    if (rss[b] < lo) lo = rss[b];
    if (rss[b] > hi) hi = rss[b];
  }
  int with_py = 0; /* pymalloc's pools in use, where they were read */
  for (int b = 0; b < nb; b++)
    if (py[b] >= 0) with_py = 1;
  int bar = width - 40 - (with_py ? 12 : 0);
  if (bar < 10) bar = 10;
  fputs(with_py ? "      TIME  RESIDENT    ANONYMOUS   PY POOLS\n" : "      TIME  RESIDENT    ANONYMOUS\n", out);
  for (int b = 0; b < nb; b++) {
    char r[32], a[32], q[32] = "-";
    fmt_bytes(r, sizeof r, rss[b]);
    fmt_bytes(a, sizeof a, anon[b]);
    if (py[b] >= 0) fmt_bytes(q, sizeof q, py[b]);
    int len = hi > lo ? (int)((rss[b] - lo) / (hi - lo) * bar + 0.5) : 0;
    fprintf(out, "%9.2fs  %-10s  %-10s ", b * bucket_ns / 1e9, r, a);
    if (with_py) fprintf(out, "%-10s  ", q);
    for (int k = 0; k < len; k++) fputs("█", out);
    fputc('\n', out);
  }
}

int bf_view_memory_timeline(bf_store *s, int64_t session_id, const bf_view_opts *o, FILE *out) {
  bf_session_info *in = NULL;
  mtl t = {0};
  double *rss = NULL, *anon = NULL, *py = NULL;
  int rc = bf_store_session_get(s, session_id, &in);
  if (!rc) rc = need_memory(s, session_id);
  if (!rc) rc = bf_store_memory_timeline_foreach(s, session_id, mtl_add, &t);
  if (rc == -ENOMEM) bf_store_fail(s, rc, "out of memory");
  if (!rc && !t.n) rc = bf_store_fail(s, -ENODATA, "session %lld has no memory timeline", (long long)session_id);
  int nb = o && o->buckets > 0 ? o->buckets : 20;
  if (!rc && (size_t)nb > t.n) nb = (int)t.n;
  if (!rc && (!(rss = calloc((size_t)nb, sizeof *rss)) || !(anon = calloc((size_t)nb, sizeof *anon)) ||
              !(py = calloc((size_t)nb, sizeof *py))))
    rc = bf_store_fail(s, -ENOMEM, "out of memory");
  if (!rc) {
    double end = (double)t.v[t.n - 1].ts_ns + 1, bucket_ns = end / nb;
    /* each bucket shows the last point in it (memory at its end), else the previous bucket's */
    size_t k = 0;
    for (int b = 0; b < nb; b++) {
      while (k < t.n && (double)t.v[k].ts_ns < (b + 1) * bucket_ns) k++;
      const bf_memory_point *p = &t.v[k ? k - 1 : 0];
      rss[b] = (double)p->rss_bytes;
      anon[b] = (double)p->anon_bytes;
      py[b] = (double)p->py_bytes;
    }
    if (o && o->json) timeline_json(in, &t, rss, anon, py, nb, bucket_ns, out);
    else timeline_text(in, rss, anon, py, nb, bucket_ns, o, out);
  }
  free(rss);
  free(anon);
  free(py);
  free(t.v);
  bf_session_info_free(in);
  return rc;
}
