/* views.h — what people look at: terminal/JSON views of a session (exports
 * are in exports.h, the diff of two sessions in diff.h). Every function writes
 * to a caller-given FILE and reports errors on the store handle; none prints
 * anything else. */
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
  int html;                 /* heatmap: HTML page instead of terminal text */
  int buckets;              /* heatmap: time buckets (0 = fit the width / 60) */
  const char *limit_option; /* how the caller's user asks for more rows (e.g. "--limit"), named in
                               "… N more" lines; NULL: not named */
  const char *async_option; /* tasks view: how the caller's user records asyncio tasks (e.g.
                               "record --async"), named in its hints; NULL: not named */
  int memory;               /* the memory form of the view (record --memory sessions; view_memory.c) */
} bf_view_opts;

/* Function table with shares, 95% intervals and samples (sampled/imported) or
 * calls and times (traced). JSON shape documented in README. */
int bf_view_functions(bf_store *s, int64_t session_id, const bf_view_opts *o, FILE *out);

/* Flame graph: one self-contained HTML page (inline JS/CSS, no network) with
 * click-to-zoom, search, hover details, thread filter and icicle toggle.
 * Identical stacks are aggregated by function path per thread. Traced
 * sessions: paths rebuilt from caller→callee edges (marked approximate). */
int bf_view_flame(bf_store *s, int64_t session_id, const bf_view_opts *o, FILE *out);

/* Flame graph as one self-contained SVG (flamegraph.pl's shape): root at the
 * bottom, one <rect> per function path at least 0.1 px wide, a <title> per
 * frame with samples (or seconds), share and 95% interval; inline JS for
 * search and click-to-zoom. Names are escaped for XML (controls and invalid
 * UTF-8 become U+FFFD). */
int bf_view_flame_svg(bf_store *s, int64_t session_id, const bf_view_opts *o, FILE *out);

/* Heatmap: time buckets × the top functions by self share; each cell is the
 * function's self share of that bucket. Terminal (o->html = 0) or HTML.
 * -ENODATA (message on the handle) for sessions without timed samples. */
int bf_view_heatmap(bf_store *s, int64_t session_id, const bf_view_opts *o, FILE *out);

/* GIL view: per thread, shares of samples holding the GIL, waiting for it
 * (not holding it and not idle), on CPU and idle; and the functions that
 * hold the GIL most. -ENODATA for sessions that carry no thread states. */
int bf_view_gil(bf_store *s, int64_t session_id, const bf_view_opts *o, FILE *out);

/* Waits view (kernel lens): wait targets ranked by share of the wall time,
 * with 95% intervals, threads and the innermost function under each; plus
 * the session's split (on CPU, waiting for a CPU, each blocked class) in
 * JSON. -ENODATA for sessions that are not sampled. */
int bf_view_waits(bf_store *s, int64_t session_id, const bf_view_opts *o, FILE *out);
/* Opcodes view (record --opcodes): samples per (function, line, opcode) of
 * the leaf frame, specialised names with their base instruction, shares and
 * 95% intervals. -ENODATA for a session without opcodes. */
int bf_view_opcodes(bf_store *s, int64_t session_id, const bf_view_opts *o, FILE *out);

/* Stack view: per thread, the most frequent stacks and the last one seen. */
int bf_view_stack(bf_store *s, int64_t session_id, const bf_view_opts *o, FILE *out);

/* Tasks view (sessions recorded with --async): per asyncio task the shares
 * running / ready / waiting and the await points holding it (innermost frame
 * outside asyncio/), per event-loop thread running task code / loop overhead
 * / waiting for I/O. -ENODATA for sessions that are not sampled. */
int bf_view_tasks(bf_store *s, int64_t session_id, const bf_view_opts *o, FILE *out);

/* ---- memory (sessions recorded with record --memory; view_memory.c) ---------
 * Each returns -ENODATA (message on the handle) for a session without memory
 * rows. Growth and shrink are kept apart: a shrink is never growth. */

/* Per function: resident growth (share of all growth with a 95% interval),
 * shrink and net bytes, self (innermost frame) and total (on the stack);
 * JSON gives anonymous growth/shrink too. Terminal or JSON. */
int bf_view_memory_functions(bf_store *s, int64_t session_id, const bf_view_opts *o, FILE *out);
/* Flame graph (HTML) weighted by bytes of resident growth. */
int bf_view_memory_flame(bf_store *s, int64_t session_id, const bf_view_opts *o, FILE *out);
/* Resident and anonymous memory over time in o->buckets buckets (default
 * 20; each the memory at its end). Terminal or JSON. */
int bf_view_memory_timeline(bf_store *s, int64_t session_id, const bf_view_opts *o, FILE *out);

#endif
