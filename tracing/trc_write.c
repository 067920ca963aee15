/* trc_write.c — turns a finished trace (bf_trc_result) into store rows.
 *
 * One transaction per trace: session metadata, interned functions and threads,
 * per-function and per-edge totals, focus-mode call records and percentiles.
 * Knows nothing about Python; the collector hands it plain C data.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ident.h"
#include "store.h"
#include "trace_memory.h"
#include "trc_int.h"

int64_t bf_trc_percentile(const int64_t *sorted, size_t n, double q) {
  if (n == 0) return -1;
  /* nearest rank: the smallest value with at least q of the data at or below */
  double r = q * (double)n;
  size_t k = (size_t)r;
  if ((double)k < r) k++;
  if (k == 0) k = 1;
  if (k > n) k = n;
  return sorted[k - 1];
}

static int cmp_i64(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return (x > y) - (x < y);
}

/* Distinct code objects may share an identity (file, qualname, firstlineno),
 * e.g. every namedtuple's exec'd "<string>" module: they are one function in
 * the store, so their figures are summed. */
typedef struct fid_idx {
  int64_t fid;
  size_t idx;
} fid_idx;

static int cmp_fid(const void *a, const void *b) {
  const fid_idx *x = a, *y = b;
  if (x->fid != y->fid) return (x->fid > y->fid) - (x->fid < y->fid);
  return (x->idx > y->idx) - (x->idx < y->idx);
}

typedef struct edge_key {
  int64_t caller, callee;
  size_t idx;
} edge_key;

static int cmp_edge(const void *a, const void *b) {
  const edge_key *x = a, *y = b;
  if (x->caller != y->caller) return (x->caller > y->caller) - (x->caller < y->caller);
  return (x->callee > y->callee) - (x->callee < y->callee);
}

/* One write's working state: the store, the session and per-index tables. */
typedef struct trc_wr {
  bf_store *s;
  int64_t sid;
  const bf_trc_result *res;
  int64_t *fids;      /* by function index: the store's function id */
  int64_t *tids;      /* by thread index: the store's thread id */
  size_t *canon;      /* by function index: the first index with the same identity */
  bf_trc_func *agg;   /* at canonical indexes: the summed figures */
  fid_idx *order;
  size_t *offs;       /* by canonical index: where its record durations start in durs */
  int64_t *durs;
} trc_wr;

static void trc_wr_free(trc_wr *w) {
  free(w->fids);
  free(w->tids);
  free(w->canon);
  free(w->agg);
  free(w->order);
  free(w->offs);
  free(w->durs);
}

static void trc_session_info(const bf_trc_meta *meta, const char *host, bf_session_info *info) {
  memset(info, 0, sizeof *info);
  info->kind = "traced";
  info->clock = meta->clock;
  info->mode = meta->mode;
  info->start_ns = meta->start_ns;
  info->duration_ns = meta->duration_ns;
  info->host = host[0] ? host : NULL;
  info->pid = meta->pid;
  info->command = meta->command;
  info->python_version = meta->python_version;
  info->python_build = meta->python_build;
  info->profiler_version = BF_VERSION;
  info->commit = meta->commit;
  info->label = meta->label;
  info->profiler_cpu_ns = meta->profiler_cpu_ns;
  info->expires_at_ns = meta->expires_at_ns;
  info->extra_json = meta->extra_json;
}

/* Intern every thread and function of the result. */
static int trc_wr_intern(trc_wr *w) {
  const bf_trc_result *res = w->res;
  w->fids = calloc(res->nfuncs ? res->nfuncs : 1, sizeof *w->fids);
  w->tids = calloc(res->nthreads ? res->nthreads : 1, sizeof *w->tids);
  if (!w->fids || !w->tids) return -ENOMEM;
  for (size_t i = 0; i < res->nthreads; i++) {
    int rc = bf_store_intern_thread(w->s, w->sid, res->threads[i].native_tid,
                                    res->threads[i].name, &w->tids[i]);
    if (rc < 0) return rc;
  }
  for (size_t i = 1; i < res->nfuncs; i++) {
    const bf_trc_func *f = &res->funcs[i];
    int rc = bf_store_intern_function(w->s, bf_ident_or_unknown(f->file),
                                      bf_ident_or_unknown(f->qualname), f->firstlineno,
                                      &w->fids[i]);
    if (rc < 0) return rc;
  }
  return 0;
}

