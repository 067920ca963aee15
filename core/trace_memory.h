/* trace_memory.h — the store's rows of `trace --memory`: exact allocations
 * per function, per caller→callee edge, and the largest blocks still live
 * when tracing stopped, with their stacks (tables trace_memory,
 * trace_memory_edges, trace_memory_top). Part of the store module (store.h);
 * errors are on the handle, as there.
 *
 * Attribution: an allocation is charged to the innermost Python function on
 * the allocating thread's shadow stack (C functions are transparent, as for
 * tracemalloc and the sampler); a free is charged to the function that made
 * the block, so live = allocated - freed per row. A realloc is a free of the
 * old block and an allocation of the new one.
 */
#ifndef BF_TRACE_MEMORY_H
#define BF_TRACE_MEMORY_H

#include <stddef.h>
#include <stdint.h>

#include "store.h"

typedef struct bf_trace_memory {
  int64_t function_id;       /* 0 = no Python function on the stack (thread root) */
  int64_t caller_function_id; /* edges only: 0 = thread root */
  int64_t allocs, alloc_bytes; /* allocations made (realloc counts as one) */
  int64_t frees, freed_bytes;  /* of those, freed before tracing stopped */
  int64_t live_count, live_bytes; /* still live when tracing stopped */
} bf_trace_memory;

/* One of the largest blocks live at the end: rank 1 is the largest. stack
 * holds function ids, outermost first (n 0: not captured: the block was
 * smaller than the stack threshold or the stack table was full). */
typedef struct bf_trace_memory_top {
  int64_t rank, size_bytes, function_id;
  const int64_t *stack; /* borrowed: by the caller for put, until fn returns for foreach */
  size_t nstack;
} bf_trace_memory_top;

/* Write one row (inside the writer's transaction). 0 or negative errno. */
int bf_store_trace_memory_put(bf_store *s, int64_t session_id, const bf_trace_memory *m);
int bf_store_trace_memory_edge_put(bf_store *s, int64_t session_id, const bf_trace_memory *m);
int bf_store_trace_memory_top_put(bf_store *s, int64_t session_id, const bf_trace_memory_top *t);

/* Visit rows of session_id (functions by function id, edges by caller then
 * callee, top by rank); fn returning nonzero stops and is returned. Reading
 * stops with -EINVAL on a stack text that is not a list of ids. */
typedef int (*bf_trace_memory_fn)(void *ud, const bf_trace_memory *m);
typedef int (*bf_trace_memory_top_fn)(void *ud, const bf_trace_memory_top *t);
int bf_store_trace_memory_foreach(bf_store *s, int64_t session_id, bf_trace_memory_fn fn, void *ud);
int bf_store_trace_memory_edges_foreach(bf_store *s, int64_t session_id, bf_trace_memory_fn fn, void *ud);
int bf_store_trace_memory_top_foreach(bf_store *s, int64_t session_id, bf_trace_memory_top_fn fn,
                                      void *ud);

/* 1 when session_id has traced-memory rows, 0 when not, negative errno. */
int bf_store_trace_memory_has(bf_store *s, int64_t session_id);

#endif
