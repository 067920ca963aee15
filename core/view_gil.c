/* view_gil.c — who holds the GIL: per thread, the share of samples holding
 * it, waiting for it (neither holding it nor idle), on CPU and idle, and the
 * functions that were running (leaf frame) while their thread held it. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "jsonw.h"
#include "query.h"
#include "session_json.h"
#include "store_int.h"
#include "views.h"
#include "views_int.h"
#include "vec.h"

typedef struct tstat {
  int64_t thread_id;
  int64_t samples, gil, waiting, on_cpu, idle, gc;
} tstat;

typedef struct gil {
  bf_store *s;
  tstat *t, *last;
  size_t nt;
  uint32_t any_flags;
  bf_map3 leaf;   /* stack id → leaf function id */
  bf_map3 byfn;   /* function id → index in fn */
  int64_t (*fn)[2]; /* function id, samples holding the GIL */
  size_t nfn, fcap;
  int64_t gil_total;
} gil;

static int gil_sample(void *ud, const bf_sample *smp) {
  gil *g = ud;
  tstat *t = g->last; /* samples come thread by thread */
  if (!t || t->thread_id != smp->thread_id) {
    t = NULL;
    for (size_t i = 0; i < g->nt && !t; i++)
      if (g->t[i].thread_id == smp->thread_id) t = &g->t[i];
    if (!t) return 0;
    g->last = t;
  }
  int64_t c = smp->count ? smp->count : 1;
  uint32_t fl = smp->flags;
  g->any_flags |= fl;
  t->samples += c;
  if (fl & BF_SAMPLE_GIL) t->gil += c;
  if (!(fl & BF_SAMPLE_GIL) && !(fl & BF_SAMPLE_IDLE)) t->waiting += c;
  if (fl & BF_SAMPLE_ON_CPU) t->on_cpu += c;
  if (fl & BF_SAMPLE_IDLE) t->idle += c;
  if (fl & BF_SAMPLE_GC) t->gc += c;
  if (!(fl & BF_SAMPLE_GIL) || smp->stack_id <= 0) return 0;
  g->gil_total += c;
  int64_t *hit = bf_map3_get(&g->leaf, smp->stack_id, 0, 0), fid;
  if (hit) {
    fid = *hit;
  } else {
    int64_t parent, frame, line;
    int rc = bf_store_stack_get(g->s, smp->stack_id, &parent, &frame);
    if (!rc) rc = bf_store_frame_get(g->s, frame, &fid, &line);
    if (rc) return rc;
    if (bf_map3_put(&g->leaf, smp->stack_id, 0, 0, fid)) return -ENOMEM;
  }
  int64_t *fi = bf_map3_get(&g->byfn, fid, 0, 0);
  if (!fi) {
    if (bf_vec_grow((void **)&g->fn, &g->fcap, g->nfn + 1, sizeof *g->fn, 64)) return -ENOMEM;
    g->fn[g->nfn][0] = fid;
    g->fn[g->nfn][1] = 0;
    if (bf_map3_put(&g->byfn, fid, 0, 0, (int64_t)g->nfn)) return -ENOMEM;
    fi = bf_map3_get(&g->byfn, fid, 0, 0);
    g->nfn++;
  }
  g->fn[*fi][1] += c;
  return 0;
}

static int cmp_fn(const void *a, const void *b) {
  const int64_t *x = a, *y = b;
  return x[1] < y[1] ? 1 : x[1] > y[1] ? -1 : (x[0] > y[0]) - (x[0] < y[0]);
}

static double pc(int64_t k, int64_t n) { return n > 0 ? 100.0 * (double)k / (double)n : 0; }

static void json_tstat(bf_jw *w, const tstat *t) {
  double n = (double)t->samples;
  bf_jw_kint(w, "samples", t->samples);
  bf_jw_knum(w, "gil", t->samples ? (double)t->gil / n : 0);
  bf_jw_knum(w, "waiting", t->samples ? (double)t->waiting / n : 0);
  bf_jw_knum(w, "on_cpu", t->samples ? (double)t->on_cpu / n : 0);
  bf_jw_knum(w, "idle", t->samples ? (double)t->idle / n : 0);
  bf_jw_knum(w, "gc", t->samples ? (double)t->gc / n : 0);
}

