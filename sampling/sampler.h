/* sampler.h — the far lens: read a live CPython process's threads and stacks
 * from outside (process_vm_readv only: the target is never paused nor written).
 *
 * A bf_smp handle is created closed (bf_smp_new), then attached to one pid.
 * Every fallible function returns 0 or a negative errno; the one-line detail
 * is on the handle (bf_smp_errmsg). The library never prints.
 */
#ifndef BF_SAMPLER_H
#define BF_SAMPLER_H

#include <stddef.h>
#include <stdint.h>

typedef struct bf_smp bf_smp;

/* A Python code object as seen by the sampler (cached by remote address).
 * Strings are owned by the handle and stay valid until bf_smp_free. */
typedef struct bf_smp_code {
  const char *filename;
  const char *qualname; /* co_qualname from 3.11, co_name before */
  int64_t firstlineno;
  int64_t user_id;      /* free slot for the caller (e.g. a store function id); 0 initially */
  void *user;           /* free slot for the caller; never touched by the library */
} bf_smp_code;

typedef struct bf_smp_frame {
  const bf_smp_code *code;
  int32_t line;         /* current line; co_firstlineno when unknown */
  uint32_t flags;       /* BF_SMP_FRAME_* */
} bf_smp_frame;

/* Frame flags. ENTRY: the outermost Python frame run by one C call of the
 * eval loop (3.8-3.10: every frame; 3.11: is_entry; 3.12+: the frame above a
 * C-stack shim) — native.c maps eval-loop C frames to Python frames with it.
 * NATIVE: a C frame from native unwinding (see native.h). */
#define BF_SMP_FRAME_ENTRY 0x1
#define BF_SMP_FRAME_NATIVE 0x2

/* Thread status bits (same values as the store's BF_SAMPLE_* flags). */
#define BF_SMP_GIL 0x01    /* holds the GIL */
#define BF_SMP_ON_CPU 0x02 /* running on a CPU (from /proc, when asked) */
#define BF_SMP_IDLE 0x04   /* not running (sleeping/blocked), when asked */
#define BF_SMP_GC 0x08     /* the interpreter is collecting garbage */
#define BF_SMP_NATIVE 0x10 /* frames include unwound C frames (native.h) */
#define BF_SMP_EXC 0x20    /* an exception is being handled or raised (BF_SMP_WANT_EXC) */

/* Kernel lens classes (same values as the store's BF_WAIT_*; kstate.c). */
#define BF_SMP_K_NONE 0  /* not read */
#define BF_SMP_K_CPU 1   /* state R: on a CPU or waiting for one */
#define BF_SMP_K_NET 2   /* in a syscall on a socket */
#define BF_SMP_K_DISK 3  /* D state, or in a syscall on a regular file */
#define BF_SMP_K_LOCK 4  /* futex */
#define BF_SMP_K_GIL 5   /* futex with a timeout while another thread holds the GIL */
#define BF_SMP_K_SLEEP 6 /* nanosleep, clock_nanosleep, select/poll without fds */
#define BF_SMP_K_FAULT 7 /* D outside a syscall: a page fault */
#define BF_SMP_K_OTHER 8 /* pipe, eventfd, epoll, a child, another syscall */

/* What a blocked thread waits on: "<syscall> <target>", e.g. "recvfrom tcp
 * 127.0.0.1:5432", "read pipe", "futex lock", "clock_nanosleep". Owned by
 * the handle, stable until bf_smp_free (one per distinct text). */
typedef struct bf_smp_ktarget {
  const char *text;
  int64_t user_id; /* free slot for the caller (e.g. a store string id); 0 initially */
} bf_smp_ktarget;

