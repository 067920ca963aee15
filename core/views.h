/* views.h — what people look at: terminal/JSON views and exports of a session.
 * Every function writes to a caller-given FILE and reports errors on the store
 * handle; none prints anything else. */
#ifndef BF_VIEWS_H
#define BF_VIEWS_H

#include <stdio.h>

#include "profile.h"
#include "store.h"

typedef struct bf_view_opts {
  int json;                 /* machine-readable output */
  int color;                /* ANSI colour allowed */
  int limit;                /* rows (0 = default 25; <0 = all) */
  bf_sort sort;
  bf_sample_filter filter;  /* thread / time window */
  int width;                /* terminal width (0 = 80) */
} bf_view_opts;

/* Function table with shares, 95% intervals and samples (sampled/imported) or
 * calls and times (traced). JSON shape documented in README. */
int bf_view_functions(bf_store *s, int64_t session_id, const bf_view_opts *o, FILE *out);

/* Collapsed stacks (FlameGraph input): one line per distinct stack,
 * frames "qualname (file:firstlineno:line)" outermost first, then the count
 * (or weight for cpu-clock and imported sessions). Re-importable by
 * bf_import_collapsed with the same function shares. */
int bf_export_collapsed(bf_store *s, int64_t session_id, const bf_sample_filter *f, FILE *out);

#endif
