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

/* Collapsed stacks (FlameGraph input): one line per distinct stack,
 * frames "qualname (file:firstlineno:line)" outermost first, then the count
 * (or weight for cpu-clock and imported sessions). Re-importable by
 * bf_import_collapsed with the same function shares. */
int bf_export_collapsed(bf_store *s, int64_t session_id, const bf_sample_filter *f, FILE *out);

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
/* Collapsed stacks weighted by bytes of resident growth. */
int bf_export_memory_collapsed(bf_store *s, int64_t session_id, const bf_sample_filter *f, FILE *out);
/* pprof with sample types samples/count (changes that grew) and
 * alloc_space/bytes (resident growth, the default); no period. */
int bf_export_pprof_memory(bf_store *s, int64_t session_id, const bf_sample_filter *f, FILE *out);
/* speedscope: one "sampled" profile per thread, unit "bytes" of growth. */
int bf_export_speedscope_memory(bf_store *s, int64_t session_id, const bf_sample_filter *f, FILE *out);

/* ---- diff of two sessions ------------------------------------------------ */

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

/* ---- exports ---------------------------------------------------------------- */

/* speedscope JSON (https://www.speedscope.app/file-format-schema.json): shared
 * frames; sampled/imported sessions one time-ordered "sampled" profile per
 * thread (weights in ns, or samples for imports); traced sessions one
 * "evented" profile per thread from focus call records, else rebuilt paths. */
int bf_export_speedscope(bf_store *s, int64_t session_id, const bf_sample_filter *f, FILE *out);

/* pstats (.prof) in marshal format, loadable by pstats.Stats on Python 3.8+,
 * in cProfile's shapes: keys (file, firstlineno, co_name) or ("~", 0, C label),
 * entries (cc, nc, tt, ct, callers), caller entries (nc, cc, tt, ct).
 * Traced: cc/nc = primitive/all calls, tt/ct = self/total seconds, callers from
 * edges. Sampled: cc = samples with the function on the stack, nc = frames
 * of it counting recursion, tt/ct = self/total seconds of
 * sample weight; imported: seconds = samples / rate (1 kHz when unknown). */
int bf_export_pstats(bf_store *s, int64_t session_id, const bf_sample_filter *f, FILE *out);

/* pprof: gzip-compressed profile.proto with value types samples/count (traced:
 * calls/count) and cpu|wall/nanoseconds (not for imports); default index as
 * replay shares; unique module-qualified function names; every sample kept. */
int bf_export_pprof(bf_store *s, int64_t session_id, const bf_sample_filter *f, FILE *out);

/* Chrome/Perfetto trace-event JSON: a per-thread timeline of a sampled
 * session, or the focus-mode call records of a traced one. -ENODATA for
 * imports and traced sessions without call records. */
int bf_export_chrome(bf_store *s, int64_t session_id, const bf_sample_filter *f, FILE *out);

/* Gecko profile format (Firefox Profiler, format version 30): per sampled
 * thread its string, frame and stack tables and samples [stack, ms since
 * meta.startTime, 0]; frames "qualname (file:firstlineno)" with their line.
 * -ENODATA for traced and imported sessions (no sample times). */
int bf_export_gecko(bf_store *s, int64_t session_id, const bf_sample_filter *f, FILE *out);

#endif
