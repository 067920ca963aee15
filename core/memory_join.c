/* memory_join.c — per-function memory of a sampled or a traced session in one
 * table (memory_join.h): the sampled side from bf_store_memory_foreach and
 * the stacks, the traced side from core/trace_memory.h and trace_functions. */
#include "memory_join.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "map.h"
#include "profile.h"
#include "store_int.h"
#include "trace_memory.h"
#include "vec.h"

typedef struct mj {
  bf_store *s;
  bf_mem_table *t;
  size_t cap;
  bf_map3 idx; /* function id -> row */
  /* sampled: per stack first (stack id -> index in st) */
  struct mj_stack { int64_t stack_id; double g, sh; int64_t ng; } *st;
  size_t nst, capst;
  bf_map3 sidx;
  double g2;
} mj;

static bf_mem_row *mj_row(mj *m, int64_t fid) {
  int64_t *k = bf_map3_get(&m->idx, fid, 0, 0);
  if (k) return &m->t->rows[*k];
  if (bf_vec_grow((void **)&m->t->rows, &m->cap, m->t->n + 1, sizeof *m->t->rows, 64)) return NULL;
  if (bf_map3_put(&m->idx, fid, 0, 0, (int64_t)m->t->n)) return NULL;
  bf_mem_row *r = &m->t->rows[m->t->n++];
  memset(r, 0, sizeof *r);
  r->function_id = fid;
  return r;
}

static int mj_sample(void *ud, const bf_memory_sample *smp) {
  mj *m = ud;
  int64_t *k = bf_map3_get(&m->sidx, smp->stack_id, 0, 0);
  if (!k) {
    if (bf_vec_grow((void **)&m->st, &m->capst, m->nst + 1, sizeof *m->st, 256)) return -ENOMEM;
    if (bf_map3_put(&m->sidx, smp->stack_id, 0, 0, (int64_t)m->nst)) return -ENOMEM;
    m->st[m->nst] = (struct mj_stack){.stack_id = smp->stack_id};
    k = bf_map3_get(&m->sidx, smp->stack_id, 0, 0);
    m->nst++;
  }
  struct mj_stack *a = &m->st[*k];
  double d = (double)smp->rss_delta;
  if (d > 0) {
    a->g += d;
    a->ng++;
    m->t->growth_bytes += d;
    m->g2 += d * d;
  } else {
    a->sh -= d; /* a shrink is never growth */
    m->t->shrink_bytes -= d;
  }
  m->t->changes++;
  return 0;
}

/* Charge each stack's growth to its functions (self: innermost; total: once each). */
static int mj_spread(mj *m) {
  int64_t *fids = NULL;
  size_t fcap = 0;
  int rc = 0;
  for (size_t i = 0; i < m->nst && !rc; i++) {
    const struct mj_stack *a = &m->st[i];
    if (!a->stack_id) continue;
    int64_t *frames = NULL;
    size_t nf = 0;
    if ((rc = bf_store_stack_frames(m->s, a->stack_id, &frames, &nf))) break;
    if (bf_vec_grow((void **)&fids, &fcap, nf + 1, sizeof *fids, 64)) rc = -ENOMEM;
    for (size_t j = 0; j < nf && !rc; j++) {
      int64_t line;
      rc = bf_store_frame_get(m->s, frames[j], &fids[j], &line);
    }
    free(frames);
    for (size_t j = 0; j < nf && !rc; j++) {
      int dup = 0;
      for (size_t k = 0; k < j && !dup; k++) dup = fids[k] == fids[j];
      if (dup) continue;
      bf_mem_row *r = mj_row(m, fids[j]);
      if (!r) {
        rc = -ENOMEM;
        break;
      }
      r->total_growth_bytes += a->g;
      r->total_shrink_bytes += a->sh;
    }
    if (!rc && nf) {
      bf_mem_row *r = mj_row(m, fids[nf - 1]);
      if (!r) {
        rc = -ENOMEM;
      } else {
        r->growth_bytes += a->g;
        r->shrink_bytes += a->sh;
        r->growth_changes += a->ng;
      }
    }
  }
  free(fids);
  return rc;
}

static int by_growth(const void *a, const void *b) {
  const bf_mem_row *x = a, *y = b;
  if (x->growth_bytes != y->growth_bytes) return x->growth_bytes < y->growth_bytes ? 1 : -1;
  if (x->total_growth_bytes != y->total_growth_bytes) return x->total_growth_bytes < y->total_growth_bytes ? 1 : -1;
  return (x->function_id > y->function_id) - (x->function_id < y->function_id);
}

