/* view_stack.c — per thread, the most frequent stacks (with share and 95%
 * interval) and the last stack seen, innermost frame first like a traceback
 * turned upside down (py-spy dump order). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "jsonw.h"
#include "profile.h"
#include "query.h"
#include "session_json.h"
#include "store_int.h"
#include "views.h"
#include "views_int.h"

typedef struct last {
  int64_t thread_id, stack_id, ts_ns;
  uint32_t flags;
} last;

typedef struct lastset {
  last *v, *cur;
  size_t n;
} lastset;

static int last_sample(void *ud, const bf_sample *smp) {
  lastset *l = ud;
  if (!l->cur || l->cur->thread_id != smp->thread_id) { /* samples come thread by thread */
    l->cur = NULL;
    for (size_t i = 0; i < l->n && !l->cur; i++)
      if (l->v[i].thread_id == smp->thread_id) l->cur = &l->v[i];
    if (!l->cur) return 0;
  }
  if (smp->ts_ns >= l->cur->ts_ns) {
    l->cur->stack_id = smp->stack_id;
    l->cur->ts_ns = smp->ts_ns;
    l->cur->flags = smp->flags;
  }
  return 0;
}

/* The frames innermost first: as a JSON array on jw, else as text lines. */
static int print_frames(bf_store *s, FILE *out, bf_jw *jw, const int64_t *fids, const int64_t *lines, size_t n,
                        int width) {
  if (jw) bf_jw_arr(jw);
  for (size_t k = n; k-- > 0;) {
    bf_function_ref ref;
    int rc = bf_store_function_get(s, fids[k], &ref);
    if (rc) return rc;
    if (jw) {
      bf_jw_obj(jw);
      bf_jw_kstr(jw, "qualname", ref.qualname);
      bf_jw_kstr(jw, "file", ref.file);
      bf_jw_kint(jw, "line", lines[k]);
      bf_jw_end(jw);
      continue;
    }
    /* recursion: one line for a run of identical frames */
    size_t run = 1;
    while (k >= run && fids[k - run] == fids[k] && lines[k - run] == lines[k]) run++;
    char loc[1024];
    bf_fit_func(loc, sizeof loc, ref.qualname, ref.file, lines[k], width - 6 - (run > 1 ? 8 : 0));
    fprintf(out, "      %s", loc);
    if (run > 1) fprintf(out, "  × %zu", run);
    fputc('\n', out);
    k -= run - 1;
  }
  if (jw) bf_jw_end(jw);
  return 0;
}

static void flag_names(uint32_t f, char *buf, size_t len) {
  snprintf(buf, len, "%s%s%s%s", f & BF_SAMPLE_GIL ? "GIL " : "", f & BF_SAMPLE_ON_CPU ? "on-CPU " : "",
           f & BF_SAMPLE_IDLE ? "idle " : "", f & BF_SAMPLE_GC ? "GC " : "");
  size_t n = strlen(buf);
  if (n) buf[n - 1] = 0;
}

static int cmp_count(const void *a, const void *b, void *w) {
  (void)w;
  const bf_wstack *x = a, *y = b;
  return x->count < y->count ? 1 : x->count > y->count ? -1 : 0;
}

/* Thread t's most frequent stacks, up to top (w->v sorted by count); JSON
 * on jw when it is not NULL. */
static int stack_top(bf_store *s, const bf_wstacks *w, int32_t t, size_t top, const bf_view_opts *o, bf_jw *jw,
                     FILE *out) {
  int64_t n = w->threads[t].count;
  size_t shown = 0;
  for (size_t i = 0; i < w->n && shown < top; i++) {
    const bf_wstack *st = &w->v[i];
    if (st->thread != t) continue;
    double lo, hi;
    bf_wilson((double)st->count, (double)n, &lo, &hi);
    if (jw) {
      bf_jw_obj(jw);
      bf_jw_kint(jw, "samples", st->count);
      bf_jw_knum(jw, "share", (double)st->count / (double)n);
      bf_jw_kpair(jw, "ci", lo, hi);
      bf_jw_key(jw, "frames");
    } else {
      fprintf(out, "  #%zu  %5.1f%% [%.1f-%.1f] · %lld samples\n", shown + 1, 100.0 * (double)st->count / (double)n,
              lo * 100, hi * 100, (long long)st->count);
    }
    int rc = print_frames(s, out, jw, w->fids + st->off, w->lines + st->off, st->depth,
                          o->width > 40 ? o->width : 80);
    if (rc) return rc;
    if (jw) bf_jw_end(jw);
    shown++;
  }
  return 0;
}

/* The last stack a thread was seen in, with its state flags; JSON on jw
 * (the "last" object, left open for the caller to end) when not NULL. */
