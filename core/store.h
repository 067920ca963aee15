/* store.h — the one SQLite file that holds every session of both lenses.
 *
 * Sessions, interned strings/functions/frames/stacks/threads, compact sample
 * chunks, traced functions and edges, per-call records and the audit trail.
 * Every fallible function returns 0 or a negative errno; the detailed message
 * is on the handle (bf_store_errmsg), or, for the opens (no handle yet), in
 * their bf_err. The library never prints.
 */
#ifndef BF_STORE_H
#define BF_STORE_H

#include <stddef.h>
#include <stdint.h>

#include "err.h"

typedef struct bf_store bf_store;

#define BF_STORE_SCHEMA_VERSION 5

/* Open flags. */
#define BF_STORE_READONLY 0x1 /* never write; fails on a missing file */
#define BF_STORE_CREATE 0x2   /* create the file (mode 0600) if missing */

/* Open (and migrate) the database at path.
 * OUT: *out, a handle the caller closes with bf_store_close.
 * On failure *out is set to NULL and err (when not NULL) holds the code and a
 * one-line message.
 * Errors: -ENOENT missing file, -EINVAL not a SQLite file / not a bifocal
 * database, -EPROTO schema newer than this build, -EACCES permission. */
int bf_store_open(const char *path, int flags, bf_store **out, bf_err *err);

/* Open a read-only database from an image in memory (nothing touches the
 * disk: e.g. a decrypted sealed export). Takes ownership of image, which must
 * come from bf_store_image_buf_alloc. name is used in messages only.
 * OUT and errors: as bf_store_open. */
int bf_store_open_image(unsigned char *image, size_t len, const char *name, bf_store **out,
                        bf_err *err);

/* Open a new, empty bifocal database in memory only (e.g. the plaintext of a
 * sealed export, which must never touch the disk). OUT and errors: as
 * bf_store_open. */
int bf_store_open_memory(bf_store **out, bf_err *err);

/* Close; flushes pending samples. Accepts NULL. */
void bf_store_close(bf_store *s);

/* Untrusted databases (every one): each handle is opened defensive, with
 * triggers and views off and nothing in the schema trusted, and bifocal's
 * tables are checked (plain tables, expected columns) before anything is
 * read. Every statement runs under a progress guard:
 * - bf_store_interrupt() (async-signal-safe: a SIGINT/SIGTERM handler may
 *   call it) makes every running and later statement of every handle fail
 *   with -EINTR ("interrupted") until bf_store_interrupt_clear();
 * - a read that runs longer than its budget without producing a row fails
 *   with -ETIMEDOUT (default 30 s; ns <= 0 turns the budget off). Writes are
 *   not budgeted (a VACUUM of a large file is slow, not hostile). */
void bf_store_interrupt(void);
void bf_store_interrupt_clear(void);
int bf_store_interrupted(void);
void bf_store_set_stmt_budget(bf_store *s, int64_t ns);

/* Last error on this handle (never NULL). Borrowed until the next call. */
const char *bf_store_errmsg(const bf_store *s);

/* Path this handle was opened on. Borrowed. */
const char *bf_store_path(const bf_store *s);

/* Explicit transactions around a batch of writes (nesting is counted). */
int bf_store_begin(bf_store *s);
int bf_store_commit(bf_store *s);
int bf_store_rollback(bf_store *s);

/* ---- sessions ---------------------------------------------------------- */

/* Session metadata. Strings are borrowed from the caller on write; on read they
 * point into the bf_session_info allocation (freed with bf_session_info_free).
 * NULL string = unknown. Times are unix-epoch nanoseconds. */
