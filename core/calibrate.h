/* calibrate.h — one reproduction traced *and* sampled at once, and how far
 * the sampled estimates are from the exact traced shares: per function the
 * estimate, its 95% interval, whether the interval covered the exact share,
 * the functions never sampled, and the rate that would have sized them.
 *
 * The run (bf_cal_run) asks the caller to start the traced run (core/ does
 * not launch the CLI: repl/ runs `bifocal trace`), traced without builtins,
 * and hands the traced Python process to a sampler the caller supplies (core/
 * does not sample); the report (bf_cal_report_build) reads both sessions.
 * Neither prints.
 */
#ifndef BF_CALIBRATE_H
#define BF_CALIBRATE_H

#include <stddef.h>
#include <stdint.h>

#include "correlate.h"
#include "err.h"
#include "store.h"

/* Sample the process pid into a new session of the database. Returns -EAGAIN
 * while pid has no Python runtime yet (the run retries), another negative
 * errno with a one-line message in err, or 0 and *sampled_id. */
typedef int (*bf_cal_sample_fn)(void *ud, int pid, int64_t *sampled_id, bf_err *err);

/* What the traced run must record, into the caller's database. */
typedef struct bf_cal_trace_req {
  char **argv;       /* the command to reproduce, NULL-terminated */
  const char *clock; /* "wall" | "cpu" */
  const char *label; /* the traced session's label */
  int builtins;      /* 0 (always, here): C time stays in the calling Python function,
                      * as the sampler (Python frames only) sees it */
  int memory;        /* trace the allocations too */
} bf_cal_trace_req;

/* Start the traced run of req with its stdout on a pipe; the last line it
 * writes there is the traced session's id, the rest is the program's own
 * output. OUT: *pid (the process the run waits for and forwards signals to),
 * *out_fd (the pipe's read end, closed by the run). 0, or a negative errno
 * with a one-line message in err. */
typedef int (*bf_cal_start_fn)(void *ud, const bf_cal_trace_req *req, int *pid, int *out_fd, bf_err *err);

/* The traced Python process of the run started as pid (which may first run
 * other processes), or 0 while there is none yet. */
typedef int (*bf_cal_target_fn)(void *ud, int pid);

typedef struct bf_cal_opts {
  const char *clock;     /* "wall" | "cpu" */
  const char *label;     /* NULL: "calibrate" (sessions get -traced / -sampled) */
  char **argv;           /* the command to reproduce, NULL-terminated */
  bf_cal_start_fn start; /* runs the trace (repl/: `bifocal trace`) */
  bf_cal_target_fn target;
  void *start_ud;        /* for start and target */
  bf_cal_sample_fn sample;
  void *sample_ud;
  volatile int *stop;   /* set (e.g. by a signal) to stop waiting */
  volatile int *child;  /* the trace's pid while it runs, else 0 (for signal forwarding) */
  int memory;           /* calibrate --memory: trace with --memory (the sampler records memory too) */
} bf_cal_opts;

typedef struct bf_cal_run_result {
  int64_t sampled_id, traced_id; /* 0 when that lens produced no session */
  char *output;                  /* the program's own output (malloc'd, may be NULL) */
  int exit_status;               /* the trace's exit status (0 when it succeeded) */
  bf_err err;                     /* why a session is missing, else code 0 and "" */
} bf_cal_run_result;

/* Run o->argv traced and sampled. 0 when both sessions exist, else -EIO and a
 * one-line reason in out->err (its code the cause's negative errno, or -EIO). OUT: *out (free output with bf_cal_run_clear). */
int bf_cal_run(const bf_cal_opts *o, bf_cal_run_result *out);
void bf_cal_run_clear(bf_cal_run_result *r);

typedef struct bf_cal_row {
  const bf_join_row *j;     /* borrowed from the report's join */
  double estimate, lo, hi;  /* sampled self share over the traced functions, 95% interval */
  double exact;             /* traced self share over the traced functions */
  double wilson_lo, wilson_hi; /* the interval if samples were independent */
  int covered;
} bf_cal_row;

typedef struct bf_cal_report {
  bf_join *join;
  bf_cal_row *rows;     /* traced functions, by exact share desc */
  size_t n;
  bf_cal_row **never;   /* rows called but never sampled, by calls desc */
  size_t n_never;
  size_t judged, covered; /* functions with >= 0.5% share; those covered */
  double coverage;      /* covered / judged, NAN when none judged */
  double n_in_traced;   /* samples that fell in traced functions */
  double achieved_rate_hz;
  double recommended_rate_hz;
  int blocks;           /* time blocks of the batch-means interval (0: too few samples) */
} bf_cal_report;

/* The interval of a function's share is the wider of the Wilson interval of
 * independent samples and a batch-means interval: the run cut into up to 20
 * time blocks, the share's variance estimated from how it varies between
 * blocks (a ratio estimator, Student t with blocks-1 degrees of freedom), so
 * samples that come in correlated bursts get the wider interval they deserve.
 * rate_hz is the rate asked. Errors on the store handle. OUT: *out. */
int bf_cal_report_build(bf_store *s, int64_t sampled_id, int64_t traced_id, double rate_hz, bf_cal_report **out);
void bf_cal_report_free(bf_cal_report *r);

/* ---- calibrate --memory ----------------------------------------------------
 * The same run, sampled with record --memory and traced with trace --memory:
 * per function, the sampled share of resident growth (self, with its 95%
 * interval) against the exact share of what the trace saw still live at the
 * end (the bytes that made the process grow), and of all it allocated. */

typedef struct bf_cal_mem_row {
  int64_t function_id;
  const char *file, *qualname; /* borrowed from the store's cache */
  int64_t firstlineno;
  double estimate, lo, hi;     /* sampled growth share, 95% interval */
  double growth_bytes, shrink_bytes;
  double exact;                /* traced live share (positive live bytes) */
  double exact_alloc;          /* traced share of allocated bytes */
  int64_t live_bytes, alloc_bytes, calls;
  int covered;                 /* exact inside [lo, hi] */
} bf_cal_mem_row;

typedef struct bf_cal_mem_report {
  int64_t sampled_id, traced_id;
  bf_cal_mem_row *rows;        /* by exact share desc, then estimate desc */
  size_t n;
  size_t judged, covered;      /* rows with exact or estimate >= 1%; those covered */
  double coverage;             /* covered / judged, NAN when none judged */
  double max_error;            /* largest |estimate - exact| among judged rows (a share) */
  double growth_bytes, shrink_bytes; /* sampled totals */
  int64_t live_bytes, alloc_bytes;   /* traced totals */
} bf_cal_mem_report;

/* Build the memory report of a sampled and a traced session of one database.
 * -ENODATA (message on the handle) when either has no memory data. OUT: *out. */
int bf_cal_mem_report_build(bf_store *s, int64_t sampled_id, int64_t traced_id, bf_cal_mem_report **out);
void bf_cal_mem_report_free(bf_cal_mem_report *r);

#endif