static int stack_last(bf_store *s, const last *l, const bf_view_opts *o, bf_jw *jw, FILE *out) {
  char fl[64];
  flag_names(l->flags, fl, sizeof fl);
  if (jw) {
    bf_jw_key(jw, "last");
    bf_jw_obj(jw);
    bf_jw_knum(jw, "ts_s", (double)l->ts_ns / 1e9);
    bf_jw_kstr(jw, "state", fl);
    bf_jw_key(jw, "frames");
  } else {
    fprintf(out, "  last seen at %.3f s%s%s%s\n", (double)l->ts_ns / 1e9, *fl ? " [" : "", fl, *fl ? "]" : "");
  }
  size_t nf = 0;
  int64_t *frames = NULL, *fids = NULL, *lines = NULL;
  int rc = l->stack_id > 0 ? bf_store_stack_frames(s, l->stack_id, &frames, &nf) : 0;
  if (rc) return rc;
  fids = malloc((nf ? nf : 1) * sizeof *fids);
  lines = malloc((nf ? nf : 1) * sizeof *lines);
  if (!fids || !lines) rc = -ENOMEM;
  for (size_t k = 0; !rc && k < nf; k++) rc = bf_store_frame_get(s, frames[k], &fids[k], &lines[k]);
  if (!rc) {
    if (!jw && nf == 0) fputs("      (empty stack)\n", out);
    rc = print_frames(s, out, jw, fids, lines, nf, o->width > 40 ? o->width : 80);
  }
  free(frames);
  free(fids);
  free(lines);
  return rc;
}

int bf_view_stack(bf_store *s, int64_t session_id, const bf_view_opts *o, FILE *out) {
  bf_view_opts def = {0};
  if (!o) o = &def;
  bf_wstacks *w = NULL;
  lastset ls = {0};
  int rc = bf_wstacks_load(s, session_id, &o->filter, &w);
  if (rc) return rc;
  if (w->traced) {
    rc = bf_store_fail(s, -ENODATA,
                       "session %lld is traced: it has no sampled stacks", /* remedy: repl/cli_hints.c */
                       (long long)session_id);
    goto out;
  }
  ls.v = calloc(w->nthreads ? w->nthreads : 1, sizeof *ls.v);
  if (!ls.v) {
    rc = -ENOMEM;
    goto out;
  }
  for (size_t i = 0; i < w->nthreads; i++) ls.v[i] = (last){w->threads[i].id, 0, -1, 0};
  ls.n = w->nthreads;
  if ((rc = bf_q_timeline_foreach(s, session_id, &o->filter, last_sample, &ls))) goto out;
  if (w->n) qsort_r(w->v, w->n, sizeof *w->v, cmp_count, NULL);
  size_t top = o->limit > 0 ? (size_t)o->limit : 3;
  const char *b = o->color ? "\033[1m" : "", *dim = o->color ? "\033[2m" : "", *rst = o->color ? "\033[0m" : "";
  bf_jw jws, *jw = o->json ? &jws : NULL;
  if (jw) {
    bf_jw_init(jw, out);
    bf_jw_obj(jw);
    bf_jw_key(jw, "session");
    bf_session_json_jw(jw, w->info);
    bf_jw_key(jw, "threads");
    bf_jw_arr(jw);
  } else {
    char sub[1024];
    bf_session_line(w->info, 0, sub, sizeof sub);
    char head[1100];
    snprintf(head, sizeof head, "stacks · %s", sub);
    fputs(b, out);
    bf_put_fit(out, head, o->width > 40 ? o->width : 80);
    fprintf(out, "%s\n%s%lld samples%s\n", rst, dim, (long long)w->total_count, rst);
  }
  for (size_t t = 0; t < w->nthreads; t++) {
    if (!w->threads[t].count) continue;
    char lb[256];
    bf_wthread_label(&w->threads[t], lb, sizeof lb);
    int64_t n = w->threads[t].count;
    if (jw) {
      bf_jw_obj(jw);
      bf_jw_kstr(jw, "thread", lb);
      bf_jw_kint(jw, "native_tid", w->threads[t].native_tid);
      bf_jw_kint(jw, "samples", n);
      bf_jw_key(jw, "top");
      bf_jw_arr(jw);
    } else {
      fprintf(out, "\n%s%s%s · %lld samples\n", b, lb, rst, (long long)n);
    }
    if ((rc = stack_top(s, w, (int32_t)t, top, o, jw, out))) goto out;
    if (jw) bf_jw_end(jw); /* top */
    if ((rc = stack_last(s, &ls.v[t], o, jw, out))) goto out;
    if (jw) {
      bf_jw_end(jw); /* last */
      bf_jw_end(jw); /* the thread */
    }
  }
  if (jw) {
    bf_jw_end(jw);
    bf_jw_end(jw);
    fputc('\n', out);
  }
out:
  if (rc == -ENOMEM) bf_store_fail(s, rc, "out of memory");
  free(ls.v);
  bf_wstacks_free(w);
  return rc;
}
