/* correlate.h — the join of a sampled and a traced session by function
 * identity (file, qualname, firstlineno): sampled shares with intervals next to
 * exact calls and times, and the call rate both lenses imply together. Used by
 * `bifocal correlate`, the Lua binding (bifocal.join) and calibrate.
 */
#ifndef BF_CORRELATE_H
#define BF_CORRELATE_H

#include <stdio.h>

#include "profile.h"
#include "store.h"

typedef struct bf_join_row {
  const char *file; /* borrowed from the store, valid until it closes */
  const char *qualname;
  int64_t firstlineno;
  /* sampled lens; observed = 0 means "not observed" (no sample at all): the
   * share fields are then meaningless and must be shown as missing, never 0%. */
  int observed;
  int64_t self_samples, total_samples;
  double self_share, total_share;
  double self_lo, self_hi, total_lo, total_hi;
  double sampled_ns;     /* total_share × budget_ns: inclusive time in the sampled run */
  /* traced lens; traced = 0 when the trace never saw the function */
  int traced;
  int64_t calls, primitive_calls, self_ns, total_ns;
  double traced_self_share; /* self_ns over the traced session's time */
  double per_call_ns;    /* total_ns / primitive_calls (inclusive time of one call); NAN if unknown */
  /* both: estimated calls per second in the sampled run =
   * (sampled_ns / per_call_ns) / sampled duration; NAN unless both lenses saw it
   * and the sampled session has a duration. */
  double calls_per_s;
} bf_join_row;

typedef struct bf_join {
  bf_join_row *rows; /* sorted by sampled self share desc; trace-only rows last by traced self time */
  size_t n;
  int64_t sampled_id, traced_id;
  int64_t sampled_samples;  /* samples of the sampled session */
  int64_t sampled_duration_ns; /* 0 if unknown */
  int64_t sampled_threads;  /* threads with samples */
  double budget_ns;         /* thread time the sampled shares are shares of (see bf_join_sessions) */
  int64_t traced_ns;        /* traced session time (profile denominator) */
  size_t n_both;            /* functions seen by both lenses */
  double spearman;          /* rank correlation of sampled self share vs traced self_ns over n_both; NAN if n_both < 2 */
  const char *clock;        /* sampled clock, borrowed from the join ("wall"/"cpu") */
  char clock_buf[8];
  char interp_warning[1200]; /* one line when the two sessions ran different interpreters, else "" */
} bf_join;

/* Join a sampled (or imported) session with a traced one.
 * The budget is the thread time the sampled shares divide: for the cpu clock the
 * CPU time the samples stand for (sum of weights, ns); for a wall-clock sampled
 * session samples ÷ achieved tick rate (every sample stands for one tick of one
 * thread's wall time); otherwise (imports) wall duration × threads with samples.
 * A function's sampled time is total_share × budget.
 * Errors: -ENOENT unknown session, -EINVAL when sampled is a traced session or
 * traced is not one (message on the handle). OUT: *out (bf_join_free). */
int bf_join_sessions(bf_store *s, int64_t sampled_id, int64_t traced_id, bf_join **out);
void bf_join_free(bf_join *j);

/* Spearman rank correlation of n pairs (average ranks for ties); NAN if n < 2 or
 * a side is constant. */
double bf_spearman(const double *x, const double *y, size_t n);

/* The interpreter a session ran, from extra.python (version and executable)
 * else its python_version column. Control characters read as '?'.
 * OUT: exe, ver ("" when not recorded; truncated to their lengths). */
void bf_session_interp(const bf_session_info *in, char *exe, size_t exe_len, char *ver, size_t ver_len);

/* 1 when a and b ran different interpreters (version or executable differ;
 * what one side did not record never differs), with a one-line reason in
 * why (may be NULL); else 0 and why->msg "". */
int bf_sessions_interp_differ(const bf_session_info *a, const bf_session_info *b, bf_err *why);

/* Append " · EXECUTABLE" of in (its last 40 bytes or so, "…" before) to the
 * NUL-terminated line in buf (size len) when in and other ran different
 * interpreters and in recorded its own. */
void bf_session_line_add_exe(const bf_session_info *in, const bf_session_info *other, char *buf, size_t len);

/* Print the join as a terminal table (limit rows, <= 0 = all) or as JSON.
 * limit_option: how the caller's user asks for more rows (e.g. "--limit"),
 * named in the "… N more" line; NULL: not named. */
void bf_join_print(const bf_join *j, FILE *out, int limit, const char *limit_option, int color);
void bf_join_json(const bf_join *j, FILE *out);

#endif
