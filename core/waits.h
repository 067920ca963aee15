/* waits.h — the kernel lens read back: how a session's wall time splits
 * into on a CPU, waiting for one, and blocked by class (network, disk, lock,
 * GIL, sleep, page fault, other), per function and per wait target. A
 * sample's run-queue delay (runq_ns of its weight) counts as waiting for a
 * CPU, its CPU time since the thread's previous sample as on a CPU, and
 * the rest as its class. Units are wall ns (sample weights); shares are of
 * the total weight, intervals from the sample counts. */
#ifndef BF_WAITS_H
#define BF_WAITS_H

#include <stddef.h>
#include <stdint.h>

#include "store.h"

#define BF_KW_RUNQ BF_WAIT_CLASSES        /* index of "waiting for a CPU" */
#define BF_KW_N (BF_WAIT_CLASSES + 1)    /* units[]: BF_WAIT_* then BF_KW_RUNQ */

/* Name of units[] index i: the class names of bf_wait_class_name, "runq"
 * for BF_KW_RUNQ, "unknown" for BF_WAIT_NONE (no kernel lens). Static. */
const char *bf_kw_name(unsigned i);

/* One wait target: (class, target text) with its share of the session. */
typedef struct bf_kw_target {
  unsigned wait;            /* BF_WAIT_*, or BF_KW_RUNQ */
  int64_t target_id;        /* interned string id; 0 = none */
  const char *text;         /* borrowed from the store (until close); "" = none */
  double units;             /* wall ns charged */
  double samples;           /* share × samples: the interval's count */
  double share, lo, hi;     /* of every sample in the filter, with a 95% Wilson interval */
  int64_t threads;          /* distinct threads seen in it */
  int64_t under_function_id; /* innermost Python function most often under it; 0 = none */
} bf_kw_target;

/* Per function (inclusive: once per sample whose stack holds it). */
typedef struct bf_kw_func {
  int64_t function_id;
  double units[BF_KW_N];
} bf_kw_func;

typedef struct bf_kw {
  int64_t total_samples;  /* every sample in the filter */
  double total_weight;    /* their weight (the shares' denominator) */
  double kernel_units;    /* of it, the weight of samples that carry the kernel lens */
  double units[BF_KW_N];  /* the whole session's split */
  bf_kw_target *targets;  /* ranked, largest first */
  size_t ntargets;
  bf_kw_func *funcs;      /* in no order; bf_kw_func_find looks one up */
  size_t nfuncs;
  void *idx;              /* function id → funcs index (internal) */
} bf_kw;

/* Read session_id's samples within f (may be NULL). OUT: *out (free with
 * bf_kw_free). Errors on the store handle. */
int bf_kw_load(bf_store *s, int64_t session_id, const bf_sample_filter *f, bf_kw **out);
void bf_kw_free(bf_kw *k);

/* The split of function_id, or NULL when no sample holds it. */
const bf_kw_func *bf_kw_func_find(const bf_kw *k, int64_t function_id);

#endif
