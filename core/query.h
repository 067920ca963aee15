/* query.h — the one way core/ reads what a session recorded: its kind and
 * clock as enums, its samples as a time-ordered stream (timeline) or
 * aggregated by distinct (thread, stack) (stacks), and its traced rows.
 * Views, exports, the Lua binding and diff read samples only through here. */
#ifndef BF_QUERY_H
#define BF_QUERY_H

#include <stddef.h>
#include <stdint.h>

#include "store.h"

/* How views and exports name samples without any Python frame (a thread in
 * native code only, or between frames); imports read it back. */
#define BF_NO_PYTHON_FRAME "[no Python frame]"

typedef enum { BF_Q_SAMPLED = 0, BF_Q_TRACED, BF_Q_IMPORTED, BF_Q_UNKNOWN_KIND } bf_q_kind;
typedef enum { BF_Q_WALL = 0, BF_Q_CPU } bf_q_clock;

/* The session's kind and clock (an unknown clock reads as wall). */
bf_q_kind bf_q_kind_of(const bf_session_info *info);
bf_q_clock bf_q_clock_of(const bf_session_info *info);

/* Do shares come from sample weight (cpu clock, imports) rather than counts? */
int bf_q_by_weight(const bf_session_info *info);

/* ---- timeline: samples one at a time, in (thread, time) order --------------
 * Memory is one stored chunk at most, whatever the session's size. */
typedef struct bf_q_cursor bf_q_cursor;

/* Open a cursor over session_id's samples passing f (may be NULL).
 * OUT: *out (close with bf_q_timeline_close). Errors on the store handle. */
int bf_q_timeline_open(bf_store *s, int64_t session_id, const bf_sample_filter *f, bf_q_cursor **out);

/* Next sample: 1 and *smp (borrowed until the next call), 0 at the end, or a
 * negative errno (message on the store handle). */
int bf_q_timeline_next(bf_q_cursor *c, const bf_sample **smp);

/* Accepts NULL. Must be called before the store is closed. */
void bf_q_timeline_close(bf_q_cursor *c);

/* Callback form: fn for every sample in (thread, time) order; fn's non-zero
 * value stops the walk and is returned. */
int bf_q_timeline_foreach(bf_store *s, int64_t session_id, const bf_sample_filter *f, bf_sample_fn fn, void *ud);

/* ---- stacks: samples aggregated by distinct (thread, stack) --------------- */
typedef struct bf_q_stack {
  int64_t thread_id;
  int64_t stack_id; /* 0: samples without any Python frame (they count too) */
  int64_t count;    /* samples */
  double weight;    /* sum of sample weights (ns, or samples for imports) */
  int leaf_op;      /* f->by_opcode: the leaf frame's opcode + 1 (record --opcodes), else 0 */
} bf_q_stack;

typedef struct bf_q_stacks {
  bf_q_stack *v; /* in order of first appearance */
  size_t n;
  int64_t total_count; /* every sample in the filter */
  double total_weight;
} bf_q_stacks;

/* OUT: *out (free with bf_q_stacks_free). f may be NULL; f->by_opcode
 * splits rows by the leaf's opcode too (bf_q_stack.leaf_op). */
int bf_q_stacks_load(bf_store *s, int64_t session_id, const bf_sample_filter *f, bf_q_stacks **out);
void bf_q_stacks_free(bf_q_stacks *q);

/* Merge rows of one stack across threads (thread_id becomes 0), in place,
 * keeping first-appearance order. Returns 0 or -ENOMEM (q unchanged). */
int bf_q_stacks_merge_threads(bf_q_stacks *q);

/* ---- frames of a stack, cached ---------------------------------------------- */
typedef struct bf_q_frames bf_q_frames;

/* Function ids and lines of stack_id, outermost first (stack 0: n = 0).
 * *cache starts NULL and is reused across calls (free with bf_q_frames_free).
 * OUT: *fids, *lines (valid until the next call), *n. */
int bf_q_frames_get(bf_store *s, bf_q_frames **cache, int64_t stack_id, const int64_t **fids,
                    const int64_t **lines, size_t *n);
void bf_q_frames_free(bf_q_frames *c);

/* ---- traced rows ------------------------------------------------------------ */
int bf_q_trace_funcs(bf_store *s, int64_t session_id, bf_trace_func_fn fn, void *ud);
int bf_q_trace_edges(bf_store *s, int64_t session_id, bf_trace_edge_fn fn, void *ud);
int bf_q_call_records(bf_store *s, int64_t session_id, bf_call_record_fn fn, void *ud);

/* Call records of a session kept by f (thread; start within since/until; f may
 * be NULL), sorted by thread, then start, the enclosing call first when two
 * start together. OUT: *out (caller frees out->v); untouched on failure. */
typedef struct bf_q_records {
  bf_call_record *v;
  size_t n, cap;
  const bf_sample_filter *f;
} bf_q_records;
int bf_q_call_records_sorted(bf_store *s, int64_t session_id, const bf_sample_filter *f,
                             bf_q_records *out);

#endif