typedef struct bf_session_info {
  int64_t id;
  const char *kind;       /* "sampled" | "traced" | "imported" */
  const char *clock;      /* "wall" | "cpu" */
  const char *mode;       /* "all" | "gil" | "native" | "trace" | "focus" | import dialect */
  double rate_hz;         /* requested sampling rate (0 for traced) */
  double achieved_rate_hz;
  int64_t start_ns;       /* capture start, unix epoch ns */
  int64_t duration_ns;
  const char *host;
  int64_t pid;            /* 0 if none */
  const char *command;    /* target command line, space-joined */
  const char *python_version; /* "3.12.1" */
  const char *python_build;   /* "release" | "debug" | "free-threaded" | ... */
  const char *profiler_version;
  const char *commit;
  const char *label;
  int64_t samples;        /* samples recorded (sum of counts) */
  int64_t missed;         /* ticks that could not be taken in time */
  int64_t invalid;        /* torn/garbage reads discarded */
  int64_t profiler_cpu_ns;
  const char *status;     /* "complete" | "interrupted" | "target-exited" | "incomplete" */
  int64_t expires_at_ns;  /* 0 = never */
  int64_t parent_id;      /* 0 = none (e.g. subprocess sessions link their parent) */
  int redacted;
  int64_t created_ns;     /* set by the store on begin */
  const char *extra_json; /* free-form JSON object with anything else, or NULL */
} bf_session_info;

/* Create a session row with status "incomplete" (unless info->status is set).
 * OUT: *id. */
int bf_store_session_begin(bf_store *s, const bf_session_info *info, int64_t *id);

/* Overwrite every metadata field of session info->id (use it to finalise). */
int bf_store_session_update(bf_store *s, const bf_session_info *info);

/* Read one session. OUT: *out (caller frees with bf_session_info_free).
 * -ENOENT when no such session (message on the handle names the id). */
int bf_store_session_get(bf_store *s, int64_t id, bf_session_info **out);
void bf_session_info_free(bf_session_info *info);

/* Resolve "12" or a label ("prod-noon": newest session with that label).
 * OUT: *id. -ENOENT if nothing matches. */
int bf_store_session_resolve(bf_store *s, const char *id_or_label, int64_t *id);

/* All sessions, oldest first. OUT: *out array of *n (caller frees each element
 * with bf_session_info_free and the array with free). */
int bf_store_session_list(bf_store *s, bf_session_info ***out, size_t *n);

/* Delete a session and all its rows (samples, threads, trace data, records). */
int bf_store_session_delete(bf_store *s, int64_t id);

/* ---- interning (cached in memory; ids are stable for the database) ---- */

int bf_store_intern_string(bf_store *s, const char *str, int64_t *id);
/* The string of an id (e.g. a sample's wait_target). OUT: *out, borrowed
 * from the store's cache until close. -ENOENT when there is none. */
int bf_store_string_get(bf_store *s, int64_t id, const char **out);
/* Function identity: (file, qualname, firstlineno); names for what a
 * producer does not know are in common/ident.h (NULL: BF_IDENT_UNKNOWN). OUT: *id. */
int bf_store_intern_function(bf_store *s, const char *file, const char *qualname,
                             int64_t firstlineno, int64_t *id);
/* Frame = (function, current line). OUT: *id. */
int bf_store_intern_frame(bf_store *s, int64_t function_id, int64_t line, int64_t *id);
/* Stack node = (parent stack, innermost frame); parent 0 is the root, so a
 * stack is interned outermost frame first. OUT: *id. */
int bf_store_intern_stack(bf_store *s, int64_t parent_stack_id, int64_t frame_id, int64_t *id);
/* Thread of a session: native tid plus optional name (name updated if it was
 * unknown). OUT: *id. */
int bf_store_intern_thread(bf_store *s, int64_t session_id, int64_t native_tid,
                           const char *name, int64_t *id);
/* Replace the name of thread thread_id (from bf_store_intern_thread): a
 * sampler that stored the OS name first and now reads the Python one. */
int bf_store_thread_rename(bf_store *s, int64_t thread_id, const char *name);

/* ---- samples ----------------------------------------------------------- */

