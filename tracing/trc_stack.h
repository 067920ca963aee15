/* trc_stack.h — per-thread shadow stacks and the exact accounting they feed.
 *
 * A push enters a function (or resumes a generator), a pop leaves it; the
 * function and caller→callee edge tables get calls, primitive (non-recursive)
 * calls, self and total time and, in focus mode, a ring of per-call records.
 * Plain C: callers pass raw clock readings and a unique key per function.
 * Not thread-safe: the collector calls it with the GIL held.
 */
#ifndef BF_TRC_STACK_H
#define BF_TRC_STACK_H

#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "trc_int.h"
#include "trc_map.h"

#pragma GCC visibility push(hidden)

#define TRC_FR_C 0x1            /* C function frame */
#define TRC_FR_FOCUS_ROOT 0x2   /* outermost focused activation on this thread */
#define TRC_FR_RESUME 0x4       /* generator/coroutine resume, not a call */
#define TRC_FR_FOCUS_NESTED 0x8 /* focused function called inside a focus subtree: recorded too */

typedef struct trc_frame {
  const void *key;
  uint32_t func, edge;
  uint32_t flags;
  uint32_t last_callee, last_edge; /* the edge to the last function called from here */
  const void *callable;            /* C frames: the callable object CALL saw */
  int64_t t0, child_ns;
  int64_t start_raw; /* focus roots: start for the record (see trc_push) */
} trc_frame;

typedef struct trc_thread {
  struct trc_thread *next;
  uint32_t index;
  trc_frame *stack;
  size_t depth, cap;
  uint32_t *func_active; /* by function: activations on this thread's stack */
  size_t nfunc_active;
  uint32_t *edge_active; /* by edge: the same */
  size_t nedge_active;
  int64_t native_tid;
  char *name;
  int paused;
  uint32_t focus_depth;
  uint32_t root_last_callee, root_last_edge; /* edge cache of the thread root */
} trc_thread;

/* The tables every thread's pushes and pops add to. */
typedef struct trc_acct {
  bf_trc_func *funcs; /* [1..nfuncs); [0] is the thread root */
  size_t nfuncs, capfuncs;
  trc_map func_map;   /* key -> index into funcs */
  bf_trc_edge *edges; /* [1..nedges) */
  size_t nedges, capedges;
  trc_map edge_map;   /* caller << 32 | callee -> index into edges */
  bf_trc_rec *recs;   /* focus mode's ring of call records (rec_cap 0: none) */
  size_t rec_cap, rec_head, rec_count;
  int focus;          /* focus mode: only subtrees of functions with .focus count */
  int clock_cpu;      /* times are thread CPU time: records start on CLOCK_MONOTONIC */
  uint32_t focus_threads; /* threads currently inside a focus subtree */
  int64_t start_raw, start_mono_ns; /* origin of record starts (raw units; monotonic ns) */
  int64_t mismatches; /* frames popped out of order (resynchronised) */
  int error;          /* an allocation failed: results partial */
  /* called when the first thread enters a focus subtree (on=1) and when the
   * last one leaves (on=0); may be NULL */
  void (*on_focus)(void *ctx, int on);
  void *on_focus_ctx;
} trc_acct;

/* Empty the tables (function 0, the root, only) and the ring's contents;
 * keeps the ring's capacity, mode and hooks. Function refs are the caller's
 * to release first. Returns 0, or -ENOMEM with no function table. */
int trc_acct_reset(trc_acct *a);

/* Give the ring room for cap records (0: no ring), emptied. 0 or -ENOMEM. */
int trc_acct_ring(trc_acct *a, size_t cap);

/* Free everything the tables own. */
void trc_acct_free(trc_acct *a);

/* Function index of key, else 0. */
static inline uint32_t trc_func_find(const trc_acct *a, const void *key) {
  return trc_map_get(&a->func_map, (uint64_t)(uintptr_t)key);
}

/* Add function key (ref: the caller's handle that keeps key alive, stored
 * as is). Returns its index, or 0 when out of memory. */
uint32_t trc_func_add(trc_acct *a, const void *key, void *ref, int is_c);

/* Index of edge caller→callee, added if new; 0 when out of memory. */
uint32_t trc_edge(trc_acct *a, uint32_t caller, uint32_t callee);

/* A new thread's stack, or NULL. Caller links it and sets index/tid/name. */
trc_thread *trc_thread_alloc(void);

/* Free t (its stack, counters and name). Accepts NULL. */
void trc_thread_free(trc_thread *t);

/* Pop every frame of t as if all returned at now. */
void trc_thread_unwind(trc_acct *a, trc_thread *t, int64_t now);

/* Slow paths of the inline functions below. */
int trc_stack_grow(trc_thread *t);
int trc_grow_u32(uint32_t **arr, size_t *n, size_t need);
void trc_record(trc_acct *a, trc_thread *t, const trc_frame *fr, int64_t dur);
void trc_pop_focus_root(trc_acct *a, trc_thread *t, const trc_frame *fr, int64_t el)
    __attribute__((cold));
