/* profile.c — per-function figures of a session: sample aggregation by
 * distinct stack (so a million samples cost one pass plus one walk per
 * distinct stack), Wilson intervals, and traced figures. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "profile.h"
#include "query.h"
#include "store_int.h"
#include "vec.h"

void bf_wilson(double k, double n, double *lo, double *hi) {
  if (n <= 0) {
    *lo = 0;
    *hi = 1;
    return;
  }
  const double z = 1.959963984540054;
  double p = k / n;
  if (p < 0) p = 0;
  if (p > 1) p = 1;
  double z2 = z * z;
  double den = 1 + z2 / n;
  double centre = (p + z2 / (2 * n)) / den;
  double half = z * sqrt(p * (1 - p) / n + z2 / (4 * n * n)) / den;
  *lo = (k <= 0 || centre - half < 0) ? 0 : centre - half;
  *hi = (k >= n || centre + half > 1) ? 1 : centre + half;
}

typedef struct rowset {
  bf_map3 idx; /* function id → row index */
  bf_func_row *rows;
  size_t n, cap;
  int64_t *seen; /* per row: last stack index that counted it (dedupe recursion) */
} rowset;

static int row_for(bf_store *s, rowset *rs, int64_t fid, size_t *out) {
  int64_t *hit = bf_map3_get(&rs->idx, fid, 0, 0);
  if (hit) {
    *out = (size_t)*hit;
    return 0;
  }
  bf_function_ref ref;
  int rc = bf_store_function_get(s, fid, &ref);
  if (rc) return rc;
  size_t rows_cap = rs->cap; /* both arrays share rs->cap */
  if (bf_vec_grow((void **)&rs->rows, &rows_cap, rs->n + 1, sizeof *rs->rows, 128) ||
      bf_vec_grow((void **)&rs->seen, &rs->cap, rs->n + 1, sizeof *rs->seen, 128))
    return -ENOMEM;
  size_t i = rs->n++;
  bf_func_row *r = &rs->rows[i];
  memset(r, 0, sizeof *r);
  r->function_id = fid;
  r->file = ref.file;
  r->qualname = ref.qualname;
  r->firstlineno = ref.firstlineno;
  r->calls = r->primitive_calls = r->resumes = r->self_ns = r->total_ns = -1;
  r->p50_ns = r->p90_ns = r->p99_ns = r->max_ns = -1;
  r->records_kept = r->records_dropped = -1;
  rs->seen[i] = -1;
  if (bf_map3_put(&rs->idx, fid, 0, 0, (int64_t)i)) return -ENOMEM;
  *out = i;
  return 0;
}

static int cmp_self(const void *a, const void *b) {
  const bf_func_row *x = a, *y = b;
  double dx = x->self_share, dy = y->self_share;
  if (dx != dy) return dx < dy ? 1 : -1;
  if (x->total_share != y->total_share) return x->total_share < y->total_share ? 1 : -1;
  return x->function_id < y->function_id ? -1 : x->function_id > y->function_id;
}

static int cmp_total(const void *a, const void *b) {
  const bf_func_row *x = a, *y = b;
  if (x->total_share != y->total_share) return x->total_share < y->total_share ? 1 : -1;
  if (x->self_share != y->self_share) return x->self_share < y->self_share ? 1 : -1;
  return x->function_id < y->function_id ? -1 : x->function_id > y->function_id;
}

typedef struct trace_ud {
  bf_store *s;
  rowset *rs;
  int err;
} trace_ud;

static int trace_row(void *ud, const bf_trace_func *tf) {
  trace_ud *t = ud;
  size_t i;
  int rc = row_for(t->s, t->rs, tf->function_id, &i);
  if (rc) return rc;
  bf_func_row *r = &t->rs->rows[i];
  r->calls = tf->calls;
  r->primitive_calls = tf->primitive_calls;
  r->resumes = tf->resumes;
  r->self_ns = tf->self_ns;
  r->total_ns = tf->total_ns;
  r->p50_ns = tf->p50_ns;
  r->p90_ns = tf->p90_ns;
  r->p99_ns = tf->p99_ns;
  r->max_ns = tf->max_ns;
  r->records_kept = tf->records_kept;
  r->records_dropped = tf->records_dropped;
  return 0;
}

static int root_total(void *ud, const bf_trace_edge *te) {
  int64_t *sum = ud;
  if (te->caller_function_id == 0) *sum += te->total_ns;
  return 0;
}

/* Traced figures: shares of the root calls' total time (or of the summed self
 * time when that is larger); no samples, so no intervals. */
static int profile_traced(bf_store *s, int64_t session_id, rowset *rs, bf_profile *p) {
  int rc;
  trace_ud t = {s, rs, 0};
  if ((rc = bf_q_trace_funcs(s, session_id, trace_row, &t))) return rc;
  int64_t roots = 0;
  if ((rc = bf_q_trace_edges(s, session_id, root_total, &roots))) return rc;
  double self_sum = 0;
  for (size_t i = 0; i < rs->n; i++) self_sum += rs->rows[i].self_ns > 0 ? (double)rs->rows[i].self_ns : 0;
  double denom = roots > 0 ? (double)roots : self_sum;
  if (self_sum > denom) denom = self_sum;
  for (size_t i = 0; i < rs->n; i++) {
    bf_func_row *r = &rs->rows[i];
    r->self_samples = r->total_samples = -1;
    r->self_share = denom > 0 ? (double)r->self_ns / denom : 0;
    r->total_share = denom > 0 ? (double)r->total_ns / denom : 0;
    if (r->total_share > 1) r->total_share = 1;
    r->self_lo = r->self_hi = r->self_share;
    r->total_lo = r->total_hi = r->total_share;
  }
  p->traced = 1;
  p->total_ns = (int64_t)denom;
  p->records_kept = p->records_dropped = 0;
  for (size_t i = 0; i < rs->n; i++) {
    if (rs->rows[i].records_kept > 0) p->records_kept += rs->rows[i].records_kept;
    if (rs->rows[i].records_dropped > 0) p->records_dropped += rs->rows[i].records_dropped;
  }
  return 0;
}

