/* query.c — the query layer: session kind/clock as enums, a streaming
 * sample cursor that holds one stored chunk at a time, the one aggregation
 * of samples by (thread, stack), and traced rows. */
#include "query.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "store_int.h"
#include "vec.h"

bf_q_kind bf_q_kind_of(const bf_session_info *info) {
  if (!info || !info->kind) return BF_Q_UNKNOWN_KIND;
  if (strcmp(info->kind, "sampled") == 0) return BF_Q_SAMPLED;
  if (strcmp(info->kind, "traced") == 0) return BF_Q_TRACED;
  if (strcmp(info->kind, "imported") == 0) return BF_Q_IMPORTED;
  return BF_Q_UNKNOWN_KIND;
}

bf_q_clock bf_q_clock_of(const bf_session_info *info) {
  return info && info->clock && strcmp(info->clock, "cpu") == 0 ? BF_Q_CPU : BF_Q_WALL;
}

int bf_q_by_weight(const bf_session_info *info) {
  return bf_q_clock_of(info) == BF_Q_CPU || bf_q_kind_of(info) == BF_Q_IMPORTED;
}

/* ---- timeline ---------------------------------------------------------------- */

struct bf_q_cursor {
  bf_store *s;
  int64_t session_id;
  bf_store_chunks *chunks;
  bf_sample_filter f;
  int has_f;
  bf_sample *buf; /* the current chunk's samples that pass the filter */
  size_t n, cap, i;
  int done;
};

static int buffer_sample(void *ud, const bf_sample *smp) {
  bf_q_cursor *c = ud;
  if (bf_vec_grow((void **)&c->buf, &c->cap, c->n + 1, sizeof *c->buf, 4096)) return -ENOMEM;
  c->buf[c->n++] = *smp;
  return 0;
}

int bf_q_timeline_open(bf_store *s, int64_t session_id, const bf_sample_filter *f, bf_q_cursor **out) {
  *out = NULL;
  int rc = bf_store_flush(s);
  if (rc) return rc;
  bf_q_cursor *c = calloc(1, sizeof *c);
  if (!c) return bf_store_fail(s, -ENOMEM, "out of memory");
  c->s = s;
  c->session_id = session_id;
  if (f) {
    c->f = *f;
    c->has_f = 1;
  }
  if ((rc = bf_store_chunks_open(s, session_id, f, &c->chunks))) {
    free(c);
    return rc;
  }
  *out = c;
  return 0;
}

int bf_q_timeline_next(bf_q_cursor *c, const bf_sample **smp) {
  while (c->i >= c->n) {
    if (c->done) return 0;
    c->n = c->i = 0;
    int64_t tid, first, last;
    const uint8_t *d;
    size_t len;
    int rc = bf_store_chunks_next(c->chunks, &tid, &first, &last, &d, &len);
    if (rc == 0) {
      c->done = 1;
      return 0;
    }
    if (rc < 0) return rc;
    if (c->has_f && c->f.until_ns > 0 && first >= c->f.until_ns) continue;
    if (c->has_f && c->f.since_ns && last < c->f.since_ns) continue;
    rc = bf_chunk_decode(d, len, tid, first, c->has_f ? &c->f : NULL, buffer_sample, c);
    if (rc == -EBADMSG)
      return bf_store_fail(c->s, -EBADMSG, "database '%s': corrupt sample chunk in session %lld", bf_store_path(c->s),
                           (long long)c->session_id);
    if (rc == -ENOMEM) return bf_store_fail(c->s, rc, "out of memory");
    if (rc) return rc;
  }
  *smp = &c->buf[c->i++];
  return 1;
}

void bf_q_timeline_close(bf_q_cursor *c) {
  if (!c) return;
  bf_store_chunks_close(c->chunks);
  free(c->buf);
  free(c);
}

int bf_q_timeline_foreach(bf_store *s, int64_t session_id, const bf_sample_filter *f, bf_sample_fn fn, void *ud) {
  return bf_store_samples_foreach(s, session_id, f, fn, ud);
}

