/* view_stacks.c — a session as weighted distinct stacks, the input of the
 * flame graph, speedscope, pprof and sample-based pstats. Sampled sessions
 * are aggregated by (thread, stack id); traced sessions are rebuilt from
 * caller→callee edges. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "query.h"
#include "store_int.h"
#include "text.h"
#include "views_int.h"
#include "vec.h"


const char *bf_short_file(const char *f, size_t max) {
  size_t n = strlen(f);
  if (n <= max) return f;
  const char *p = f + n - max;
  const char *slash = strchr(p, '/');
  return slash ? slash + 1 : p;
}

void bf_fit_func(char *buf, size_t len, const char *qualname, const char *file, int64_t line, int width) {
  char qb[1024], fb[1024]; /* names are untrusted: shown inert (text.h) */
  qualname = bf_inert(qualname, qb, sizeof qb);
  file = bf_inert(file, fb, sizeof fb);
  size_t ql = strlen(qualname);
  if ((int)ql > width) {
    snprintf(buf, len, "%.*s…", width > 1 ? width - 1 : 0, qualname);
    return;
  }
  char ln[32];
  snprintf(ln, sizeof ln, ":%lld", (long long)line);
  int room = width - (int)ql - 2 - (int)strlen(ln);
  const char *f = file;
  if (room >= 8 && strlen(f) > (size_t)room) {
    const char *base = strrchr(f, '/');
    f = base ? base + 1 : f;
  }
  if (room < 8 || strlen(f) > (size_t)room)
    snprintf(buf, len, "%s", qualname);
  else
    snprintf(buf, len, "%s  %s%s", qualname, f, ln);
}

void bf_put_fit(FILE *out, const char *str, int width) {
  char sb[2048];
  str = bf_inert(str, sb, sizeof sb);
  int cols = 0;
  const unsigned char *p = (const unsigned char *)str;
  for (const unsigned char *q = p; *q; q++) cols += (*q & 0xC0) != 0x80;
  if (cols <= width) {
    fputs(str, out);
    return;
  }
  int n = 0;
  for (; *p; p++) {
    if ((*p & 0xC0) != 0x80 && ++n > width - 1) break;
    fputc(*p, out);
  }
  fputs("…", out);
}

void bf_put_title(FILE *out, const char *what, const bf_session_info *info, int width, int color) {
  char sub[1024];
  bf_session_line(info, 0, sub, sizeof sub);
  char head[1100];
  snprintf(head, sizeof head, "%s · %s", what, sub);
  fputs(color ? "\033[1m" : "", out);
  bf_put_fit(out, head, width);
  fputs(color ? "\033[0m" : "", out);
}

void bf_html_str(FILE *out, const char *s) {
  for (; s && *s; s++) {
    switch (*s) {
      case '&': fputs("&amp;", out); break;
      case '<': fputs("&lt;", out); break;
      case '>': fputs("&gt;", out); break;
      case '"': fputs("&quot;", out); break;
      case '\'': fputs("&#39;", out); break;
      default: fputc(*s, out);
    }
  }
}

void bf_wthread_label(const bf_wthread *t, char *buf, size_t len) {
  char nb[512];
  if (t->name && *t->name)
    snprintf(buf, len, "%s (%lld)", bf_inert(t->name, nb, sizeof nb), (long long)t->native_tid);
  else if (t->id == 0)
    snprintf(buf, len, "all threads");
  else
    snprintf(buf, len, "thread %lld", (long long)t->native_tid);
}

void bf_wstacks_free(bf_wstacks *w) {
  if (!w) return;
  for (size_t i = 0; i < w->nthreads; i++) free(w->threads[i].name);
  free(w->threads);
  free(w->v);
  free(w->fids);
  free(w->lines);
  bf_session_info_free(w->info);
  free(w);
}

static int push_stack(bf_wstacks *w, int32_t thread, const int64_t *fids, const int64_t *lines, size_t depth,
                      int64_t count, double weight) {
  if (bf_vec_grow((void **)&w->v, &w->cap, w->n + 1, sizeof *w->v, 256)) return -ENOMEM;
  size_t fids_cap = w->fcap; /* both arrays share w->fcap */
  if (bf_vec_grow((void **)&w->fids, &fids_cap, w->nf + depth, sizeof *w->fids, 4096) ||
      bf_vec_grow((void **)&w->lines, &w->fcap, w->nf + depth, sizeof *w->lines, 4096))
    return -ENOMEM;
  memcpy(w->fids + w->nf, fids, depth * sizeof *fids);
  memcpy(w->lines + w->nf, lines, depth * sizeof *lines);
  w->v[w->n++] = (bf_wstack){thread, (uint32_t)depth, w->nf, count, weight, 0};
  w->nf += depth;
  return 0;
}