#define BF_SAMPLE_GIL 0x01     /* thread held the GIL */
#define BF_SAMPLE_ON_CPU 0x02  /* thread was running on a CPU */
#define BF_SAMPLE_IDLE 0x04    /* thread idle (blocked/sleeping/waiting) */
#define BF_SAMPLE_GC 0x08      /* garbage collection was running */
#define BF_SAMPLE_NATIVE 0x10  /* stack includes native frames */
#define BF_SAMPLE_EXC 0x20     /* an exception was being handled or raised (record --mode exception) */
/* record --opcodes: the leaf Python frame's opcode (its specialised form, a
 * byte of the session's Python version, see core/opnames.h) in bits 24-31 */
#define BF_SAMPLE_OPCODE 0x00800000u
#define BF_SAMPLE_OPCODE_SHIFT 24
#define BF_SAMPLE_OPCODE_OF(flags) ((flags) & BF_SAMPLE_OPCODE ? (int)((flags) >> BF_SAMPLE_OPCODE_SHIFT) : -1)

/* Kernel lens (wall clock): what the kernel said the thread was doing when
 * sampled. BF_WAIT_NONE: not read (cpu clock, imports, older sessions). */
#define BF_WAIT_NONE 0
#define BF_WAIT_CPU 1   /* state R: on a CPU or runnable (see runq_ns) */
#define BF_WAIT_NET 2   /* blocked on a socket */
#define BF_WAIT_DISK 3  /* uninterruptible (D) or on a regular file */
#define BF_WAIT_LOCK 4  /* futex: a lock */
#define BF_WAIT_GIL 5   /* futex with a timeout while another thread held the GIL */
#define BF_WAIT_SLEEP 6 /* a timer: nanosleep, select/poll without fds */
#define BF_WAIT_FAULT 7 /* D outside any syscall: a page fault */
#define BF_WAIT_OTHER 8 /* pipe, eventfd, epoll, a child, any other syscall */
#define BF_WAIT_CLASSES 9

/* Name of a BF_WAIT_* class ("cpu", "network", "disk", "lock", "gil",
 * "sleep", "fault", "other"; "" for NONE). Static. */
const char *bf_wait_class_name(unsigned cls);

typedef struct bf_sample {
  int64_t thread_id; /* from bf_store_intern_thread */
  int64_t stack_id;  /* from bf_store_intern_stack; 0 = empty stack */
  int64_t ts_ns;     /* ns since session start, non-decreasing per thread */
  uint32_t flags;    /* BF_SAMPLE_* */
  uint32_t count;    /* number of samples this record stands for (>= 1) */
  int64_t weight;    /* clock time attributed (wall: ns, cpu: cpu ns); imports: count */
  /* kernel lens; all 0 when not read (older chunks decode so) */
  uint32_t wait;        /* BF_WAIT_* */
  uint32_t majflt;      /* major page faults since the thread's previous sample */
  int64_t wait_target;  /* interned string "recvfrom tcp 127.0.0.1:5432"; 0 = none */
  int64_t runq_ns;      /* of weight: waiting for a CPU (run-queue delay, schedstat) */
  int64_t cpu_ns;       /* of weight: on a CPU (schedstat); the rest of weight is `wait`
                         * (BF_WAIT_CPU: the rest is on a CPU too) */
} bf_sample;

/* Append one sample to session's buffer; written in batches (one transaction per
 * chunk). Cheap: no SQLite work on most calls. A negative return means the
 * sample was NOT added (-EBUSY: another process holds the write lock; add it
 * again later); a write that fails with -EBUSY after the sample was kept in
 * memory returns 0 and is retried by later calls. */
int bf_store_sample_add(bf_store *s, int64_t session_id, const bf_sample *smp);

/* Kernel lens: move up to ns of the thread's still-buffered samples (not
 * written yet; the newest excepted, at most max_back back, newest first)
 * that were runnable (BF_SAMPLE_ON_CPU) from their class to waiting for a
 * CPU, out of the part of their weight neither on a CPU nor waiting already: the kernel records a run-queue
 * wait only when it ends, after the samples it spans were taken. Returns
 * the ns moved (0 when none is buffered). */