typedef struct bf_smp_thread {
  int64_t native_tid;     /* kernel tid as the host sees it; 0 if unknown */
  int64_t ns_tid;         /* the same thread's tid in the target's own PID
                           * namespace (a container's); = native_tid outside one */
  uint64_t thread_id;     /* Python's threading.get_ident() */
  const char *name;       /* OS thread name (/proc comm); may be NULL */
  /* Python thread name (threading.Thread.name, UTF-8); NULL when unknown:
   * not a threading thread, threading not imported, or not read yet */
  const char *py_name;
  /* 1 while py_name is NULL only because the sampler has not looked for
   * this thread yet (it does within about a second) */
  int py_name_pending;
  uint32_t flags;         /* BF_SMP_* */
  int64_t cpu_ns;         /* cumulative CPU time (when BF_SMP_WANT_CPU_TIME), else -1 */
  int leaf_opcode;        /* BF_SMP_WANT_OPCODE: 0-255, else -1 (unknown, or not asked) */
  /* kernel lens (BF_SMP_WANT_KERNEL): class, target (NULL: none; a thread
   * in state R has none), and the thread's cumulative run-queue delay
   * (schedstat field 2), CPU time (field 1) and major faults (stat field
   * 12), which the caller
   * turns into deltas per sample. kclass 0: not read. */
  unsigned kclass;
  bf_smp_ktarget *ktarget;
  int64_t run_delay_ns;
  int64_t krun_ns;        /* cumulative on-CPU time (schedstat field 1) */
  uint64_t kswitch_in;    /* times scheduled in (schedstat field 3) */
  uint64_t majflt;
  size_t nframes;
  const bf_smp_frame *frames; /* innermost first */
} bf_smp_thread;

/* What bf_smp_sample should gather besides stacks. */
#define BF_SMP_WANT_STATE 0x1    /* on-CPU / idle from /proc/PID/task/TID/stat */
#define BF_SMP_WANT_CPU_TIME 0x2 /* per-thread CPU ns from /proc/.../schedstat */
#define BF_SMP_WANT_GIL_ONLY 0x4 /* only walk the thread holding the GIL */
/* one-shot reads (dump): read until two reads in a row agree on every frame
 * (all but the innermost frame's line), i.e. the stack held still between
 * them; -EIO when it never did within 2000 reads or 50 ms */
#define BF_SMP_WANT_SETTLED 0x8
/* --mode exception: set BF_SMP_EXC on a thread that is handling an exception
 * (sys.exc_info() would name one: the thread state's exc_info chain) or
 * raising one (current_exception; 3.8-3.11 curexc_type) */
#define BF_SMP_WANT_EXC 0x10
/* --opcodes (3.11+): bf_smp_thread.leaf_opcode, the opcode byte (its
 * specialised form) at the innermost Python frame's instruction pointer */
#define BF_SMP_WANT_OPCODE 0x20
/* with BF_SMP_WANT_STATE: the kernel lens (kclass, ktarget, run_delay_ns,
 * majflt), from /proc/PID/task/TID/{stat,schedstat,syscall} and fd links */
#define BF_SMP_WANT_KERNEL 0x40

/* New closed handle; NULL when out of memory. */
bf_smp *bf_smp_new(void);

/* Destroy; accepts NULL. */
void bf_smp_free(bf_smp *h);

/* Last error (never NULL). Borrowed until the next call on h. */
const char *bf_smp_errmsg(const bf_smp *h);

/* Attach to pid: find the interpreter, its version and layout.
 * Errors: -ESRCH no such process, -ENOEXEC not a Python process,
 * -EAGAIN Python found but its runtime is not initialised yet (retry),
 * -ENOTSUP unsupported version or build, -EPERM/-EACCES not allowed
 * (message says why and how to grant it). */
int bf_smp_attach(bf_smp *h, int pid);

/* Facts about the attached target. Borrowed, valid until bf_smp_free. */
const char *bf_smp_python_version(const bf_smp *h); /* "3.12.1" */
const char *bf_smp_python_build(const bf_smp *h);   /* "release" | "debug" | ... */
int bf_smp_pid(const bf_smp *h);

/* 0 when the attached target can give what want asks (BF_SMP_WANT_EXC,
 * BF_SMP_WANT_OPCODE), else -ENOTSUP with a one-line message on h naming
 * its version (--opcodes: 3.11+; --mode exception: every known layout). */
int bf_smp_can(bf_smp *h, unsigned want);

/* Take one sample of every thread (or only the GIL holder).
 * OUT: *threads (array of *n, borrowed until the next call on h).
 * Errors: -ESRCH target gone; -EIO torn or garbage read even after the
 * re-reads (skip this sample, count it invalid; the handle stays usable). */
int bf_smp_sample(bf_smp *h, unsigned want, const bf_smp_thread **threads, size_t *n);

/* Count of process_vm_readv calls so far (for benchmarks). */
uint64_t bf_smp_read_calls(const bf_smp *h);
/* Bytes and iovecs asked of process_vm_readv so far (for benchmarks). */
uint64_t bf_smp_read_bytes(const bf_smp *h);
uint64_t bf_smp_read_iovs(const bf_smp *h);