/* Another thread's row for a stack whose frames are already stored. */
static int push_shared(bf_wstacks *w, int32_t thread, const bf_wstack *like, int64_t count, double weight) {
  if (bf_vec_grow((void **)&w->v, &w->cap, w->n + 1, sizeof *w->v, 256)) return -ENOMEM;
  w->v[w->n++] = (bf_wstack){thread, like->depth, like->off, count, weight, like->stack_id};
  return 0;
}

/* ---- sampled / imported ------------------------------------------------- */

static int load_sampled(bf_store *s, int64_t sid, const bf_sample_filter *f, bf_wstacks *w) {
  bf_q_stacks *q = NULL;
  bf_thread_ref *th = NULL;
  size_t nth = 0;
  int64_t *lines = NULL, *fids = NULL;
  size_t lcap = 0;
  bf_map3 seen = {0}; /* stack id → first row with its frames */
  int rc = bf_q_stacks_load(s, sid, f, &q);
  if (rc) goto out;
  w->total_count = q->total_count;
  w->total_weight = q->total_weight;
  if ((rc = bf_store_threads(s, sid, &th, &nth))) goto out;
  w->threads = calloc(nth ? nth : 1, sizeof *w->threads);
  if (!w->threads) {
    rc = -ENOMEM;
    goto out;
  }
  for (size_t i = 0; i < nth; i++) {
    w->threads[i].id = th[i].id;
    w->threads[i].native_tid = th[i].native_tid;
    w->threads[i].name = th[i].name;
    th[i].name = NULL;
  }
  w->nthreads = nth;
  if (w->by_weight && w->total_weight <= 0) w->by_weight = 0;
  for (size_t k = 0; k < q->n; k++) {
    const bf_q_stack *row = &q->v[k];
    int32_t ti = -1;
    for (size_t i = 0; i < nth; i++)
      if (w->threads[i].id == row->thread_id) ti = (int32_t)i;
    if (ti < 0) continue; /* sample of an unknown thread: cannot happen in a sound db */
    if (row->stack_id == 0) { /* no Python frame: counted, in no row */
      w->threads[ti].empty_count += row->count;
      w->threads[ti].empty_weight += row->weight;
      w->empty_count += row->count;
      w->empty_weight += row->weight;
      continue;
    }
    w->threads[ti].count += row->count;
    w->threads[ti].weight += row->weight;
    int64_t *first = bf_map3_get(&seen, row->stack_id, row->leaf_op, 0);
    if (first) {
      if ((rc = push_shared(w, ti, &w->v[*first], row->count, row->weight))) goto out;
      continue;
    }
    if (bf_map3_put(&seen, row->stack_id, row->leaf_op, 0, (int64_t)w->n)) {
      rc = -ENOMEM;
      goto out;
    }
    int64_t *frames = NULL;
    size_t nf = 0;
    if ((rc = bf_store_stack_frames(s, row->stack_id, &frames, &nf))) goto out;
    if (nf + 1 > lcap) { /* + 1: an opcode leaf */
      int64_t *nl = realloc(lines, (nf + 1) * sizeof *nl), *nfi = nl ? realloc(fids, (nf + 1) * sizeof *nfi) : NULL;
      if (nl) lines = nl;
      if (nfi) fids = nfi;
      if (!nl || !nfi) {
        free(frames);
        rc = -ENOMEM;
        goto out;
      }
      lcap = nf + 1;
    }
    for (size_t j = 0; j < nf; j++)
      if ((rc = bf_store_frame_get(s, frames[j], &fids[j], &lines[j]))) {
        free(frames);
        goto out;
      }
    free(frames);
    if (row->leaf_op > 0) { /* f->by_opcode: the leaf's instruction as one more frame */
      fids[nf] = BF_WSTACK_OP_FID(row->leaf_op - 1);
      lines[nf++] = 0;
    }
    if ((rc = push_stack(w, ti, fids, lines, nf, row->count, row->weight))) goto out;
    w->v[w->n - 1].stack_id = row->leaf_op > 0 ? 0 : row->stack_id; /* equal ids: equal frames */
  }
out:
  bf_map3_free(&seen);
  bf_thread_refs_free(th, nth);
  bf_q_stacks_free(q);
  free(lines);
  free(fids);
  return rc;
}

/* ---- traced: rebuild paths from edges ------------------------------------ */

#define TRACE_MAX_DEPTH 128

typedef struct tedges {
  bf_trace_edge *v;
  size_t n, cap;
  bf_map3 fn_total; /* function id → total ns (from trace funcs) */
  bf_map3 fn_calls;
  int64_t *fn_ids;  /* every traced function, in store order */
  size_t nfn, fncap;
} tedges;

