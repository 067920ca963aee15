/* memory_join.h — memory per function through either lens, in one shape, for
 * the join (Lua s:memory{}, scripts/memory.lua, calibrate --memory).
 *
 * Sampled (record --memory): resident growth and shrink charged to the
 * function that ran (self: innermost frame; total: anywhere on the stack,
 * once per stack), growth kept apart from shrink, the share of all growth
 * with a 95% interval (Wilson on the effective number of growth changes, as
 * view_memory.c shows it). Traced (trace --memory): exact allocations, frees
 * and live bytes (core/trace_memory.h) with the calls of the function, so
 * bytes per call. Neither prints; errors on the store handle.
 */
#ifndef BF_MEMORY_JOIN_H
#define BF_MEMORY_JOIN_H

#include <stddef.h>
#include <stdint.h>

#include "store.h"

typedef struct bf_mem_row {
  int64_t function_id;       /* 0 (traced): allocations with no Python function on the stack */
  const char *file, *qualname; /* borrowed from the store's cache, valid until close */
  int64_t firstlineno;
  /* sampled */
  double growth_bytes, shrink_bytes;             /* self */
  double total_growth_bytes, total_shrink_bytes; /* anywhere on the stack */
  int64_t growth_changes;                        /* self rows that grew */
  double growth_share, growth_lo, growth_hi;     /* self growth / all growth, 95% interval */
  double total_growth_share;
  /* traced */
  int64_t allocs, alloc_bytes, frees, freed_bytes, live_count, live_bytes;
  int64_t calls;                                 /* calls + resumes of the function */
  double alloc_share, live_share; /* of all allocated bytes; of all positive live bytes */
} bf_mem_row;

typedef struct bf_mem_table {
  int traced;              /* 1: from trace --memory, 0: from record --memory */
  bf_mem_row *rows;        /* sampled: by self growth desc; traced: by alloc bytes desc */
  size_t n;
  double growth_bytes, shrink_bytes; /* sampled totals */
  int64_t changes;                    /* sampled rows read */
  double n_eff;                       /* effective number of growth changes */
  int64_t alloc_bytes, live_bytes;    /* traced totals (live: sum of positive live bytes) */
} bf_mem_table;

/* Per-function memory of session_id, whichever lens made it (f: for sampled
 * sessions, as bf_store_memory_foreach; NULL = all). -ENODATA (message on the
 * handle) when the session has no memory rows: not recorded/traced with
 * --memory. OUT: *out (free with bf_mem_table_free). */
int bf_mem_table_load(bf_store *s, int64_t session_id, const bf_sample_filter *f, bf_mem_table **out);
void bf_mem_table_free(bf_mem_table *t);

#endif