/* Sum the functions that share a store identity into their first index. */
static int trc_wr_merge(trc_wr *w) {
  const bf_trc_result *res = w->res;
  size_t n = res->nfuncs ? res->nfuncs : 1;
  w->canon = calloc(n, sizeof *w->canon);
  w->agg = calloc(n, sizeof *w->agg);
  w->order = calloc(n, sizeof *w->order);
  if (!w->canon || !w->agg || !w->order) return -ENOMEM;
  for (size_t i = 1; i < res->nfuncs; i++) w->order[i - 1] = (fid_idx){w->fids[i], i};
  if (res->nfuncs > 1) qsort(w->order, res->nfuncs - 1, sizeof *w->order, cmp_fid);
  for (size_t k = 0; k + 1 < res->nfuncs; k++) {
    size_t i = w->order[k].idx;
    w->canon[i] =
        (k > 0 && w->order[k - 1].fid == w->order[k].fid) ? w->canon[w->order[k - 1].idx] : i;
    bf_trc_func *a = &w->agg[w->canon[i]];
    const bf_trc_func *f = &res->funcs[i];
    a->calls += f->calls;
    a->primitive_calls += f->primitive_calls;
    a->resumes += f->resumes;
    a->self_ns += f->self_ns;
    a->total_ns += f->total_ns;
    a->records_kept += f->records_kept;
    a->records_dropped += f->records_dropped;
    a->focus |= f->focus;
  }
  return 0;
}

/* Per-function durations of the kept records, grouped by canonical function
 * (counting sort). */
static int trc_wr_durations(trc_wr *w) {
  const bf_trc_result *res = w->res;
  w->offs = calloc(res->nfuncs + 1, sizeof *w->offs);
  w->durs = malloc((res->nrecs ? res->nrecs : 1) * sizeof *w->durs);
  size_t *fill = calloc(res->nfuncs ? res->nfuncs : 1, sizeof *fill);
  if (!w->offs || !w->durs || !fill) {
    free(fill);
    return -ENOMEM;
  }
  for (size_t i = 0; i < res->nrecs; i++) w->offs[w->canon[res->recs[i].func] + 1]++;
  for (size_t i = 1; i <= res->nfuncs; i++) w->offs[i] += w->offs[i - 1];
  for (size_t i = 0; i < res->nrecs; i++) {
    size_t f = w->canon[res->recs[i].func];
    w->durs[w->offs[f] + fill[f]++] = res->recs[i].duration_ns;
  }
  free(fill);
  return 0;
}

/* One row per function identity that was counted, with focus percentiles. */
static int trc_wr_funcs(trc_wr *w) {
  for (size_t i = 1; i < w->res->nfuncs; i++) {
    if (w->canon[i] != i) continue;
    const bf_trc_func *f = &w->agg[i];
    if (f->calls == 0 && f->resumes == 0 && f->self_ns == 0) continue;
    bf_trace_func tf = {0};
    tf.function_id = w->fids[i];
    tf.calls = f->calls;
    tf.primitive_calls = f->primitive_calls;
    tf.resumes = f->resumes;
    tf.self_ns = f->self_ns;
    tf.total_ns = f->total_ns;
    tf.p50_ns = tf.p90_ns = tf.p99_ns = tf.max_ns = -1;
    size_t n = w->offs[i + 1] - w->offs[i];
    if (f->focus && (n > 0 || f->records_dropped > 0)) {
      int64_t *v = w->durs + w->offs[i];
      qsort(v, n, sizeof *v, cmp_i64);
      tf.p50_ns = bf_trc_percentile(v, n, 0.50);
      tf.p90_ns = bf_trc_percentile(v, n, 0.90);
      tf.p99_ns = bf_trc_percentile(v, n, 0.99);
      tf.max_ns = n ? v[n - 1] : -1;
    }
    tf.records_kept = f->records_kept;
    tf.records_dropped = f->records_dropped;
    int rc = bf_store_trace_func_put(w->s, w->sid, &tf);
    if (rc < 0) return rc;
  }
  return 0;
}

