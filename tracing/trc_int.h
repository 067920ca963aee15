/* trc_int.h — internals shared by the tracing collector's C files.
 *
 * The collector keeps per-thread shadow stacks and process-wide tables of
 * functions and caller→callee edges; trc_write.c turns them into store rows.
 * Everything here runs with the GIL held (free-threaded builds are refused).
 */
#ifndef BF_TRC_INT_H
#define BF_TRC_INT_H

#include <stddef.h>
#include <stdint.h>

#include "err.h"

/* One function seen: a code object or a C method definition. Index 0 is the
 * thread root and never a real function. */
typedef struct bf_trc_func {
  const void *key;     /* PyCodeObject* or PyMethodDef* */
  void *ref;           /* strong PyObject* reference that keeps key alive */
  char *file;          /* set at write time for code, at first sight for C */
  char *qualname;
  int64_t firstlineno;
  int is_c;
  int focus;           /* matches the focus glob */
  int64_t calls, primitive_calls, resumes, self_ns, total_ns;
  int64_t records_kept, records_dropped;
} bf_trc_func;

typedef struct bf_trc_edge {
  uint32_t caller, callee;
  int64_t calls, primitive_calls, self_ns, total_ns;
} bf_trc_edge;

/* One focus-mode call kept in the ring buffer. */
typedef struct bf_trc_rec {
  uint32_t func, parent;
  uint32_t thread; /* index into the thread list order (bf_trc_thread.index) */
  int64_t start_ns, duration_ns;
} bf_trc_rec;

/* Per-thread identity kept for writing. */
typedef struct bf_trc_thread_info {
  int64_t native_tid;
  char *name;
} bf_trc_thread_info;

/* trace --memory: one function's or edge's allocations (trc_memory.c). Frees
 * are charged to the function that made the block: live = alloc - freed. */
typedef struct bf_trc_memstat {
  int64_t allocs, alloc_bytes, frees, freed_bytes;
} bf_trc_memstat;

/* One of the largest blocks still live at the end. */
typedef struct bf_trc_memtop {
  int64_t size;
  uint32_t func;         /* allocating function index (0: no Python function) */
  uint32_t nstack;
  const uint32_t *stack; /* Python function indexes, outermost first (nstack 0: not captured) */
} bf_trc_memtop;

typedef struct bf_trc_mem {
  const bf_trc_memstat *funcs; /* by function index, [0] = no Python function on the stack */
  size_t nfuncs;
  const bf_trc_memstat *edges; /* by edge index ([0] unused) */
  size_t nedges;
  const bf_trc_memtop *top;    /* largest first */
  size_t ntop;
} bf_trc_mem;

/* Everything the writer needs, detached from Python objects. Strings owned. */
typedef struct bf_trc_result {
  bf_trc_func *funcs;        /* [1..nfuncs) valid */
  size_t nfuncs;
  bf_trc_edge *edges;        /* [1..nedges) valid */
  size_t nedges;
  bf_trc_rec *recs;          /* ring contents, oldest first */
  size_t nrecs;
  bf_trc_thread_info *threads;
  size_t nthreads;
  const bf_trc_mem *mem;     /* NULL: traced without --memory */
} bf_trc_result;

/* Session metadata the writer records (strings borrowed, NULL = unknown). */
typedef struct bf_trc_meta {
  int64_t session_id;        /* 0 = create a new session */
  const char *clock;         /* "wall" | "cpu" */
  const char *mode;          /* "trace" | "focus" */
  int64_t start_ns, duration_ns; /* unix epoch ns */
  int64_t pid;
  const char *command;
  const char *python_version;
  const char *python_build;
  const char *label;
  const char *commit;
  const char *status;
  int64_t expires_at_ns;
  int64_t profiler_cpu_ns;
  const char *extra_json;
} bf_trc_meta;

/* Write result into the database at path (created if missing).
 * OUT: *session_id. On failure returns a negative errno and, when err is not
 * NULL, a one-line message naming path in err. */
int bf_trc_write(const char *path, const bf_trc_result *res, const bf_trc_meta *meta,
                 int64_t *session_id, bf_err *err);

/* Nearest-rank percentile of sorted v[0..n), q in (0,1]. */
int64_t bf_trc_percentile(const int64_t *sorted, size_t n, double q);

#endif
