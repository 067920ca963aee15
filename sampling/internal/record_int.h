/* record_int.h — what record.c (the loop, the sessions' metadata) and
 * record_keep.c (a tick's stacks into the store) share: the state kept per
 * target process and per thread, and the keeping functions.
 */
#ifndef BF_RECORD_INT_H
#define BF_RECORD_INT_H

#include <stddef.h>
#include <stdint.h>

#include "cpuclock.h"
#include "native.h"
#include "session_meta.h"
#include "smp_int.h"
#include "store.h"
#include "tasks.h"

/* A sample's kernel lens part (wall clock): its class and target, and the
 * run-queue delay and major faults since the thread's previous sample. */
typedef struct rec_kern {
  uint32_t wait;   /* BF_WAIT_*, 0: not read */
  uint32_t majflt;
  int64_t runq_ns, cpu_ns;
  bf_smp_ktarget *target; /* the handle's, stable; NULL: none */
} rec_kern;

/* Kernel lens: one thread's run-queue summary, kept when it goes away or the
 * session ends, for extra.kernel.threads (rec_kern_summary). */
typedef struct rec_kern_row {
  int64_t tid, runq_ns, runq_p50_ns, runq_p99_ns;
  uint64_t samples;
  long long voluntary, involuntary; /* context switches; -1: unknown */
} rec_kern_row;

/* Per-thread memory between ticks: CPU clock and the last stack interned. */
typedef struct rec_thread {
  int64_t tid;
  int64_t store_thread_id;
  int64_t last_cpu_ns;    /* cpu clock: the thread's CPU time charged up to */
  int64_t cpu_seen_ns;    /* cpu clock: the thread's CPU time at the last tick */
  bf_sample *batch;       /* cpu clock: on-CPU samples not written yet (see rec_cpu_charge) */
  size_t nbatch;
  bf_sample *wbatch;      /* cpu clock: samples of where it waits, meanwhile */
  size_t nwbatch;
  int64_t last_switch_ns, switch_seen_ns; /* cpu clock: its switch work, charged / seen */
  int64_t last_stack_id;
  int named;              /* the store has its name: 0 none, 1 the OS name, 2 the Python name */
  bf_smp_frame *last_frames;
  size_t last_n, last_cap;
  int gen;
  int64_t seen_ns;        /* monotonic time of the last tick that returned the thread */
  bf_sample held;         /* --async task: its current run of one stack, not written yet */
  int64_t k_run_delay;    /* kernel lens: schedstat run delay, CPU time and major */
  int64_t k_run;          /* faults at the previous sample (k_seen 0: none yet) */
  uint64_t k_majflt;
  int k_seen;
  int64_t k_ledger;       /* run-queue delay charged minus recorded by the kernel so far */
  int64_t k_cpu_ledger;   /* the same for CPU time */
  unsigned k_block_class; /* the last class it was found blocked in, and its target */
  bf_smp_ktarget *k_block_target;
  /* kernel lens, for the session summary: run-queue delay in all, per-sample
   * delays (a bounded reservoir for p50/p99) */
  int64_t k_runq_total_ns;
  int64_t *k_runq_v;
  size_t k_runq_n, k_runq_cap;
  uint64_t k_runq_seen;
} rec_thread;

typedef struct rec_memory rec_memory; /* record --memory (memsample.h) */