/* One row per (caller, callee) identity pair, same-identity edges summed. */
static int trc_wr_edges(trc_wr *w) {
  const bf_trc_result *res = w->res;
  edge_key *ekeys = calloc(res->nedges ? res->nedges : 1, sizeof *ekeys);
  if (!ekeys) return -ENOMEM;
  size_t ne = 0;
  for (size_t i = 1; i < res->nedges; i++) {
    const bf_trc_edge *e = &res->edges[i];
    if (e->calls == 0 && e->self_ns == 0 && e->total_ns == 0) continue;
    ekeys[ne++] = (edge_key){e->caller ? w->fids[e->caller] : 0, w->fids[e->callee], i};
  }
  qsort(ekeys, ne, sizeof *ekeys, cmp_edge);
  int rc = 0;
  for (size_t k = 0; k < ne && rc == 0;) {
    bf_trace_edge te = {0};
    te.caller_function_id = ekeys[k].caller;
    te.callee_function_id = ekeys[k].callee;
    size_t k0 = k;
    for (; k < ne && ekeys[k].caller == ekeys[k0].caller && ekeys[k].callee == ekeys[k0].callee; k++) {
      const bf_trc_edge *e = &res->edges[ekeys[k].idx];
      te.calls += e->calls;
      te.primitive_calls += e->primitive_calls;
      te.self_ns += e->self_ns;
      te.total_ns += e->total_ns;
    }
    rc = bf_store_trace_edge_put(w->s, w->sid, &te);
  }
  free(ekeys);
  return rc;
}

static int trc_wr_records(trc_wr *w) {
  const bf_trc_result *res = w->res;
  for (size_t i = 0; i < res->nrecs; i++) {
    const bf_trc_rec *r = &res->recs[i];
    bf_call_record cr = {0};
    cr.function_id = w->fids[r->func];
    cr.thread_id = r->thread < res->nthreads ? w->tids[r->thread] : 0;
    cr.start_ns = r->start_ns;
    cr.duration_ns = r->duration_ns;
    cr.depth = 0;
    cr.parent_function_id = r->parent ? w->fids[r->parent] : 0;
    int rc = bf_store_call_record_add(w->s, w->sid, &cr);
    if (rc < 0) return rc;
  }
  return 0;
}

/* trace --memory: one row per function identity (0: no Python function on
 * the stack), same-identity functions summed like their times. */
static int trc_wr_memory_funcs(trc_wr *w, const bf_trc_mem *m) {
  size_t n = m->nfuncs < w->res->nfuncs ? m->nfuncs : w->res->nfuncs;
  bf_trc_memstat *sum = calloc(n ? n : 1, sizeof *sum);
  if (!sum) return -ENOMEM;
  for (size_t i = 0; i < n; i++) {
    bf_trc_memstat *a = &sum[i ? w->canon[i] : 0];
    a->allocs += m->funcs[i].allocs;
    a->alloc_bytes += m->funcs[i].alloc_bytes;
    a->frees += m->funcs[i].frees;
    a->freed_bytes += m->funcs[i].freed_bytes;
  }
  int rc = 0;
  for (size_t i = 0; i < n && rc == 0; i++) {
    if (!sum[i].allocs || (i && w->canon[i] != i)) continue;
    bf_trace_memory r = {.function_id = i ? w->fids[i] : 0, .allocs = sum[i].allocs,
                         .alloc_bytes = sum[i].alloc_bytes, .frees = sum[i].frees,
                         .freed_bytes = sum[i].freed_bytes};
    r.live_count = r.allocs - r.frees;
    r.live_bytes = r.alloc_bytes - r.freed_bytes;
    rc = bf_store_trace_memory_put(w->s, w->sid, &r);
  }
  free(sum);
  return rc;
}