int64_t bf_store_sample_amend_runq(bf_store *s, int64_t session_id, int64_t thread_id, int64_t ns, size_t max_back);

/* How long a write waits for another process's write lock before failing
 * with -EBUSY (default 5000 ms). A sampler sets it short and keeps samples in
 * memory meanwhile. */
void bf_store_set_busy_timeout(bf_store *s, int ms);

/* Write out every buffered sample. */
int bf_store_flush(bf_store *s);

/* For long captures, call a few times a second: commits the implicit write
 * transaction when it has been open for 250 ms (so other writers of the same
 * file get in) and writes buffered samples once a second. Cheap otherwise. */
int bf_store_checkpoint(bf_store *s);

/* Filter for reading samples. Zero-initialise; 0/NULL fields mean "any". */
typedef struct bf_sample_filter {
  int64_t thread_id;     /* 0 = every thread */
  int64_t since_ns;      /* ts_ns >= since_ns */
  int64_t until_ns;      /* ts_ns < until_ns when until_ns > 0 */
  int tree;              /* also the sessions of its subprocesses (parent_id), at any depth */
  int kernel_leaf;       /* bf_q_stacks_load: rows also by the kernel state (bf_q_stack.kleaf) */
  int by_opcode;         /* stacks (query.h, views_int.h): rows split by the leaf's opcode (record --opcodes) */
} bf_sample_filter;

/* Call fn for every sample of a session in (thread, time) order. fn returning
 * non-zero stops the walk and that value is returned. */
typedef int (*bf_sample_fn)(void *ud, const bf_sample *smp);
int bf_store_samples_foreach(bf_store *s, int64_t session_id, const bf_sample_filter *f,
                             bf_sample_fn fn, void *ud);

/* ---- reading interned things -------------------------------------------- */

typedef struct bf_function_ref {
  int64_t id;
  const char *file;     /* borrowed from the store's cache, valid until close */
  const char *qualname;
  int64_t firstlineno;
} bf_function_ref;

/* Resolve ids (cached after first lookup). OUT: the struct. A negative id
 * is a kernel-lens leaf (bf_store_kleaf_id): file BF_KLEAF_FILE, qualname
 * "[recvfrom tcp 127.0.0.1:5432]" or "[waiting for CPU]", line 0. */
int bf_store_function_get(bf_store *s, int64_t function_id, bf_function_ref *out);

/* The pseudo-function id views and exports put as a stack's leaf for a
 * sample's kernel state: class cls (BF_WAIT_*, or BF_WAIT_CLASSES for
 * waiting for a CPU) on target string target_id (0: none). Negative, at
 * most -2000 (the views' opcode leaves sit above); 0 when out of range. */
#define BF_KLEAF_FILE "<kernel>"
int64_t bf_store_kleaf_id(unsigned cls, int64_t target_id);
/* OUT: *function_id, *line. */
int bf_store_frame_get(bf_store *s, int64_t frame_id, int64_t *function_id, int64_t *line);
/* OUT: *parent_stack_id, *frame_id. */
int bf_store_stack_get(bf_store *s, int64_t stack_id, int64_t *parent_stack_id,
                       int64_t *frame_id);
/* Stack as frame ids, outermost first. OUT: frames (caller frees), *n. */
int bf_store_stack_frames(bf_store *s, int64_t stack_id, int64_t **frames, size_t *n);

typedef struct bf_thread_ref {
  int64_t id;
  int64_t native_tid;
  char *name; /* owned by the array, may be NULL */
} bf_thread_ref;
/* OUT: *out array (free with bf_thread_refs_free), *n. */
int bf_store_threads(bf_store *s, int64_t session_id, bf_thread_ref **out, size_t *n);
void bf_thread_refs_free(bf_thread_ref *t, size_t n);

/* ---- traced data -------------------------------------------------------- */