/* Consistency of the samples so far. A sample is checked before it is
 * returned (every caller frame stopped where it can have a child, no more
 * frames than the recursion depth, 3.8-3.10 frames executing); a torn one is
 * read again at once, and given up (-EIO) after a few reads. */
typedef struct bf_smp_consistency_stats {
  uint64_t retries;   /* reads repeated because the stack changed while read */
  uint64_t invalid;   /* samples given up as torn */
  uint64_t stable;    /* kept although a check failed: read the same twice */
  uint64_t truncated; /* stacks cut at 4096 frames (outermost frame "<truncated>") */
  uint64_t cut;       /* samples whose stack was cut at a caller read after its
                         child returned (kept from that caller outwards) */
  uint64_t stalled;   /* torn reads stretched by the sampler's own preemption
                         (longer than the retry window): the window restarted */
} bf_smp_consistency_stats;
void bf_smp_consistency(const bf_smp *h, bf_smp_consistency_stats *out);

/* Human-readable reason for a failed attach by errno (static string). */
const char *bf_smp_strerror(int err);

/* ---- recording into the store (sampling/record.c) --------------------- */

struct bf_store;

typedef struct bf_smp_progress {
  double elapsed_s;
  int64_t samples, missed, invalid;
  double achieved_rate_hz;
} bf_smp_progress;

typedef struct bf_smp_record_opts {
  int pid;                 /* attach mode when > 0 */
  char *const *argv;       /* launch mode: command to run (NULL-terminated) */
  int clock_cpu;           /* 0 wall, 1 cpu */
  int gil_only;
  int no_idle;             /* wall clock: leave out threads found idle */
  double rate_hz;          /* 1 .. 1e6 */
  double duration_s;       /* 0 = until exit / interrupt */
  const char *label;
  const char *commit;      /* NULL = git rev-parse HEAD in the target's cwd */
  int64_t ttl_ns;          /* 0 = never expires */
  int subprocesses;        /* follow Python children (own session, parent_id) */
  int64_t parent_session;  /* 0 = none */
  int native;              /* merged Python + C stacks (native.h) */
  const char *native_threads; /* NULL or the --native-threads filter */
  int async_tasks;         /* asyncio tasks as task:NAME threads (tasks.h) */
  int no_kernel;           /* wall clock: leave out the kernel lens (kstate.c) */
  int exc_only;            /* --mode exception: only threads handling or raising one */
  int opcodes;             /* --opcodes (3.11+): the leaf frame's opcode in each sample */
  int memory;              /* --memory: charge resident-memory changes to stacks (store.h) */
  volatile int *stop;      /* set non-zero (e.g. from a signal handler) to stop */
  /* OUT (may be NULL): the launched command's pid while it runs, else 0, so a
   * signal handler can pass a signal on. A launched command is always waited
   * for, also after a stop. */
  volatile int *child_pid;
  /* OUT (may be NULL): set to 1 when duration_s ended while the launched
   * command still ran, and it was stopped then (SIGTERM, and SIGKILL 2 s
   * later if need be), as py-spy stops its command; its wait status is
   * *exit_status as always. */
  int *child_stopped;
  /* --native (may be NULL): set (by a SIGTSTP handler) to suspend: every
   * stopped-for-sampling thread is released and detached first, then this
   * process stops itself with SIGTSTP; on SIGCONT threads are seized again
   * and sampling goes on (the ticks in between count as missed). */
  volatile int *suspend;
  /* Called about 4 times a second (may be NULL). */
  void (*progress)(void *ud, const bf_smp_progress *p);
  void *progress_ud;
  /* OUT (may be NULL): the session's id once it exists (record --push's
   * thread waits for it). */
  volatile int64_t *session_started;
} bf_smp_record_opts;

/* Sample a target into a new session of store until it exits, duration passes
 * or *opts->stop is set; the session is finalised in every case once created.
 * OUT: *session_id (also set when the capture failed after the session was
 * created), *exit_status (launch mode: the command's wait status, else -1).
 * Errors as bf_smp_attach plus store errors (-EIO); message on h. */
int bf_smp_record(bf_smp *h, struct bf_store *store, const bf_smp_record_opts *opts,
                  int64_t *session_id, int *exit_status);

#endif