/* One row per (caller, callee) identity pair that allocated. */
static int trc_wr_memory_edges(trc_wr *w, const bf_trc_mem *m) {
  const bf_trc_result *res = w->res;
  size_t n = m->nedges < res->nedges ? m->nedges : res->nedges;
  edge_key *ek = calloc(n ? n : 1, sizeof *ek);
  if (!ek) return -ENOMEM;
  size_t ne = 0;
  for (size_t i = 1; i < n; i++) {
    const bf_trc_edge *e = &res->edges[i];
    if (!m->edges[i].allocs) continue;
    ek[ne++] = (edge_key){e->caller ? w->fids[e->caller] : 0, w->fids[e->callee], i};
  }
  qsort(ek, ne, sizeof *ek, cmp_edge);
  int rc = 0;
  for (size_t k = 0; k < ne && rc == 0;) {
    bf_trace_memory r = {.caller_function_id = ek[k].caller, .function_id = ek[k].callee};
    for (size_t k0 = k; k < ne && ek[k].caller == ek[k0].caller && ek[k].callee == ek[k0].callee; k++) {
      const bf_trc_memstat *st = &m->edges[ek[k].idx];
      r.allocs += st->allocs;
      r.alloc_bytes += st->alloc_bytes;
      r.frees += st->frees;
      r.freed_bytes += st->freed_bytes;
    }
    r.live_count = r.allocs - r.frees;
    r.live_bytes = r.alloc_bytes - r.freed_bytes;
    rc = bf_store_trace_memory_edge_put(w->s, w->sid, &r);
  }
  free(ek);
  return rc;
}

/* The largest live blocks, their stacks as function ids. */
static int trc_wr_memory_top(trc_wr *w, const bf_trc_mem *m) {
  int rc = 0;
  for (size_t i = 0; i < m->ntop && rc == 0; i++) {
    const bf_trc_memtop *t = &m->top[i];
    int64_t *stack = malloc((t->nstack ? t->nstack : 1) * sizeof *stack);
    if (!stack) return -ENOMEM;
    size_t k = 0;
    for (uint32_t j = 0; j < t->nstack; j++)
      if (t->stack[j] < w->res->nfuncs) stack[k++] = w->fids[t->stack[j]];
    bf_trace_memory_top row = {.rank = (int64_t)i + 1, .size_bytes = t->size,
                               .function_id = t->func < w->res->nfuncs ? w->fids[t->func] : 0,
                               .stack = stack, .nstack = k};
    rc = bf_store_trace_memory_top_put(w->s, w->sid, &row);
    free(stack);
  }
  return rc;
}

static int trc_wr_memory(trc_wr *w) {
  const bf_trc_mem *m = w->res->mem;
  if (!m) return 0;
  int rc = trc_wr_memory_funcs(w, m);
  if (rc == 0) rc = trc_wr_memory_edges(w, m);
  if (rc == 0) rc = trc_wr_memory_top(w, m);
  return rc;
}

int bf_trc_write(const char *path, const bf_trc_result *res, const bf_trc_meta *meta,
                 int64_t *session_id, bf_err *err) {
  trc_wr w = {0};
  w.res = res;
  w.sid = meta->session_id;
  bf_err msg = BF_ERR_INIT;
  int began = 0;
  char host[256] = "";
  int rc = bf_store_open(path, BF_STORE_CREATE, &w.s, &msg);
  if (rc < 0) return bf_err_set(err, rc, "%s: %s", path, bf_err_msg(&msg, strerror(-rc)));
  gethostname(host, sizeof host - 1);
  bf_session_info info;
  trc_session_info(meta, host, &info);
  if ((rc = bf_store_begin(w.s)) < 0) goto fail;
  began = 1;
  if (w.sid <= 0) {
    info.status = "incomplete";
    if ((rc = bf_store_session_begin(w.s, &info, &w.sid)) < 0) goto fail;
  }
  info.id = w.sid;
  if ((rc = trc_wr_intern(&w)) < 0 || (rc = trc_wr_merge(&w)) < 0 ||
      (rc = trc_wr_durations(&w)) < 0 || (rc = trc_wr_funcs(&w)) < 0 ||
      (rc = trc_wr_edges(&w)) < 0 || (rc = trc_wr_records(&w)) < 0 || (rc = trc_wr_memory(&w)) < 0)
    goto fail;
  info.status = meta->status ? meta->status : "complete";
  if ((rc = bf_store_session_update(w.s, &info)) < 0) goto fail;
  if ((rc = bf_store_commit(w.s)) < 0) goto fail;
  began = 0;
  *session_id = w.sid;
  rc = 0;
  goto out;
fail:
  bf_err_set(err, rc, "%s: %s", path, rc == -ENOMEM ? "out of memory" : bf_store_errmsg(w.s));
  if (began) bf_store_rollback(w.s);
out:
  trc_wr_free(&w);
  bf_store_close(w.s);
  return rc;
}