typedef struct bf_trace_func {
  int64_t function_id;
  int64_t calls;           /* generator/coroutine creation counts once */
  int64_t primitive_calls; /* non-recursive calls */
  int64_t resumes;         /* generator/coroutine resumes (never counted as calls) */
  int64_t self_ns;
  int64_t total_ns;        /* outermost activation only under recursion */
  /* focus-mode per-call duration percentiles; -1 when not recorded */
  int64_t p50_ns, p90_ns, p99_ns, max_ns;
  int64_t records_kept, records_dropped;
} bf_trace_func;

typedef struct bf_trace_edge {
  int64_t caller_function_id; /* 0 = thread root */
  int64_t callee_function_id;
  int64_t calls, primitive_calls;
  int64_t self_ns, total_ns;
} bf_trace_edge;

int bf_store_trace_func_put(bf_store *s, int64_t session_id, const bf_trace_func *tf);
int bf_store_trace_edge_put(bf_store *s, int64_t session_id, const bf_trace_edge *te);

typedef int (*bf_trace_func_fn)(void *ud, const bf_trace_func *tf);
typedef int (*bf_trace_edge_fn)(void *ud, const bf_trace_edge *te);
int bf_store_trace_funcs_foreach(bf_store *s, int64_t session_id, bf_trace_func_fn fn, void *ud);
int bf_store_trace_edges_foreach(bf_store *s, int64_t session_id, bf_trace_edge_fn fn, void *ud);

/* One focus-mode call: when it started (ns since session start), how long. */
typedef struct bf_call_record {
  int64_t function_id;
  int64_t thread_id;   /* from bf_store_intern_thread, 0 if unknown */
  int64_t start_ns;
  int64_t duration_ns;
  int32_t depth;       /* depth below the focused function (0 = the focus call) */
  int64_t parent_function_id; /* caller, 0 if unknown */
} bf_call_record;

int bf_store_call_record_add(bf_store *s, int64_t session_id, const bf_call_record *r);
typedef int (*bf_call_record_fn)(void *ud, const bf_call_record *r);
int bf_store_call_records_foreach(bf_store *s, int64_t session_id, bf_call_record_fn fn,
                                  void *ud);

/* ---- sampled memory (record --memory; core/store/memory.c) --------------- */

/* One change of the target's memory between two ticks, charged to the stack
 * that ran in between (the GIL holder's, else a running thread's). Deltas are
 * signed bytes: > 0 growth, < 0 shrink (a reader keeps the two apart: a
 * shrink is never growth). A row exists only when some delta is non-zero.
 * py_delta is the Python allocator's change, 0 where it is not read (the
 * session's extra_json "memory" object says which were read). */
typedef struct bf_memory_sample {
  int64_t thread_id; /* from bf_store_intern_thread; 0 = no thread known */
  int64_t stack_id;  /* from bf_store_intern_stack; 0 = empty/unknown stack */
  int64_t ts_ns;     /* ns since session start: the tick that ended the interval */
  int64_t rss_delta; /* resident set (statm resident), bytes */
  int64_t anon_delta;/* anonymous resident (resident - shared), bytes */
  int64_t py_delta;  /* Python allocator in-use bytes; 0 when not read */
} bf_memory_sample;

/* The process's memory at one moment (written at a bounded rate, ~20/s). */
typedef struct bf_memory_point {
  int64_t ts_ns;      /* ns since session start */
  int64_t rss_bytes;
  int64_t anon_bytes;
  int64_t py_bytes;   /* -1 when not read */
} bf_memory_point;

/* Append n rows / points to a session (one statement prepared per call, in
 * the implicit write transaction; batch them). -EBUSY: another process holds
 * the write lock and nothing was added (add them again later). */
int bf_store_memory_samples_add(bf_store *s, int64_t session_id, const bf_memory_sample *rows, size_t n);
int bf_store_memory_points_add(bf_store *s, int64_t session_id, const bf_memory_point *pts, size_t n);

/* Call fn for every memory row of a session in (ts_ns, insertion) order;
 * f as for bf_store_samples_foreach (thread_id, since/until on ts_ns, tree:
 * also its subprocesses' sessions). fn returning non-zero stops the walk and
 * that value is returned. A session recorded without --memory has no rows
 * (bf_store_memory_count tells). */