/* Counts one distinct stack (index k, frames[0..nf), leaf last) into its
 * functions' rows: total once per stack even under recursion, self at the leaf. */
static int profile_add_stack(bf_store *s, rowset *rs, const bf_q_stack *acc, size_t k, double v,
                             const int64_t *frames, size_t nf) {
  int rc;
  for (size_t j = 0; j < nf; j++) {
    int64_t fid, line;
    if ((rc = bf_store_frame_get(s, frames[j], &fid, &line))) return rc;
    size_t ri;
    if ((rc = row_for(s, rs, fid, &ri))) return rc;
    bf_func_row *r = &rs->rows[ri];
    if (rs->seen[ri] != (int64_t)k) {
      rs->seen[ri] = (int64_t)k;
      r->total_samples += acc->count;
      r->total_weight += v;
    }
    if (j == nf - 1) {
      r->self_samples += acc->count;
      r->self_weight += v;
    }
  }
  return 0;
}

/* Sampled figures: samples (or weight) per function over the distinct
 * stacks of the session, within filter f, with Wilson intervals. */
static int profile_sampled(bf_store *s, int64_t session_id, const bf_sample_filter *f, int by_weight, rowset *rs,
                           bf_profile *p) {
  bf_q_stacks *q = NULL;
  int rc;
  if ((rc = bf_q_stacks_load(s, session_id, f, &q))) goto out;
  if (by_weight && q->total_weight <= 0) by_weight = 0;
  double denom = by_weight ? q->total_weight : (double)q->total_count;
  int64_t *fids = NULL;
  size_t fcap = 0;
  for (size_t k = 0; k < q->n; k++) {
    const bf_q_stack *acc = &q->v[k];
    if (acc->stack_id <= 0) continue;
    int64_t *frames = NULL;
    size_t nf = 0;
    if ((rc = bf_store_stack_frames(s, acc->stack_id, &frames, &nf))) {
      free(fids);
      goto out;
    }
    if (nf > fcap) {
      int64_t *nfids = realloc(fids, nf * sizeof *nfids);
      if (!nfids) {
        free(frames);
        free(fids);
        rc = -ENOMEM;
        goto out;
      }
      fids = nfids;
      fcap = nf;
    }
    double v = by_weight ? acc->weight : (double)acc->count;
    rc = profile_add_stack(s, rs, acc, k, v, frames, nf);
    free(frames);
    if (rc) {
      free(fids);
      goto out;
    }
  }
  free(fids);
  double n = (double)q->total_count;
  for (size_t i = 0; i < rs->n; i++) {
    bf_func_row *r = &rs->rows[i];
    r->self_share = denom > 0 ? r->self_weight / denom : 0;
    r->total_share = denom > 0 ? r->total_weight / denom : 0;
    bf_wilson(r->self_share * n, n, &r->self_lo, &r->self_hi);
    bf_wilson(r->total_share * n, n, &r->total_lo, &r->total_hi);
  }
  p->total_samples = q->total_count;
  p->total_weight = by_weight ? q->total_weight : (double)q->total_count;
out:
  bf_q_stacks_free(q);
  return rc;
}

int bf_profile_functions(bf_store *s, int64_t session_id, const bf_sample_filter *f, bf_sort sort,
                         bf_profile **out) {
  *out = NULL;
  bf_session_info *info = NULL;
  int rc = bf_store_session_get(s, session_id, &info);
  if (rc) return rc;
  bf_profile *p = calloc(1, sizeof *p);
  rowset rs = {0};
  if (!p) {
    rc = -ENOMEM;
    goto out;
  }
  int traced = bf_q_kind_of(info) == BF_Q_TRACED;
  int by_weight = bf_q_by_weight(info);
  p->records_kept = p->records_dropped = -1;
  if (traced)
    rc = profile_traced(s, session_id, &rs, p);
  else
    rc = profile_sampled(s, session_id, f, by_weight, &rs, p);
  if (rc) goto out;
  if (!info->mode || strcmp(info->mode, "focus") != 0) p->records_kept = p->records_dropped = -1;
  if (rs.n) qsort(rs.rows, rs.n, sizeof *rs.rows, sort == BF_SORT_TOTAL ? cmp_total : cmp_self);
  p->rows = rs.rows;
  p->n = rs.n;
  rs.rows = NULL;
  *out = p;
  p = NULL;
out:
  if (rc == -ENOMEM) bf_store_fail(s, rc, "out of memory");
  bf_profile_free(p);
  free(rs.rows);
  free(rs.seen);
  bf_map3_free(&rs.idx);
  bf_session_info_free(info);
  return rc;
}

void bf_profile_free(bf_profile *p) {
  if (!p) return;
  free(p->rows);
  free(p);
}