static int by_alloc(const void *a, const void *b) {
  const bf_mem_row *x = a, *y = b;
  if (x->alloc_bytes != y->alloc_bytes) return x->alloc_bytes < y->alloc_bytes ? 1 : -1;
  return (x->function_id > y->function_id) - (x->function_id < y->function_id);
}

static int mj_sampled(mj *m, int64_t sid, const bf_sample_filter *f) {
  int rc = bf_store_memory_foreach(m->s, sid, f, mj_sample, m);
  if (!rc) rc = mj_spread(m);
  if (rc) return rc;
  bf_mem_table *t = m->t;
  t->n_eff = m->g2 > 0 ? t->growth_bytes * t->growth_bytes / m->g2 : 0;
  for (size_t i = 0; i < t->n; i++) {
    bf_mem_row *r = &t->rows[i];
    r->growth_share = t->growth_bytes > 0 ? r->growth_bytes / t->growth_bytes : 0;
    r->total_growth_share = t->growth_bytes > 0 ? r->total_growth_bytes / t->growth_bytes : 0;
    if (t->n_eff > 0) bf_wilson(r->growth_share * t->n_eff, t->n_eff, &r->growth_lo, &r->growth_hi);
  }
  qsort(t->rows, t->n, sizeof *t->rows, by_growth);
  return 0;
}

static int mj_traced_row(void *ud, const bf_trace_memory *tm) {
  mj *m = ud;
  bf_mem_row *r = mj_row(m, tm->function_id);
  if (!r) return -ENOMEM;
  r->allocs = tm->allocs;
  r->alloc_bytes = tm->alloc_bytes;
  r->frees = tm->frees;
  r->freed_bytes = tm->freed_bytes;
  r->live_count = tm->live_count;
  r->live_bytes = tm->live_bytes;
  m->t->alloc_bytes += tm->alloc_bytes;
  if (tm->live_bytes > 0) m->t->live_bytes += tm->live_bytes;
  return 0;
}

static int mj_calls(void *ud, const bf_trace_func *tf) {
  mj *m = ud;
  int64_t *k = bf_map3_get(&m->idx, tf->function_id, 0, 0);
  if (k) m->t->rows[*k].calls = tf->calls + tf->resumes;
  return 0;
}

static int mj_traced(mj *m, int64_t sid) {
  int rc = bf_store_trace_memory_foreach(m->s, sid, mj_traced_row, m);
  if (!rc) rc = bf_store_trace_funcs_foreach(m->s, sid, mj_calls, m);
  if (rc) return rc;
  bf_mem_table *t = m->t;
  for (size_t i = 0; i < t->n; i++) {
    bf_mem_row *r = &t->rows[i];
    r->alloc_share = t->alloc_bytes > 0 ? (double)r->alloc_bytes / (double)t->alloc_bytes : 0;
    r->live_share = t->live_bytes > 0 && r->live_bytes > 0 ? (double)r->live_bytes / (double)t->live_bytes : 0;
  }
  qsort(t->rows, t->n, sizeof *t->rows, by_alloc);
  return 0;
}

int bf_mem_table_load(bf_store *s, int64_t session_id, const bf_sample_filter *f, bf_mem_table **out) {
  *out = NULL;
  int traced = bf_store_trace_memory_has(s, session_id);
  if (traced < 0) return traced;
  int64_t rows = 0, pts = 0;
  int rc = traced ? 0 : bf_store_memory_count(s, session_id, &rows, &pts);
  if (rc) return rc;
  if (!traced && rows == 0)
    return bf_store_fail(s, -ENODATA,
                         "session %lld has no memory data: record it with `bifocal record --memory` or "
                         "trace it with `bifocal trace --memory`",
                         (long long)session_id);
  mj m = {.s = s};
  m.t = calloc(1, sizeof *m.t);
  if (!m.t) return bf_store_fail(s, -ENOMEM, "out of memory");
  m.t->traced = traced;
  rc = traced ? mj_traced(&m, session_id) : mj_sampled(&m, session_id, f);
  for (size_t i = 0; rc == 0 && i < m.t->n; i++) {
    bf_mem_row *r = &m.t->rows[i];
    if (!r->function_id) continue;
    bf_function_ref fr = {0};
    if ((rc = bf_store_function_get(s, r->function_id, &fr))) break;
    r->file = fr.file;
    r->qualname = fr.qualname;
    r->firstlineno = fr.firstlineno;
  }
  free(m.st);
  bf_map3_free(&m.idx);
  bf_map3_free(&m.sidx);
  if (rc) {
    bf_mem_table_free(m.t);
    return rc == -ENOMEM ? bf_store_fail(s, rc, "out of memory") : rc;
  }
  *out = m.t;
  return 0;
}

void bf_mem_table_free(bf_mem_table *t) {
  if (!t) return;
  free(t->rows);
  free(t);
}