static int collect_edge(void *ud, const bf_trace_edge *te) {
  tedges *t = ud;
  if (bf_vec_grow((void **)&t->v, &t->cap, t->n + 1, sizeof *t->v, 256)) return -ENOMEM;
  t->v[t->n++] = *te;
  return 0;
}

static int collect_func(void *ud, const bf_trace_func *tf) {
  tedges *t = ud;
  if (bf_map3_put(&t->fn_total, tf->function_id, 0, 0, tf->total_ns)) return -ENOMEM;
  if (bf_map3_put(&t->fn_calls, tf->function_id, 0, 0, tf->calls)) return -ENOMEM;
  if (bf_vec_grow((void **)&t->fn_ids, &t->fncap, t->nfn + 1, sizeof *t->fn_ids, 256)) return -ENOMEM;
  t->fn_ids[t->nfn++] = tf->function_id;
  return 0;
}

/* Paths cut recursion and drop tiny subtrees, so the calls ending at a
 * function can fall short of its traced calls. Give each function its exact
 * calls: the missing ones go on a zero-weight row -- the function called by
 * itself under its first path when it recurses directly, else its first
 * path (or itself alone when no path reaches it). */
static int add_missing_calls(bf_store *s, tedges *t, bf_wstacks *w) {
  bf_map3 leaf = {0}, first = {0}, self_edge = {0};
  int64_t *path = NULL;
  int rc = 0;
  size_t rows = w->n;
  for (size_t i = 0; i < t->n; i++)
    if (t->v[i].caller_function_id == t->v[i].callee_function_id &&
        bf_map3_put(&self_edge, t->v[i].callee_function_id, 0, 0, 1))
      goto oom;
  for (size_t i = 0; i < rows; i++) {
    const bf_wstack *st = &w->v[i];
    int64_t leaf_fid = w->fids[st->off + st->depth - 1];
    int64_t *c = bf_map3_get(&leaf, leaf_fid, 0, 0);
    if (bf_map3_put(&leaf, leaf_fid, 0, 0, (c ? *c : 0) + st->count)) goto oom;
    for (uint32_t d = 0; d < st->depth; d++)
      if (!bf_map3_get(&first, w->fids[st->off + d], 0, 0) &&
          bf_map3_put(&first, w->fids[st->off + d], 0, 0, (int64_t)i * TRACE_MAX_DEPTH + d + 1))
        goto oom;
  }
  path = malloc((TRACE_MAX_DEPTH + 1) * 2 * sizeof *path);
  if (!path) goto oom;
  int64_t *lines = path + TRACE_MAX_DEPTH + 1;
  for (size_t k = 0; k < t->nfn; k++) {
    int64_t fid = t->fn_ids[k];
    int64_t *calls = bf_map3_get(&t->fn_calls, fid, 0, 0), *have = bf_map3_get(&leaf, fid, 0, 0);
    int64_t missing = (calls ? *calls : 0) - (have ? *have : 0);
    if (missing <= 0) continue;
    int64_t *at = bf_map3_get(&first, fid, 0, 0);
    size_t depth = 0;
    if (at) {
      const bf_wstack *st = &w->v[(*at - 1) / TRACE_MAX_DEPTH];
      depth = (size_t)((*at - 1) % TRACE_MAX_DEPTH) + 1;
      memcpy(path, w->fids + st->off, depth * sizeof *path);
      memcpy(lines, w->lines + st->off, depth * sizeof *lines);
    } else {
      bf_function_ref ref;
      if ((rc = bf_store_function_get(s, fid, &ref))) goto out;
      path[0] = fid;
      lines[0] = ref.firstlineno;
      depth = 1;
    }
    if (at && bf_map3_get(&self_edge, fid, 0, 0) && depth < TRACE_MAX_DEPTH) {
      path[depth] = fid;
      lines[depth] = lines[depth - 1];
      depth++;
    }
    if ((rc = push_stack(w, 0, path, lines, depth, missing, 0))) goto out;
    w->total_count += missing;
  }
  goto out;
oom:
  rc = -ENOMEM;
out:
  free(path);
  bf_map3_free(&leaf);
  bf_map3_free(&first);
  bf_map3_free(&self_edge);
  return rc;
}

static int cmp_edge(const void *a, const void *b) {
  const bf_trace_edge *x = a, *y = b;
  if (x->caller_function_id != y->caller_function_id) return x->caller_function_id < y->caller_function_id ? -1 : 1;
  return (x->callee_function_id > y->callee_function_id) - (x->callee_function_id < y->callee_function_id);
}

