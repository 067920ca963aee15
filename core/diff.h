/* diff.h — the difference between two sessions (diff.c): per-function change
 * and a differential flame graph. Every function writes to a caller-given FILE
 * and reports errors on the store handle; none prints anything else. */
#ifndef BF_DIFF_H
#define BF_DIFF_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "store.h"

typedef struct bf_diff_opts {
  int json, color, width;
  int limit;            /* rows (0 = 25) */
  double threshold_pp;  /* hide rows whose |change| is below this (percentage points) */
  const char *limit_option; /* as bf_view_opts.limit_option */
  bf_sample_filter filter_a, filter_b;
} bf_diff_opts;

typedef enum {
  BF_DIFF_COMPARABLE = 0,
  BF_DIFF_NOT_COMPARABLE = 1, /* kind, clock, mode or rate differ */
} bf_diff_verdict;

/* Are sessions a and b comparable (same kind, clock, mode and rate)? Returns
 * a bf_diff_verdict (on BF_DIFF_NOT_COMPARABLE why, which may be NULL, says
 * which fields differ), or a negative errno with the message on s. */
int bf_diff_compatible(bf_store *s, int64_t a, int64_t b, bf_err *why);

/* Per-function change of self and total share from a to b with a
 * two-proportion z-test (p-value, significant at 0.05). Terminal or JSON. */
int bf_diff_functions(bf_store *s, int64_t a, int64_t b, const bf_diff_opts *o, FILE *out);

/* Differential flame graph (HTML): widths from b, red = share grew since a,
 * blue = shrank. */
int bf_diff_flame(bf_store *s, int64_t a, int64_t b, const bf_diff_opts *o, FILE *out);

#endif