/* ---- stacks ----------------------------------------------------------------- */

typedef struct sagg {
  bf_map3 idx; /* (thread, stack, leaf opcode + 1) → row */
  bf_q_stacks *q;
  size_t cap;
  int by_opcode;
} sagg;

static int sagg_add(void *ud, const bf_sample *smp) {
  sagg *a = ud;
  bf_q_stacks *q = a->q;
  int64_t c = smp->count ? smp->count : 1;
  q->total_count += c;
  q->total_weight += (double)smp->weight;
  int64_t stack = smp->stack_id > 0 ? smp->stack_id : 0;
  int op = a->by_opcode && stack ? BF_SAMPLE_OPCODE_OF(smp->flags) + 1 : 0;
  int64_t *hit = bf_map3_get(&a->idx, smp->thread_id, stack, op);
  if (hit) {
    q->v[*hit].count += c;
    q->v[*hit].weight += (double)smp->weight;
    return 0;
  }
  if (bf_vec_grow((void **)&q->v, &a->cap, q->n + 1, sizeof *q->v, 256)) return -ENOMEM;
  q->v[q->n] = (bf_q_stack){smp->thread_id, stack, c, (double)smp->weight, op};
  if (bf_map3_put(&a->idx, smp->thread_id, stack, op, (int64_t)q->n)) return -ENOMEM;
  q->n++;
  return 0;
}

int bf_q_stacks_load(bf_store *s, int64_t session_id, const bf_sample_filter *f, bf_q_stacks **out) {
  *out = NULL;
  sagg a = {.by_opcode = f && f->by_opcode};
  a.q = calloc(1, sizeof *a.q);
  if (!a.q) return bf_store_fail(s, -ENOMEM, "out of memory");
  int rc = bf_store_samples_foreach(s, session_id, f, sagg_add, &a);
  bf_map3_free(&a.idx);
  if (rc) {
    if (rc == -ENOMEM) bf_store_fail(s, rc, "out of memory");
    bf_q_stacks_free(a.q);
    return rc;
  }
  *out = a.q;
  return 0;
}

void bf_q_stacks_free(bf_q_stacks *q) {
  if (!q) return;
  free(q->v);
  free(q);
}

int bf_q_stacks_merge_threads(bf_q_stacks *q) {
  bf_map3 idx = {0};
  bf_q_stack *nv = malloc((q->n ? q->n : 1) * sizeof *nv);
  if (!nv) return -ENOMEM;
  size_t n = 0;
  for (size_t i = 0; i < q->n; i++) {
    int64_t *hit = bf_map3_get(&idx, q->v[i].stack_id, q->v[i].leaf_op, 0);
    if (hit) {
      nv[*hit].count += q->v[i].count;
      nv[*hit].weight += q->v[i].weight;
      continue;
    }
    if (bf_map3_put(&idx, q->v[i].stack_id, q->v[i].leaf_op, 0, (int64_t)n)) {
      bf_map3_free(&idx);
      free(nv);
      return -ENOMEM;
    }
    nv[n++] = (bf_q_stack){0, q->v[i].stack_id, q->v[i].count, q->v[i].weight, q->v[i].leaf_op};
  }
  bf_map3_free(&idx);
  free(q->v);
  q->v = nv;
  q->n = n;
  return 0;
}

/* ---- frames of a stack ---------------------------------------------------------- */

struct bf_q_frames {
  bf_map3 idx; /* stack id → offset into fids/lines, n in the key's second slot lookup */
  int64_t *fids, *lines;
  size_t n, cap;
};