typedef int (*bf_memory_sample_fn)(void *ud, const bf_memory_sample *m);
int bf_store_memory_foreach(bf_store *s, int64_t session_id, const bf_sample_filter *f,
                            bf_memory_sample_fn fn, void *ud);

/* The resident-memory timeline of a session, oldest first. */
typedef int (*bf_memory_point_fn)(void *ud, const bf_memory_point *p);
int bf_store_memory_timeline_foreach(bf_store *s, int64_t session_id, bf_memory_point_fn fn, void *ud);

/* OUT: *rows, *points: how many memory rows and timeline points session has
 * (both 0: not recorded with --memory, or nothing changed). */
int bf_store_memory_count(bf_store *s, int64_t session_id, int64_t *rows, int64_t *points);

/* ---- audit ---------------------------------------------------------------- */

typedef struct bf_audit_entry {
  int64_t id;
  int64_t time_ns;
  const char *user;
  int64_t uid;
  int64_t target_pid;   /* 0 if none */
  int64_t target_uid;   /* -1 if unknown */
  const char *command;  /* "record", "dump", ... */
  const char *argv;     /* full bifocal command line */
  const char *outcome;  /* "ok" or the one-line error */
  int64_t session_id;   /* 0 if none */
} bf_audit_entry;

int bf_store_audit_add(bf_store *s, const bf_audit_entry *e, int64_t *id);
int bf_store_audit_update(bf_store *s, int64_t id, const char *outcome, int64_t session_id);
typedef int (*bf_audit_fn)(void *ud, const bf_audit_entry *e);
int bf_store_audit_foreach(bf_store *s, bf_audit_fn fn, void *ud);

/* ---- maintenance (gc, extract, share); the SQLite handle is never handed out ---- */

/* Zero the pages of deleted rows from now on (PRAGMA secure_delete) on this
 * handle. */
int bf_store_secure_delete(bf_store *s);

/* Record that the database holds redacted data (the meta table). */
int bf_store_mark_redacted(bf_store *s);

#define BF_STORE_COMPACT_STANDALONE 0x1 /* also leave WAL mode: one file to hand out */
/* VACUUM (rewrite without the freed pages), then move it all into the main
 * file and empty the WAL (wal_checkpoint(TRUNCATE)). Nothing may be pending. */
int bf_store_compact(bf_store *s, int flags);

typedef struct bf_store_sweep_counts {
  int64_t strings, functions, frames, stacks; /* orphan rows deleted */
} bf_store_sweep_counts;
/* Inside a transaction: delete the rows of sessions that no longer exist,
 * then every stack no sample of the sessions live[0..n) uses (nor is an
 * ancestor of one), and the frames, functions and strings nothing refers to.
 * The interning caches are NOT dropped (a begin/rollback pair does that).
 * OUT: *out, the counts added to it. */
int bf_store_sweep(bf_store *s, const int64_t *live, size_t n, bf_store_sweep_counts *out);

/* The whole database as one SQLite image after a VACUUM (a memory database
 * to seal). OUT: *image (malloc'd; the caller wipes and frees it), *len.
 * -EFBIG when it is larger than max_len, -ENOMEM when it cannot be made. */
int bf_store_image(bf_store *s, size_t max_len, unsigned char **image, size_t *len);
/* A buffer bf_store_open_image can take ownership of; NULL when out of
 * memory. Free one it was not given to with bf_store_image_buf_free. */
unsigned char *bf_store_image_buf_alloc(size_t len);
void bf_store_image_buf_free(unsigned char *buf);

/* For a database from outside: turn on SQLite's defensive mode, trust
 * nothing in its schema, and run PRAGMA integrity_check. 0 when it reports
 * "ok", else -EBADMSG (no message set: the caller names the file). */
int bf_store_check_untrusted(bf_store *s);

#endif
