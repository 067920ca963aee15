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

#include "store.h"
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

static void set_err(char *errbuf, size_t errlen, const char *what, const char *detail) {
  if (errbuf && errlen) snprintf(errbuf, errlen, "%s: %s", what, detail ? detail : "error");
}

int bf_trc_write(const char *path, const bf_trc_result *res, const bf_trc_meta *meta,
                 int64_t *session_id, char *errbuf, size_t errlen) {
  bf_store *s = NULL;
  const char *msg = NULL;
  int64_t *fids = NULL, *tids = NULL, *durs = NULL;
  size_t *offs = NULL, *canon = NULL;
  bf_trc_func *agg = NULL;
  fid_idx *order = NULL;
  edge_key *ekeys = NULL;
  int64_t sid = meta->session_id;
  int began = 0;
  char host[256] = "";
  int rc = bf_store_open(path, BF_STORE_CREATE, &s, &msg);
  if (rc < 0) {
    set_err(errbuf, errlen, path, msg ? msg : strerror(-rc));
    return rc;
  }
  gethostname(host, sizeof host - 1);
  bf_session_info info = {0};
  info.kind = "traced";
  info.clock = meta->clock;
  info.mode = meta->mode;
  info.start_ns = meta->start_ns;
  info.duration_ns = meta->duration_ns;
  info.host = host[0] ? host : NULL;
  info.pid = meta->pid;
  info.command = meta->command;
  info.python_version = meta->python_version;
  info.python_build = meta->python_build;
  info.profiler_version = BF_VERSION;
  info.commit = meta->commit;
  info.label = meta->label;
  info.profiler_cpu_ns = meta->profiler_cpu_ns;
  info.expires_at_ns = meta->expires_at_ns;
  info.extra_json = meta->extra_json;

  if ((rc = bf_store_begin(s)) < 0) goto fail;
  began = 1;
  if (sid <= 0) {
    info.status = "incomplete";
    if ((rc = bf_store_session_begin(s, &info, &sid)) < 0) goto fail;
  }
  info.id = sid;

  fids = calloc(res->nfuncs ? res->nfuncs : 1, sizeof *fids);
  tids = calloc(res->nthreads ? res->nthreads : 1, sizeof *tids);
  if (!fids || !tids) {
    rc = -ENOMEM;
    goto fail;
  }
  for (size_t i = 0; i < res->nthreads; i++) {
    rc = bf_store_intern_thread(s, sid, res->threads[i].native_tid, res->threads[i].name, &tids[i]);
    if (rc < 0) goto fail;
  }
  for (size_t i = 1; i < res->nfuncs; i++) {
    const bf_trc_func *f = &res->funcs[i];
    rc = bf_store_intern_function(s, f->file ? f->file : "<unknown>",
                                  f->qualname ? f->qualname : "<unknown>", f->firstlineno, &fids[i]);
    if (rc < 0) goto fail;
  }

  canon = calloc(res->nfuncs ? res->nfuncs : 1, sizeof *canon);
  agg = calloc(res->nfuncs ? res->nfuncs : 1, sizeof *agg);
  order = calloc(res->nfuncs ? res->nfuncs : 1, sizeof *order);
  if (!canon || !agg || !order) {
    rc = -ENOMEM;
    goto fail;
  }
  for (size_t i = 1; i < res->nfuncs; i++) order[i - 1] = (fid_idx){fids[i], i};
  if (res->nfuncs > 1) qsort(order, res->nfuncs - 1, sizeof *order, cmp_fid);
  for (size_t k = 0; k + 1 < res->nfuncs; k++) {
    size_t i = order[k].idx;
    canon[i] = (k > 0 && order[k - 1].fid == order[k].fid) ? canon[order[k - 1].idx] : i;
    bf_trc_func *a = &agg[canon[i]];
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

  /* Per-function durations of the kept records, grouped by function (counting sort). */
  offs = calloc(res->nfuncs + 1, sizeof *offs);
  durs = malloc((res->nrecs ? res->nrecs : 1) * sizeof *durs);
  if (!offs || !durs) {
    rc = -ENOMEM;
    goto fail;
  }
  for (size_t i = 0; i < res->nrecs; i++) offs[canon[res->recs[i].func] + 1]++;
  for (size_t i = 1; i <= res->nfuncs; i++) offs[i] += offs[i - 1];
  {
    size_t *fill = calloc(res->nfuncs ? res->nfuncs : 1, sizeof *fill);
    if (!fill) {
      rc = -ENOMEM;
      goto fail;
    }
    for (size_t i = 0; i < res->nrecs; i++) {
      size_t f = canon[res->recs[i].func];
      durs[offs[f] + fill[f]++] = res->recs[i].duration_ns;
    }
    free(fill);
  }

  for (size_t i = 1; i < res->nfuncs; i++) {
    if (canon[i] != i) continue;
    const bf_trc_func *f = &agg[i];
    if (f->calls == 0 && f->resumes == 0 && f->self_ns == 0) continue;
    bf_trace_func tf = {0};
    tf.function_id = fids[i];
    tf.calls = f->calls;
    tf.primitive_calls = f->primitive_calls;
    tf.resumes = f->resumes;
    tf.self_ns = f->self_ns;
    tf.total_ns = f->total_ns;
    tf.p50_ns = tf.p90_ns = tf.p99_ns = tf.max_ns = -1;
    size_t n = offs[i + 1] - offs[i];
    if (f->focus && (n > 0 || f->records_dropped > 0)) {
      int64_t *v = durs + offs[i];
      qsort(v, n, sizeof *v, cmp_i64);
      tf.p50_ns = bf_trc_percentile(v, n, 0.50);
      tf.p90_ns = bf_trc_percentile(v, n, 0.90);
      tf.p99_ns = bf_trc_percentile(v, n, 0.99);
      tf.max_ns = n ? v[n - 1] : -1;
    }
    tf.records_kept = f->records_kept;
    tf.records_dropped = f->records_dropped;
    if ((rc = bf_store_trace_func_put(s, sid, &tf)) < 0) goto fail;
  }
  ekeys = calloc(res->nedges ? res->nedges : 1, sizeof *ekeys);
  if (!ekeys) {
    rc = -ENOMEM;
    goto fail;
  }
  size_t ne = 0;
  for (size_t i = 1; i < res->nedges; i++) {
    const bf_trc_edge *e = &res->edges[i];
    if (e->calls == 0 && e->self_ns == 0 && e->total_ns == 0) continue;
    ekeys[ne++] = (edge_key){e->caller ? fids[e->caller] : 0, fids[e->callee], i};
  }
  qsort(ekeys, ne, sizeof *ekeys, cmp_edge);
  for (size_t k = 0; k < ne;) {
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
    if ((rc = bf_store_trace_edge_put(s, sid, &te)) < 0) goto fail;
  }
  for (size_t i = 0; i < res->nrecs; i++) {
    const bf_trc_rec *r = &res->recs[i];
    bf_call_record cr = {0};
    cr.function_id = fids[r->func];
    cr.thread_id = r->thread < res->nthreads ? tids[r->thread] : 0;
    cr.start_ns = r->start_ns;
    cr.duration_ns = r->duration_ns;
    cr.depth = 0;
    cr.parent_function_id = r->parent ? fids[r->parent] : 0;
    if ((rc = bf_store_call_record_add(s, sid, &cr)) < 0) goto fail;
  }
  info.status = meta->status ? meta->status : "complete";
  if ((rc = bf_store_session_update(s, &info)) < 0) goto fail;
  if ((rc = bf_store_commit(s)) < 0) goto fail;
  began = 0;
  *session_id = sid;
  rc = 0;
  goto out;
fail:
  set_err(errbuf, errlen, path, rc == -ENOMEM ? "out of memory" : bf_store_errmsg(s));
  if (began) bf_store_rollback(s);
out:
  free(fids);
  free(tids);
  free(canon);
  free(agg);
  free(order);
  free(ekeys);
  free(offs);
  free(durs);
  bf_store_close(s);
  return rc;
}
