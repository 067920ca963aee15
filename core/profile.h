/* profile.h — per-function figures of one session, the basis of every view.
 *
 * Sampled/imported sessions: self/total weight and sample counts per function
 * with 95% Wilson intervals. Traced sessions: exact calls and times. Both kinds
 * fill the same row type so views, Lua and correlate treat them alike.
 */
#ifndef BF_PROFILE_H
#define BF_PROFILE_H

#include "store.h"

typedef struct bf_func_row {
  int64_t function_id;
  const char *file;      /* borrowed from the store, valid until it closes */
  const char *qualname;
  int64_t firstlineno;
  /* sampled: -1 for traced sessions */
  int64_t self_samples, total_samples;
  double self_weight, total_weight;
  double self_share, total_share; /* of all weight in the filtered session, 0..1 */
  double self_lo, self_hi, total_lo, total_hi; /* 95% Wilson interval */
  /* traced: -1 for sampled sessions */
  int64_t calls, primitive_calls, resumes, self_ns, total_ns;
  int64_t p50_ns, p90_ns, p99_ns, max_ns;
  int64_t records_kept, records_dropped; /* focus-mode call records; -1 when not focus */
} bf_func_row;

typedef struct bf_profile {
  bf_func_row *rows;
  size_t n;
  int traced;             /* 1 when rows carry trace figures */
  int64_t total_samples;  /* sum of counts in the filter */
  double total_weight;
  int64_t total_ns;       /* traced: sum of thread-root total time */
  /* traced, focus mode: call records kept and dropped (ring full), summed
   * over the session's functions; -1 when the session has none */
  int64_t records_kept, records_dropped;
} bf_profile;

typedef enum { BF_SORT_SELF = 0, BF_SORT_TOTAL = 1 } bf_sort;

/* Compute the function table of a session. f may be NULL. Rows sorted by the
 * chosen key, descending. OUT: *out (free with bf_profile_free). */
int bf_profile_functions(bf_store *s, int64_t session_id, const bf_sample_filter *f,
                         bf_sort sort, bf_profile **out);
void bf_profile_free(bf_profile *p);

/* 95% Wilson score interval of k successes in n trials. OUT: *lo, *hi. */
void bf_wilson(double k, double n, double *lo, double *hi);

#endif