int bf_q_frames_get(bf_store *s, bf_q_frames **cache, int64_t stack_id, const int64_t **fids,
                    const int64_t **lines, size_t *n) {
  if (!*cache && !(*cache = calloc(1, sizeof **cache))) return bf_store_fail(s, -ENOMEM, "out of memory");
  bf_q_frames *c = *cache;
  *n = 0;
  *fids = c->fids;
  *lines = c->lines;
  if (stack_id <= 0) return 0;
  int64_t *hit = bf_map3_get(&c->idx, stack_id, 0, 0);
  if (hit) {
    int64_t *len = bf_map3_get(&c->idx, stack_id, 1, 0);
    *fids = c->fids + *hit;
    *lines = c->lines + *hit;
    *n = (size_t)*len;
    return 0;
  }
  int64_t *frames = NULL;
  size_t nf = 0;
  int rc = bf_store_stack_frames(s, stack_id, &frames, &nf);
  if (rc) return rc;
  size_t fids_cap = c->cap; /* both arrays share c->cap */
  if (bf_vec_grow((void **)&c->fids, &fids_cap, c->n + nf, sizeof *c->fids, 4096) ||
      bf_vec_grow((void **)&c->lines, &c->cap, c->n + nf, sizeof *c->lines, 4096)) {
    free(frames);
    return bf_store_fail(s, -ENOMEM, "out of memory");
  }
  for (size_t j = 0; j < nf; j++)
    if ((rc = bf_store_frame_get(s, frames[j], &c->fids[c->n + j], &c->lines[c->n + j]))) {
      free(frames);
      return rc;
    }
  free(frames);
  if (bf_map3_put(&c->idx, stack_id, 0, 0, (int64_t)c->n) || bf_map3_put(&c->idx, stack_id, 1, 0, (int64_t)nf))
    return bf_store_fail(s, -ENOMEM, "out of memory");
  *fids = c->fids + c->n;
  *lines = c->lines + c->n;
  *n = nf;
  c->n += nf;
  return 0;
}

void bf_q_frames_free(bf_q_frames *c) {
  if (!c) return;
  bf_map3_free(&c->idx);
  free(c->fids);
  free(c->lines);
  free(c);
}

/* ---- traced rows --------------------------------------------------------------- */

int bf_q_trace_funcs(bf_store *s, int64_t session_id, bf_trace_func_fn fn, void *ud) {
  return bf_store_trace_funcs_foreach(s, session_id, fn, ud);
}

int bf_q_trace_edges(bf_store *s, int64_t session_id, bf_trace_edge_fn fn, void *ud) {
  return bf_store_trace_edges_foreach(s, session_id, fn, ud);
}

int bf_q_call_records(bf_store *s, int64_t session_id, bf_call_record_fn fn, void *ud) {
  return bf_store_call_records_foreach(s, session_id, fn, ud);
}

static int add_rec(void *ud, const bf_call_record *r) {
  bf_q_records *a = ud;
  if (a->f) {
    if (a->f->thread_id && r->thread_id != a->f->thread_id) return 0;
    if (r->start_ns < a->f->since_ns) return 0;
    if (a->f->until_ns > 0 && r->start_ns >= a->f->until_ns) return 0;
  }
  if (bf_vec_grow((void **)&a->v, &a->cap, a->n + 1, sizeof *a->v, 1024)) return -ENOMEM;
  a->v[a->n++] = *r;
  return 0;
}

static int cmp_rec(const void *a, const void *b) {
  const bf_call_record *x = a, *y = b;
  if (x->thread_id != y->thread_id) return x->thread_id < y->thread_id ? -1 : 1;
  if (x->start_ns != y->start_ns) return x->start_ns < y->start_ns ? -1 : 1;
  /* enclosing call first when two start together */
  if (x->duration_ns != y->duration_ns) return x->duration_ns > y->duration_ns ? -1 : 1;
  return (x->depth > y->depth) - (x->depth < y->depth);
}

int bf_q_call_records_sorted(bf_store *s, int64_t session_id, const bf_sample_filter *f,
                             bf_q_records *out) {
  bf_q_records a = {.f = f};
  int rc = bf_store_call_records_foreach(s, session_id, add_rec, &a);
  if (rc) {
    free(a.v);
    return rc;
  }
  if (a.n) qsort(a.v, a.n, sizeof *a.v, cmp_rec);
  *out = a;
  return 0;
}