/* The view as JSON. th: the session's threads (g->t is parallel to it). */
static int gil_json(gil *g, const bf_thread_ref *th, const tstat *all, size_t top, const bf_session_info *info,
                    FILE *out) {
  int rc = 0;
  bf_jw w;
  bf_jw_init(&w, out);
  bf_jw_obj(&w);
  bf_jw_key(&w, "session");
  FILE *f = bf_jw_file(&w);
  if (f) bf_session_json(f, info);
  bf_jw_key(&w, "definitions");
  bf_jw_obj(&w);
  bf_jw_kstr(&w, "gil", "thread held the GIL");
  bf_jw_kstr(&w, "waiting", "neither holding the GIL nor idle");
  bf_jw_kstr(&w, "on_cpu", "running on a CPU");
  bf_jw_kstr(&w, "idle", "blocked, sleeping or waiting on I/O");
  bf_jw_end(&w);
  bf_jw_key(&w, "threads");
  bf_jw_arr(&w);
  for (size_t i = 0; i < g->nt; i++) {
    if (!g->t[i].samples) continue;
    bf_jw_obj(&w);
    bf_jw_kint(&w, "native_tid", th[i].native_tid);
    bf_jw_kstr(&w, "name", th[i].name);
    json_tstat(&w, &g->t[i]);
    bf_jw_end(&w);
  }
  bf_jw_end(&w);
  bf_jw_key(&w, "all");
  bf_jw_obj(&w);
  bf_jw_kstr(&w, "name", "all threads");
  json_tstat(&w, all);
  bf_jw_end(&w);
  bf_jw_kint(&w, "gil_samples", g->gil_total);
  bf_jw_key(&w, "gil_holders");
  bf_jw_arr(&w);
  for (size_t i = 0; i < top; i++) {
    bf_function_ref ref;
    if ((rc = bf_store_function_get(g->s, g->fn[i][0], &ref))) return rc;
    bf_jw_obj(&w);
    bf_jw_kstr(&w, "qualname", ref.qualname);
    bf_jw_kstr(&w, "file", ref.file);
    bf_jw_kint(&w, "firstlineno", ref.firstlineno);
    bf_jw_kint(&w, "samples", g->fn[i][1]);
    bf_jw_knum(&w, "share", g->gil_total ? (double)g->fn[i][1] / (double)g->gil_total : 0);
    bf_jw_end(&w);
  }
  bf_jw_end(&w);
  bf_jw_end(&w);
  fputc('\n', out);
  return rc;
}

/* The view as a table for the terminal. */
static int gil_text(gil *g, const bf_thread_ref *th, const tstat *all, size_t top, const bf_session_info *info,
                    const bf_view_opts *o, FILE *out) {
  int rc = 0;
  const char *b = o->color ? "\033[1m" : "", *dim = o->color ? "\033[2m" : "", *rst = o->color ? "\033[0m" : "";
  bf_put_title(out, "GIL", info, o->width > 40 ? o->width : 80, o->color);
  fprintf(out, "\n%s%lld samples%s\n", dim, (long long)all->samples, rst);
  fprintf(out, "%s%-26s %8s %6s %8s %7s %6s %5s%s\n", dim, "THREAD", "SAMPLES", "GIL", "WAITING", "ON CPU", "IDLE",
          "GC", rst);
  for (size_t i = 0; i <= g->nt; i++) {
    const tstat *t = i < g->nt ? &g->t[i] : all;
    if (i < g->nt && !t->samples) continue;
    char lb[256];
    if (i < g->nt) {
      bf_wthread lt = {.id = th[i].id, .native_tid = th[i].native_tid, .name = th[i].name};
      bf_wthread_label(&lt, lb, sizeof lb);
    } else {
      snprintf(lb, sizeof lb, "all threads");
    }
    fprintf(out, "%s%-26.26s %8lld %5.1f%% %7.1f%% %6.1f%% %5.1f%% %4.1f%%%s\n", i == g->nt ? b : "", lb,
            (long long)t->samples, pc(t->gil, t->samples), pc(t->waiting, t->samples), pc(t->on_cpu, t->samples),
            pc(t->idle, t->samples), pc(t->gc, t->samples), i == g->nt ? rst : "");
  }
  fprintf(out, "%swaiting = neither holding the GIL nor idle; %s%s\n", dim,
          bf_q_clock_of(info) == BF_Q_CPU ? "cpu clock: idle threads are not sampled"
                                                         : "shares of each thread's samples",
          rst);
  fprintf(out, "\n%sFunctions holding the GIL most%s (leaf frame, %lld GIL samples)\n", b, rst,
          (long long)g->gil_total);
  for (size_t i = 0; i < top; i++) {
    bf_function_ref ref;
    if ((rc = bf_store_function_get(g->s, g->fn[i][0], &ref))) return rc;
    double lo, hi;
    bf_wilson((double)g->fn[i][1], (double)g->gil_total, &lo, &hi);
    char ci[32];
    snprintf(ci, sizeof ci, "[%.1f-%.1f]", lo * 100, hi * 100);
    char loc[1024];
    bf_fit_func(loc, sizeof loc, ref.qualname, ref.file, ref.firstlineno, (o->width > 40 ? o->width : 80) - 32);
    fprintf(out, "%5.1f%% %-13s %8lld  %s\n", pc(g->fn[i][1], g->gil_total), ci, (long long)g->fn[i][1], loc);
  }
  if (!top) fputs("  (no sample held the GIL)\n", out);
  return rc;
}