void trc_leave_resync(trc_acct *a, trc_thread *t, const void *key, int64_t now);

static inline int64_t trc_clock(clockid_t id) {
  struct timespec ts;
  clock_gettime(id, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* Enter function fi (key: its unique address) at now; flags TRC_FR_*. A call,
 * or a generator resume with TRC_FR_RESUME (counted in resumes, not calls). */
static inline __attribute__((always_inline)) void trc_push(trc_acct *a, trc_thread *t,
                                                           uint32_t fi, const void *key,
                                                           uint32_t flags, int64_t now) {
  if (!fi) return;
  if (a->focus && t->focus_depth == 0) {
    if (!a->funcs[fi].focus) return; /* outside every focus subtree */
    flags |= TRC_FR_FOCUS_ROOT;
  } else if (a->focus && a->funcs[fi].focus && !(flags & TRC_FR_RESUME)) {
    flags |= TRC_FR_FOCUS_NESTED;
  }
  if (t->depth == t->cap && trc_stack_grow(t) < 0) {
    a->error = 1;
    return;
  }
  /* the caller remembers its last callee's edge: a loop calling one function
   * finds the edge without a lookup */
  uint32_t *last_callee, *last_edge, caller;
  if (t->depth) {
    trc_frame *cf = &t->stack[t->depth - 1];
    caller = cf->func;
    last_callee = &cf->last_callee;
    last_edge = &cf->last_edge;
  } else {
    caller = 0;
    last_callee = &t->root_last_callee;
    last_edge = &t->root_last_edge;
  }
  uint32_t ei;
  if (*last_callee == fi) {
    ei = *last_edge;
  } else {
    ei = trc_edge(a, caller, fi);
    *last_callee = fi;
    *last_edge = ei;
  }
  if (!ei ||
      (fi >= t->nfunc_active && trc_grow_u32(&t->func_active, &t->nfunc_active, (size_t)fi + 1) < 0) ||
      (ei >= t->nedge_active && trc_grow_u32(&t->edge_active, &t->nedge_active, (size_t)ei + 1) < 0)) {
    a->error = 1;
    return;
  }
  bf_trc_func *f = &a->funcs[fi];
  if (flags & TRC_FR_RESUME) {
    f->resumes++;
  } else {
    bf_trc_edge *e = &a->edges[ei];
    f->calls++;
    e->calls++;
    if (t->func_active[fi] == 0) f->primitive_calls++;
    if (t->edge_active[ei] == 0) e->primitive_calls++;
  }
  t->func_active[fi]++;
  t->edge_active[ei]++;
  trc_frame *fr = &t->stack[t->depth++];
  fr->key = key;
  fr->func = fi;
  fr->edge = ei;
  fr->flags = flags;
  fr->last_callee = 0;
  fr->child_ns = 0;
  if (flags & TRC_FR_FOCUS_ROOT) {
    t->focus_depth++;
    /* cpu clock: records still start on the monotonic timeline */
    fr->start_raw = a->clock_cpu ? trc_clock(CLOCK_MONOTONIC) : now;
    if (a->focus_threads++ == 0 && a->on_focus) a->on_focus(a->on_focus_ctx, 1);
  } else if (flags & TRC_FR_FOCUS_NESTED) {
    fr->start_raw = a->clock_cpu ? trc_clock(CLOCK_MONOTONIC) : now;
  }
  fr->t0 = now;
}

/* Leave the top frame at now (the stack must not be empty). */
static inline __attribute__((always_inline)) void trc_pop(trc_acct *a, trc_thread *t,
                                                          int64_t now) {
  trc_frame *fr = &t->stack[--t->depth];
  int64_t el = now - fr->t0;
  if (el < 0) el = 0;
  int64_t self = el - fr->child_ns;
  bf_trc_func *f = &a->funcs[fr->func];
  bf_trc_edge *e = &a->edges[fr->edge];
  f->self_ns += self;
  e->self_ns += self;
  if (--t->func_active[fr->func] == 0) f->total_ns += el;
  if (--t->edge_active[fr->edge] == 0) e->total_ns += el;
  if (t->depth) t->stack[t->depth - 1].child_ns += el;
  if (fr->flags & TRC_FR_FOCUS_ROOT) trc_pop_focus_root(a, t, fr, el);
  else if (fr->flags & TRC_FR_FOCUS_NESTED) trc_record(a, t, fr, el);
}

/* A frame with key returned at now: it must be the top one; when it is not,
 * frames above it are popped and counted as mismatches. */
static inline __attribute__((always_inline)) void trc_leave(trc_acct *a, trc_thread *t,
                                                            const void *key, int64_t now) {
  if (t->depth == 0) return; /* entered before tracing started (or outside focus) */
  if (t->stack[t->depth - 1].key == key) {
    trc_pop(a, t, now);
    return;
  }
  trc_leave_resync(a, t, key, now);
}

#pragma GCC visibility pop

#endif