typedef struct target {
  bf_smp *h;
  int pid;
  int own;          /* h allocated here (subprocess) */
  int64_t session_id;
  bf_session_info info;
  bf_meta meta; /* host, commit, command: the session's strings */
  char version[32];
  int64_t samples, missed, invalid, ticks;
  int64_t late, max_late_ns; /* ticks sampled over one period behind schedule (caught up) */
  bf_smp_consistency_stats cs0; /* the handle's torn-stack figures at session start */
  int invalid_run; /* consecutive invalid samples */
  int64_t start_mono;
  int64_t start_cpu_ns; /* profiler CPU when the session began */
  int exited;
  int own_child; /* tg[0] while it is our launched, unreaped child (record.c) */
  rec_thread *threads;
  size_t nthreads, cap_threads;
  int gen;
  /* samples held in memory while another process holds the database's write
   * lock (drained in order once it is free; bounded, the excess counted) */
  struct pend_sample *pend;
  size_t npend, pend_head, cap_pend, pend_bytes;
  int64_t lock_held, lock_dropped, next_drain_ns;
  bf_smp_native *nat; /* --native: stops threads, merges C frames (native.c) */
  bf_cpuclock *cc;    /* --clock cpu: the threads' real CPU time (cpuclock.c) */
  int64_t cpu_charged_ns, proc_cpu0_ns; /* cpu clock: weights written; process CPU at start */
  int64_t deadline_ns; /* cpu clock: this tick's deadline if the sampler slept until it, else 0 */
  int sampler_rt;      /* cpu clock: the sampler runs SCHED_FIFO (1), or was refused (0) */
  int64_t lag_sum_ns, lag_n; /* cpu clock: from the on-CPU instant to the stacks' read */
  char *extra_json;   /* the session's extra_json as last written (record.c) */
  char *py_json;      /* extra.python: the interpreter it runs (interp.c), or NULL */
  bf_smp_tasks *tk;   /* --async: asyncio tasks read after each sample */
  size_t next_hint;   /* rec_thread_get: where the next thread likely is */
  int64_t k_runq_total_ns, k_weight_ns; /* kernel lens: run-queue delay and wall charged, all threads */
  uint64_t k_rng;     /* kernel lens: the reservoirs' random numbers */
  rec_kern_row *k_rows; /* kernel lens: threads' summaries for extra (record.c), bounded */
  size_t k_nrows, k_cap_rows;
  rec_memory *mem;    /* --memory: the memory reader, else NULL */
} target;

/* record_keep.c. Unless said otherwise each returns 0 or a negative errno
 * (a store error has its message on the store). */

/* The thread's state, added zeroed when new; NULL when out of memory. */
rec_thread *rec_thread_get(target *t, int64_t tid);
/* cpu clock: write r's batch of on-CPU samples, sharing the CPU it used up
 * to cpu_ns among them (its switch work among the waits seen meanwhile). */
int rec_cpu_charge(bf_store *st, target *t, rec_thread *r, int64_t cpu_ns);
/* rec_cpu_charge for every thread of t, up to the CPU time last seen. */
int rec_cpu_flush(bf_store *st, target *t);
/* Drop threads no tick has returned for a second (gil_only: also gone from /proc). */
void rec_forget_threads(bf_store *st, target *t, int64_t now, int gil_only);
/* Intern th's stack, reusing r's last one when unchanged. OUT: *stack_id.
 * -EBUSY: another process holds the write lock. */
int rec_intern_stack(bf_store *st, rec_thread *r, const bf_smp_thread *th, int64_t *stack_id);
/* Store a sample, or hold it (in order) while the database is locked. */
/* Intern r's thread (tid) in the store with tname once there is one; a
 * Python name (th->py_name) replaces an OS name stored before it, so a
 * launched program's main thread ends as MainThread, as when attached. */
int rec_name_thread(bf_store *st, target *t, rec_thread *r, int64_t tid, const bf_smp_thread *th,
                    const char *tname);
int rec_keep_sample(bf_store *st, target *t, rec_thread *r, const bf_smp_thread *th, const char *tname,
                    int64_t ts, uint32_t flags, int64_t weight);
/* Write held samples while the lock is free: 0 (some may remain) or a fatal error. */
int rec_drain_pending(bf_store *st, target *t, int64_t now);
/* Kernel lens: keep thread r's run-queue summary (total, p50/p99 of its
 * per-sample delays, context switches) in t->k_rows, once; after
 * REC_KERN_ROWS_MAX threads, no more (the first threads of a long churn). */
#define REC_KERN_ROWS_MAX 8192
void rec_kern_summary(target *t, rec_thread *r);
/* Free the samples still held (never written). */
void rec_pending_free(target *t);

#endif