int bf_view_gil(bf_store *s, int64_t session_id, const bf_view_opts *o, FILE *out) {
  bf_view_opts def = {0};
  if (!o) o = &def;
  bf_session_info *info = NULL;
  int rc = bf_store_session_get(s, session_id, &info);
  if (rc) return rc;
  gil g = {.s = s};
  bf_thread_ref *th = NULL;
  size_t nth = 0;
  if ((bf_q_kind_of(info) == BF_Q_TRACED)) {
    rc = bf_store_fail(s, -ENODATA,
                       "session %lld is traced: the GIL view needs a sampled session", /* remedy: repl/cli_hints.c */
                       (long long)session_id);
    goto out;
  }
  if ((rc = bf_store_threads(s, session_id, &th, &nth))) goto out;
  g.t = calloc(nth ? nth : 1, sizeof *g.t);
  if (!g.t) {
    rc = -ENOMEM;
    goto out;
  }
  for (size_t i = 0; i < nth; i++) g.t[i].thread_id = th[i].id;
  g.nt = nth;
  if ((rc = bf_q_timeline_foreach(s, session_id, &o->filter, gil_sample, &g))) goto out;
  if (!(g.any_flags & (BF_SAMPLE_GIL | BF_SAMPLE_ON_CPU | BF_SAMPLE_IDLE))) {
    rc = bf_store_fail(s, -ENODATA,
                       "session %lld (%s) carries no thread states (GIL, on-CPU, idle)%s",
                       (long long)session_id, info->kind,
                       (bf_q_kind_of(info) == BF_Q_IMPORTED) ? ": collapsed imports have none" : "");
    goto out;
  }
  if (g.nfn) qsort(g.fn, g.nfn, sizeof *g.fn, cmp_fn);
  tstat all = {0};
  for (size_t i = 0; i < g.nt; i++) {
    all.samples += g.t[i].samples;
    all.gil += g.t[i].gil;
    all.waiting += g.t[i].waiting;
    all.on_cpu += g.t[i].on_cpu;
    all.idle += g.t[i].idle;
    all.gc += g.t[i].gc;
  }
  size_t top = o->limit > 0 ? (size_t)o->limit : 10;
  if (top > g.nfn) top = g.nfn;
  if (o->json)
    rc = gil_json(&g, th, &all, top, info, out);
  else
    rc = gil_text(&g, th, &all, top, info, o, out);
out:
  if (rc == -ENOMEM) bf_store_fail(s, rc, "out of memory");
  bf_thread_refs_free(th, nth);
  free(g.t);
  free(g.fn);
  bf_map3_free(&g.leaf);
  bf_map3_free(&g.byfn);
  bf_session_info_free(info);
  return rc;
}