typedef struct texp {
  bf_store *s;
  tedges *t;
  bf_wstacks *w;
  int64_t path[TRACE_MAX_DEPTH], lines[TRACE_MAX_DEPTH];
  double min_ns;
} texp;

static size_t first_edge_of(const tedges *t, int64_t caller) {
  size_t lo = 0, hi = t->n;
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    if (t->v[mid].caller_function_id < caller)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo;
}

/* Node fid at depth d, reached with value_ns and calls on this path. */
static int expand(texp *x, size_t d, int64_t fid, double value_ns, double calls) {
  bf_function_ref ref;
  int rc = bf_store_function_get(x->s, fid, &ref);
  if (rc) return rc;
  x->path[d] = fid;
  x->lines[d] = ref.firstlineno;
  int64_t *tot = bf_map3_get(&x->t->fn_total, fid, 0, 0);
  double ftotal = tot && *tot > 0 ? (double)*tot : value_ns;
  double frac = ftotal > 0 ? value_ns / ftotal : 0;
  if (frac > 1) frac = 1;
  double child_sum = 0;
  if (d + 1 < TRACE_MAX_DEPTH) {
    for (size_t i = first_edge_of(x->t, fid); i < x->t->n && x->t->v[i].caller_function_id == fid; i++) {
      const bf_trace_edge *e = &x->t->v[i];
      int on_path = 0;
      for (size_t k = 0; k <= d; k++) on_path |= x->path[k] == e->callee_function_id;
      if (on_path) continue; /* recursion: its time is already inside the outer activation */
      double v = (double)e->total_ns * frac;
      if (v < x->min_ns || v <= 0) continue;
      if (child_sum + v > value_ns) v = value_ns - child_sum;
      if (v <= 0) break;
      child_sum += v;
      if ((rc = expand(x, d + 1, e->callee_function_id, v, (double)e->calls * frac))) return rc;
    }
  }
  double self = value_ns - child_sum;
  if (self > 0 || child_sum == 0) {
    int64_t c = (int64_t)(calls + 0.5);
    if (c < 1) c = 1;
    rc = push_stack(x->w, 0, x->path, x->lines, d + 1, c, self > 0 ? self : 0);
    if (rc) return rc;
    x->w->total_count += c;
    x->w->total_weight += self > 0 ? self : 0;
  }
  return 0;
}

static int load_traced(bf_store *s, int64_t sid, bf_wstacks *w) {
  tedges t = {0};
  int rc = bf_q_trace_edges(s, sid, collect_edge, &t);
  if (!rc) rc = bf_q_trace_funcs(s, sid, collect_func, &t);
  if (rc) goto out;
  if (t.n) qsort(t.v, t.n, sizeof *t.v, cmp_edge);
  w->threads = calloc(1, sizeof *w->threads);
  if (!w->threads) {
    rc = -ENOMEM;
    goto out;
  }
  w->nthreads = 1;
  w->traced = 1;
  w->by_weight = 1;
  double roots = 0;
  for (size_t i = 0; i < t.n && t.v[i].caller_function_id == 0; i++) roots += (double)t.v[i].total_ns;
  texp x = {.s = s, .t = &t, .w = w, .min_ns = roots * 1e-5};
  for (size_t i = 0; i < t.n && t.v[i].caller_function_id == 0; i++)
    if ((rc = expand(&x, 0, t.v[i].callee_function_id, (double)t.v[i].total_ns, (double)t.v[i].calls))) goto out;
  if ((rc = add_missing_calls(s, &t, w))) goto out;
  w->threads[0].count = w->total_count;
  w->threads[0].weight = w->total_weight;
out:
  free(t.v);
  bf_map3_free(&t.fn_total);
  bf_map3_free(&t.fn_calls);
  free(t.fn_ids);
  return rc;
}

int bf_wstacks_load(bf_store *s, int64_t session_id, const bf_sample_filter *f, bf_wstacks **out) {
  *out = NULL;
  bf_wstacks *w = calloc(1, sizeof *w);
  if (!w) return bf_store_fail(s, -ENOMEM, "out of memory");
  int rc = bf_store_session_get(s, session_id, &w->info);
  if (rc) {
    free(w);
    return rc;
  }
  w->by_weight = bf_q_by_weight(w->info);
  if (bf_q_kind_of(w->info) == BF_Q_TRACED)
    rc = load_traced(s, session_id, w);
  else
    rc = load_sampled(s, session_id, f, w);
  if (rc) {
    if (rc == -ENOMEM) bf_store_fail(s, rc, "out of memory");
    bf_wstacks_free(w);
    return rc;
  }
  *out = w;
  return 0;
}
