/* record.c — the sampling loop: launch or attach, tick at a jittered rate,
 * walk every target's threads and append samples to a store session (the
 * rows themselves are record_keep.c's), then finalise the session's metadata
 * (rates, totals, status) whatever happens. Per-sample work hits no SQLite:
 * ids are cached on the code objects.
 */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "cpuclock.h"
#include "jsonw.h"
#include "memsample.h"
#include "native.h"
#include "record_int.h" /* target, rec_thread; the keeping is record_keep.c's */
#include "session_meta.h"
#include "smp_int.h"
#include "store.h"
#include "tasks.h"

#ifndef BF_VERSION
#define BF_VERSION "0.0.0"
#endif

#define MAX_TARGETS 64
#define SMP_BACKLOG_NS 10000000 /* how far behind schedule the loop still catches up */
#define CPU_BATCH 32 /* cpu clock: on-CPU samples of a thread that share its CPU time */
/* cpu clock: a thread the sampler displaced switched out this long at most
 * before the sampler's own switch-in record (1-4 us measured in a VM) */
#define SELF_IN_SLACK_NS 8000

static int seterr(bf_smp *h, int rc, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int seterr(bf_smp *h, int rc, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(h->err, sizeof h->err, fmt, ap);
  va_end(ap);
  return rc;
}

#define BUSY_MS 2 /* a sampler waits this long for the write lock, then holds on */

/* Read a small /proc file. */
static ssize_t read_file(const char *path, char *buf, size_t len) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  ssize_t n = 0, r;
  while ((size_t)n < len - 1 && (r = read(fd, buf + n, len - 1 - (size_t)n)) > 0) n += r;
  close(fd);
  buf[n < 0 ? 0 : n] = 0;
  return n;
}

static int64_t profiler_cpu_ns(void) {
  struct rusage ru;
  if (getrusage(RUSAGE_SELF, &ru) < 0) return 0;
  return ((int64_t)ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1000000000 +
         ((int64_t)ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1000;
}

/* The whole process's CPU time (exact, any process may read it); -1 when gone. */
static int64_t process_cpu_ns(int pid) {
  clockid_t cid;
  struct timespec ts;
  if (clock_getcpuclockid(pid, &cid) != 0 || clock_gettime(cid, &ts) != 0) return -1;
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* The cpu clock's part of the session's extra, "cpu_clock":{...} as the
 * next member of the object open in w: method and why, whether the sampler
 * ran real-time, the mean time from a tick's deadline to its read, and the
 * CPU charged beside what the threads and the whole process used. */
static void cpuclock_write(const target *t, bf_jw *w) {
  bf_jw_key(w, "cpu_clock");
  bf_jw_obj(w);
  bf_jw_kstr(w, "method", bf_cpuclock_method(t->cc));
  bf_jw_kstr(w, "why", bf_cpuclock_why(t->cc));
  bf_jw_kbool(w, "sampler_rt", t->sampler_rt);
  bf_jw_key(w, "read_lag_us");
  bf_jw_numf(w, "%.1f", t->lag_n ? (double)t->lag_sum_ns / (double)t->lag_n / 1e3 : 0.0);
  bf_jw_key(w, "charged_ms");
  bf_jw_numf(w, "%.3f", (double)t->cpu_charged_ns / 1e6);
  bf_jw_key(w, "threads_ms");
  bf_jw_numf(w, "%.3f", (double)bf_cpuclock_total_ns(t->cc) / 1e6);
  bf_jw_key(w, "process_ms");
  int64_t p1 = process_cpu_ns(t->pid);
  if (p1 >= 0 && t->proc_cpu0_ns >= 0)
    bf_jw_numf(w, "%.3f", (double)(p1 - t->proc_cpu0_ns) / 1e6);
  else
    bf_jw_null(w);
  bf_jw_kuint(w, "lost_switches", bf_cpuclock_lost(t->cc));
  bf_jw_end(w);
}

/* The kernel lens's part of the session's extra, "kernel":{...} as the next
 * member of the object open in w: the run-queue share of the wall charged
 * and each thread's summary; nothing when the lens did not run. */
static void kernel_write(const target *t, bf_jw *w) {
  if (!t->k_weight_ns) return;
  bf_jw_key(w, "kernel");
  bf_jw_obj(w);
  bf_jw_key(w, "runq_ms");
  bf_jw_numf(w, "%.3f", (double)t->k_runq_total_ns / 1e6);
  bf_jw_key(w, "runq_share");
  bf_jw_numf(w, "%.4f", (double)t->k_runq_total_ns / (double)t->k_weight_ns);
  bf_jw_key(w, "threads");
  bf_jw_arr(w);
  for (size_t i = 0; i < t->k_nrows; i++) {
    const rec_kern_row *k = &t->k_rows[i];
    bf_jw_obj(w);
    bf_jw_kint(w, "tid", k->tid);
    bf_jw_key(w, "runq_ms");
    bf_jw_numf(w, "%.3f", (double)k->runq_ns / 1e6);
    bf_jw_key(w, "runq_p50_us");
    bf_jw_numf(w, "%.1f", (double)k->runq_p50_ns / 1e3);
    bf_jw_key(w, "runq_p99_us");
    bf_jw_numf(w, "%.1f", (double)k->runq_p99_ns / 1e3);
    bf_jw_kuint(w, "samples", k->samples);
    bf_jw_kint(w, "voluntary_switches", k->voluntary);
    bf_jw_kint(w, "involuntary_switches", k->involuntary);
    bf_jw_end(w);
  }
  bf_jw_end(w);
  bf_jw_end(w);
}

/* The session's extra_json, malloc'd (NULL when out of memory, or at the
 * start when there is nothing to say). At the start only "python" (the
 * interpreter, read now: an incomplete session still says what ran); at
 * the end first the sampler's figures: ticks taken late while catching up,
 * torn and truncated stacks, samples held and dropped while the database
 * was locked; then the cpu clock's, memory's, asyncio tasks', kernel
 * lens's and --native's parts, each when it ran. */
static char *extra_json(target *t, int at_end) {
  if (!at_end && !t->py_json) return NULL;
  bf_jw w;
  if (bf_jw_mem(&w)) return NULL;
  bf_jw_obj(&w);
  if (at_end) {
    bf_smp_consistency_stats cs;
    bf_smp_consistency(t->h, &cs);
    bf_jw_kint(&w, "late_ticks", (long long)t->late);
    bf_jw_key(&w, "max_late_ms");
    bf_jw_numf(&w, "%.3f", (double)t->max_late_ns / 1e6);
    bf_jw_kuint(&w, "torn_retried", cs.retries - t->cs0.retries);
    bf_jw_kuint(&w, "torn_invalid", cs.invalid - t->cs0.invalid);
    bf_jw_kuint(&w, "torn_cut", cs.cut - t->cs0.cut);
    bf_jw_kuint(&w, "torn_stalled", cs.stalled - t->cs0.stalled);
    bf_jw_kuint(&w, "stacks_truncated", cs.truncated - t->cs0.truncated);
    bf_jw_kint(&w, "lock_held", (long long)t->lock_held);
    bf_jw_kint(&w, "lock_dropped", (long long)t->lock_dropped);
    if (t->cc) cpuclock_write(t, &w);
    rec_memory_json(t, &w);
    const char *tks = bf_smp_tasks_status(t->tk);
    if (*tks) bf_jw_kstr(&w, "async_tasks", tks);
    for (size_t i = 0; i < t->nthreads; i++) rec_kern_summary(t, &t->threads[i]);
    kernel_write(t, &w);
    if (t->nat) bf_smp_native_stats_write(t->nat, &w);
  }
  if (t->py_json) { /* written once at the start (interp.c), kept as JSON */
    bf_jw_key(&w, "python");
    bf_jw_raw(&w, t->py_json);
  }
  bf_jw_end(&w);
  return bf_jw_mem_done(&w);
}

static int session_start(bf_smp *err_h, bf_store *st, target *t, const bf_smp_record_opts *o,
                         int64_t parent) {
  bf_session_info *in = &t->info;
  snprintf(t->version, sizeof t->version, "%s", bf_smp_python_version(t->h));
  bf_meta_src ms = {.kind = "sampled", .clock = o->clock_cpu ? "cpu" : "wall",
                    .mode = o->native ? "native" : o->gil_only ? "gil" : o->exc_only ? "exception" : "all",
                    .pid = t->pid,
                    .commit = o->commit, .find_commit = 1, .python_version = t->version,
                    .python_build = bf_smp_python_build(t->h), .profiler_version = BF_VERSION,
                    .label = o->label, .ttl_ns = o->ttl_ns};
  bf_meta_collect(&ms, &t->meta, in);
  free(t->py_json);
  if (smp_interp_json(t->h, t->pid, &t->py_json) < 0) t->py_json = NULL;
  free(t->extra_json);
  in->extra_json = t->extra_json = extra_json(t, 0);
  in->rate_hz = o->rate_hz;
  in->parent_id = parent;
  int rc = bf_store_session_begin(st, in, &t->session_id);
  if (rc < 0) return seterr(err_h, rc, "%s", bf_store_errmsg(st));
  in->id = t->session_id;
  rc = bf_store_flush(st);
  if (rc < 0) return seterr(err_h, rc, "%s", bf_store_errmsg(st));
  t->start_mono = bf_mono_ns();
  t->start_cpu_ns = profiler_cpu_ns();
  bf_smp_consistency(t->h, &t->cs0);
  if (o->clock_cpu && !t->cc) {
    t->cc = bf_cpuclock_new(t->pid, (int64_t)(1e9 / o->rate_hz));
    if (!t->cc) return seterr(err_h, -ENOMEM, "out of memory");
    t->proc_cpu0_ns = process_cpu_ns(t->pid);
  }
  if (o->memory && !t->mem && !(t->mem = rec_memory_new(t->pid))) return seterr(err_h, -ENOMEM, "out of memory");
  return 0;
}

static int session_finish(bf_store *st, target *t, const char *status, int64_t end_mono,
                          int64_t cpu_ns) {
  bf_session_info *in = &t->info;
  int rc0 = t->cc ? rec_cpu_flush(st, t) : 0;
  /* held samples first: wait for a lock holder up to 30 s in all */
  bf_store_set_busy_timeout(st, 1000);
  int64_t give_up = bf_mono_ns() + 30000000000LL;
  int drc = 0;
  while (t->pend_head < t->npend && bf_mono_ns() < give_up) {
    t->next_drain_ns = 0;
    if ((drc = rec_drain_pending(st, t, bf_mono_ns())) < 0) break;
  }
  if (t->pend_head < t->npend) { /* still locked: those are lost, and counted */
    t->lock_dropped += (int64_t)(t->npend - t->pend_head);
    t->npend = t->pend_head;
  }
  bf_store_set_busy_timeout(st, 30000);
  if (!rc0 && t->mem) rc0 = rec_memory_flush(st, t); /* waits for a lock holder like the samples */
  for (size_t i = 0; i < t->nthreads; i++) /* tasks' last runs */
    if (t->threads[i].held.count && bf_store_sample_add(st, t->session_id, &t->threads[i].held) < 0)
      t->lock_dropped += t->threads[i].held.count;
  in->duration_ns = end_mono - t->start_mono;
  in->samples = t->samples;
  in->missed = t->missed;
  in->invalid = t->invalid;
  in->achieved_rate_hz = in->duration_ns > 0 ? (double)t->ticks * 1e9 / (double)in->duration_ns : 0;
  in->profiler_cpu_ns = cpu_ns - t->start_cpu_ns;
  in->status = status;
  free(t->extra_json);
  in->extra_json = t->extra_json = extra_json(t, 1);
  int rc = bf_store_flush(st);
  int rc2 = bf_store_session_update(st, in);
  int rc3 = bf_store_flush(st);
  bf_store_set_busy_timeout(st, BUSY_MS);
  return rc0 < 0 ? rc0 : drc < 0 ? drc : rc < 0 ? rc : rc2 < 0 ? rc2 : rc3;
}


/* cpu clock: one thread of a tick. A stack is kept only when its thread was
 * on a CPU at the moment it was read (not merely runnable). Ticks are
 * uniform in time, so each CPU instant of a thread is equally likely to be
 * seen: the samples of a thread split its exact CPU time in proportion to
 * their counts (a batch of CPU_BATCH at a time shares the CPU the thread
 * used meanwhile). Threads' totals are exact; functions get their share.
 * Returns 0 or a fatal negative errno. */
static int tick_cpu_thread(bf_store *st, target *t, rec_thread *r, const bf_smp_thread *th, int64_t tid,
                           const char *tname, int64_t ts, uint32_t flags, int64_t on_from, int64_t read_at,
                           int64_t read_end) {
  int rc;
  rc = rec_name_thread(st, t, r, tid, th, tname);
  if (rc == -EBUSY) return 0; /* database locked: look again next tick */
  if (rc < 0) return rc;
  int64_t stack_id;
  int64_t cpu;
  int known, on;
  if (!th->native_tid) return 0; /* no host tid: no CPU time to go by */
  int64_t sw;
  int waiting;
  rc = bf_cpuclock_thread(t->cc, th->native_tid, on_from, read_at, read_end, &cpu, &on, &known,
                          &sw, &waiting);
  if (rc < 0) return rc;
  if (!known || r->last_cpu_ns < 0 || cpu < r->cpu_seen_ns) { /* new, or a tid reused */
    if ((rc = rec_cpu_charge(st, t, r, r->cpu_seen_ns)) < 0) return rc;
    r->nwbatch = 0;
    r->last_cpu_ns = r->cpu_seen_ns = cpu;
    r->last_switch_ns = r->switch_seen_ns = sw;
    return 0;
  }
  r->cpu_seen_ns = cpu;
  r->switch_seen_ns = sw;
  if (!on && !(waiting && r->nwbatch < CPU_BATCH)) return 0;
  if ((rc = rec_intern_stack(st, r, th, &stack_id)) == -EBUSY) { /* a new stack, locked out */
    t->lock_dropped++;
    return 0;
  }
  if (rc < 0) return rc;
  flags = (flags & ~(uint32_t)BF_SAMPLE_IDLE) | BF_SAMPLE_ON_CPU;
  if (!on) { /* where it waits: its switch work goes there (see rec_cpu_charge) */
    if (!r->wbatch && !(r->wbatch = malloc(CPU_BATCH * sizeof *r->wbatch))) return -ENOMEM;
    r->wbatch[r->nwbatch++] = (bf_sample){.thread_id = r->store_thread_id, .stack_id = stack_id, .ts_ns = ts, .flags = flags, .count = 1};
    return 0;
  }
  if (!r->batch && !(r->batch = malloc(CPU_BATCH * sizeof *r->batch))) return -ENOMEM;
  r->batch[r->nbatch++] = (bf_sample){.thread_id = r->store_thread_id, .stack_id = stack_id, .ts_ns = ts, .flags = flags, .count = 1};
  if (r->nbatch == CPU_BATCH && (rc = rec_cpu_charge(st, t, r, cpu)) < 0) return rc;
  return 0;
}

/* One tick for one target. Returns 0, or -ESRCH when it is gone, or a fatal
 * store error. */
static int tick(bf_store *st, target *t, const bf_smp_record_opts *o, int64_t now,
                int64_t interval_ns) {
  /* the cpu clock reads thread state itself, right after the stacks */
  unsigned want = o->clock_cpu ? 0 : BF_SMP_WANT_STATE | (o->no_kernel ? 0 : BF_SMP_WANT_KERNEL);
  if (o->gil_only) want |= BF_SMP_WANT_GIL_ONLY;
  if (o->exc_only) want |= BF_SMP_WANT_EXC;
  if (o->opcodes) want |= BF_SMP_WANT_OPCODE;
  const bf_smp_thread *th;
  size_t n;
  /* the read's start and end: for the cpu clock only (a clock read less
   * per tick at the top rate) */
  int64_t pre_ns = o->clock_cpu ? bf_mono_ns() : now;
  int rc = t->nat ? bf_smp_native_sample(t->nat, want, &th, &n)
                  : bf_smp_sample(t->h, want, &th, &n);
  int64_t read_end = o->clock_cpu ? bf_mono_ns() : now;
  if (t->mem && rc >= 0) rec_memory_read(t->mem); /* right after the stacks it is charged to */
  /* a torn stack (changed while read) is re-read at once inside
   * bf_smp_sample; -EIO here is a sample given up (counted invalid) */
  if (rc == -ESRCH) return rc;
  /* checked after the read: a target that ended before it was read (its pid
   * perhaps taken by another process since) gives no sample. Our own
   * unreaped child keeps its pid (a zombie's reads fail with ESRCH), so it
   * needs no poll per tick: its whole exit is seen by tick_targets' waitid
   * (a poll per tick was 9% of the sampler's time at its top rate) */
  if (!t->own_child && smp_pin_gone(t->h)) return -ESRCH;
  if (rc == -EPERM && t->nat) return seterr(t->h, rc, "%s", bf_smp_native_errmsg(t->nat));
  if (rc < 0) {
    if (rc == -ENOMEM) return rc;
    t->invalid++;
    /* a run of torn samples: the process may have exec'd; look again */
    if (++t->invalid_run >= 64) {
      t->invalid_run = 0;
      for (size_t i = 0; i < t->nthreads; i++) {
        t->threads[i].last_stack_id = -1;
        t->threads[i].last_n = 0;
      }
      rc = bf_smp_attach(t->h, t->pid);
      if (rc == -ESRCH) return rc;
    }
    return 0;
  }
  t->invalid_run = 0;
  if (o->async_tasks && !t->nat && (t->tk || (t->tk = bf_smp_tasks_new(t->h))))
    bf_smp_tasks_sample(t->tk, th, n, &th, &n); /* tasks follow as task:NAME threads */
  t->ticks++;
  t->gen++;
  int64_t ts = now - t->start_mono;
  if (t->npend > t->pend_head && now >= t->next_drain_ns && (rc = rec_drain_pending(st, t, now)) < 0) return rc;
  /* cpu clock: the moment the stacks were read: just before the first
   * walk, not the walk that was kept (a walk torn by a stack changing under
   * it is read again). A thread on a CPU then that went to sleep or to wait
   * before read_end is left out: its stack may have been read where it
   * waits (on the demo service that made fake_db_wait 5-10 points high in
   * runs with many torn walks). With --native, the moment before the
   * threads were stopped (then read frozen). */
  int64_t read_at = pre_ns;
  if (t->nat) read_end = read_at;
  /* A thread counts as on a CPU then, or if it was preempted since the
   * tick's deadline (when the sampler slept until it): the sampler, waking,
   * may have displaced it (see bf_smp_record) */
  int64_t on_from = t->deadline_ns && t->deadline_ns <= read_at ? t->deadline_ns : read_at;
  if (t->cc) {
    bf_cpuclock_drain(t->cc);
    t->lag_sum_ns += read_at - on_from;
    t->lag_n++;
    /* Better, from its own switch records: since the sampler got a CPU
     * after the deadline (a thread it displaced left a few us before that).
     * Threads preempted between the deadline and then were waiting for a
     * CPU when it began, not on one (without SCHED_FIFO it may wait long,
     * and get one just as a thread of the target blocks). If the sampler
     * did not sleep until the deadline, its waking displaced nobody. */
    int64_t in = bf_cpuclock_self_in(t->cc);
    if (in >= 0 && in <= read_at)
      on_from = t->deadline_ns && in >= t->deadline_ns ? in - SELF_IN_SLACK_NS : read_at;
  }
  for (size_t i = 0; i < n; i++) {
    int64_t tid = th[i].native_tid ? th[i].native_tid : (int64_t)th[i].thread_id;
    rec_thread *r = rec_thread_get(t, tid);
    if (!r) return -ENOMEM;
    r->seen_ns = now;
    int64_t weight = interval_ns;
    uint32_t flags = th[i].flags;
    if (o->no_idle && !o->clock_cpu && (flags & BF_SMP_IDLE)) continue; /* cpu: never charged */
    if (o->exc_only && !(flags & BF_SMP_EXC)) continue; /* --mode exception (wall clock) */
    if (o->opcodes && th[i].leaf_opcode >= 0) flags |= BF_SAMPLE_OPCODE | (uint32_t)th[i].leaf_opcode << BF_SAMPLE_OPCODE_SHIFT;
    /* the Python name when known, else the OS name; the store keeps the
     * first name it gets, so a thread the sampler has not looked up yet is
     * interned unnamed and named on a later tick (then never asked again) */
    const char *tname = th[i].py_name ? th[i].py_name : th[i].py_name_pending ? NULL : th[i].name;
    char nsname[160];
    if (tname && th[i].ns_tid > 0 && th[i].ns_tid != th[i].native_tid) {
      /* in a container: the tid its own namespace knows stays visible */
      snprintf(nsname, sizeof nsname, "%s [ns tid %lld]", tname, (long long)th[i].ns_tid);
      tname = nsname;
    }
    if (o->clock_cpu) {
      rc = tick_cpu_thread(st, t, r, &th[i], tid, tname, ts, flags, on_from, read_at, read_end);
      if (rc < 0) return rc;
      continue;
    }
    if ((rc = rec_keep_sample(st, t, r, &th[i], tname, ts, flags, weight)) < 0) return rc;
  }
  return t->mem ? rec_memory_tick(st, t, th, n, ts) : 0;
}

/* Python children of pid (direct and deeper), by scanning /proc. */
static size_t children_of(int pid, int *out, size_t max) {
  char path[64], buf[256];
  size_t n = 0;
  snprintf(path, sizeof path, "/proc/%d/task/%d/children", pid, pid);
  if (read_file(path, buf, sizeof buf) <= 0) return 0;
  char *p = buf;
  while (*p && n < max) {
    char *end;
    long c = strtol(p, &end, 10);
    if (end == p) break;
    out[n++] = (int)c;
    p = end;
    while (*p == ' ') p++;
  }
  return n;
}

/* Sleep until deadline (monotonic ns). Below ~200 us per tick a sleep's
 * wake-up latency is as long as the interval, so high rates spin the rest. */
static void wait_until(int64_t deadline, int64_t interval) {
  int64_t now = bf_mono_ns();
  if (interval >= 200000) {
    struct timespec ts = {deadline / 1000000000, deadline % 1000000000};
    clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL); /* EINTR: check stop */
    return;
  }
  if (deadline - now > 150000) {
    int64_t wake = deadline - 80000;
    struct timespec ts = {wake / 1000000000, wake % 1000000000};
    clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL);
  }
  while (bf_mono_ns() < deadline) {
  }
}

static uint64_t xorshift(uint64_t *s) {
  uint64_t x = *s;
  x ^= x << 13;
  x ^= x >> 7;
  x ^= x << 17;
  return *s = x;
}

/* Ctrl-Z with --native: never keep a target stopped while we are stopped.
 * Release and detach every thread, stop (default SIGTSTP action), and seize
 * them again once continued. Returns 0 or a negative errno (message on h). */
static int suspend_native(bf_smp *h, target *tg, size_t ntg, const bf_smp_record_opts *o) {
  for (size_t i = 0; i < ntg; i++) {
    if (!tg[i].nat) continue;
    bf_smp_native_free(tg[i].nat); /* resumes and detaches (bounded wait) */
    tg[i].nat = NULL;
  }
  struct sigaction dfl, old;
  memset(&dfl, 0, sizeof dfl);
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  sigaction(SIGTSTP, &dfl, &old);
  raise(SIGTSTP); /* stopped here until SIGCONT */
  sigaction(SIGTSTP, &old, NULL);
  for (size_t i = 0; i < ntg; i++) {
    if (tg[i].exited) continue;
    int rc = bf_smp_native_new(tg[i].h, o->native_threads, &tg[i].nat);
    if (rc < 0) {
      char msg[256]; /* tg[i].h may be h: copied before h's message is written */
      snprintf(msg, sizeof msg, "%s", bf_smp_errmsg(tg[i].h));
      return seterr(h, rc, "after a suspend: %s", msg);
    }
  }
  return 0;
}

/* A launched command is never left behind: wait for it (a stop signal is
 * passed on to it meanwhile by the caller's handler). */
static void wait_launched(int pid, const bf_smp_record_opts *o, int *exit_status) {
  int st;
  while (waitpid(pid, &st, 0) < 0) {
    if (errno != EINTR) {
      st = -1;
      break;
    }
  }
  if (o->child_pid) *o->child_pid = 0;
  *exit_status = st;
}

/* Launch argv; returns the child pid or a negative errno (message on h). */
static int launch(bf_smp *h, char *const *argv) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) < 0) return seterr(h, -errno, "pipe: %s", strerror(errno));
  pid_t parent = getpid();
  pid_t c = fork();
  if (c < 0) return seterr(h, -errno, "fork: %s", strerror(errno));
  if (c == 0) {
    close(fds[0]);
    /* never outlive bifocal, even when it is killed outright (SIGKILL) */
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(128 + SIGKILL);
    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    signal(SIGPIPE, SIG_DFL);
    execvp(argv[0], argv);
    int e = errno;
    if (write(fds[1], &e, sizeof e) < 0) _exit(127);
    _exit(127);
  }
  close(fds[1]);
  int e = 0;
  ssize_t r = read(fds[0], &e, sizeof e);
  close(fds[0]);
  if (r == (ssize_t)sizeof e) {
    waitpid(c, NULL, 0);
    return seterr(h, -e, "cannot run '%s': %s", argv[0], strerror(e));
  }
  return c;
}

/* Launch o->argv and wait for its interpreter to be initialised (shims may
 * exec first), attaching h to it. Returns the pid, or a negative errno with
 * the message on h (and *exit_status once the command has ended). */
static int launch_attached(bf_smp *h, const bf_smp_record_opts *o, int *exit_status) {
  int pid = launch(h, o->argv);
  if (pid < 0) return pid;
  if (o->child_pid) *o->child_pid = pid;
  int64_t give_up = bf_mono_ns() + 15 * 1000000000LL, eio_since = 0;
  for (;;) {
    int rc = bf_smp_attach(h, pid);
    if (rc == 0) return pid;
    /* a command exec'ing its way to Python (a shim, a container's
     * unshare/chroot) can show the interpreter mapped a moment before its
     * memory reads back: a read failure is retried for up to a second */
    if (rc == -EIO) {
      if (!eio_since) eio_since = bf_mono_ns();
      if (bf_mono_ns() - eio_since < 1000000000LL) rc = -EAGAIN;
    } else {
      eio_since = 0;
    }
    int st2;
    if (waitpid(pid, &st2, WNOHANG) == pid) {
      *exit_status = st2;
      return seterr(h, -ENOEXEC, "'%s' exited before a Python runtime was seen in it", o->argv[0]);
    }
    if ((rc != -EAGAIN && rc != -ENOEXEC && rc != -ESRCH) || bf_mono_ns() > give_up ||
        (o->stop && *o->stop)) {
      if (rc == -ENOEXEC) seterr(h, rc, "'%s' (pid %d) is not a Python process", o->argv[0], pid);
      if (o->stop && *o->stop) { /* signalled (and passed on) before the runtime was up: wait */
        while (waitpid(pid, &st2, 0) < 0 && errno == EINTR) {
        }
        if (o->child_pid) *o->child_pid = 0;
        *exit_status = st2;
        return seterr(h, -EINTR, "interrupted before '%s' started its Python runtime; nothing recorded",
                      o->argv[0]);
      }
      /* cannot be profiled: it is not stopped half-way either; it runs to its
       * end (a stop signal is passed on meanwhile) and the error follows */
      char msg[sizeof h->err];
      snprintf(msg, sizeof msg, "%s", h->err);
      while (waitpid(pid, &st2, 0) < 0 && errno == EINTR) {
      }
      if (o->child_pid) *o->child_pid = 0;
      *exit_status = st2;
      return seterr(h, rc, "%s (the command ran unprofiled to its end)", msg);
    }
    struct timespec ts = {0, 200000};
    nanosleep(&ts, NULL);
  }
}

/* cpu clock: a sampler that waits for a CPU after its timer fires runs
 * when a thread of the target leaves one, and sees the target at those
 * moments only; real-time priority makes it run at its deadline. Not when
 * it spins between ticks (interval below 200 us): it would hog a CPU;
 * nor when BIFOCAL_CPU_CLOCK_RT=0. Returns whether it runs real-time. */
static int sampler_priority(const bf_smp_record_opts *o, int64_t interval) {
  int sampler_rt = 0;
  const char *rt = getenv("BIFOCAL_CPU_CLOCK_RT");
  if (o->clock_cpu && interval >= 200000 && !(rt && strcmp(rt, "0") == 0)) {
    struct sched_param sp = {.sched_priority = 1};
    sampler_rt = sched_setscheduler(0, SCHED_FIFO | SCHED_RESET_ON_FORK, &sp) == 0;
  }
  /* cpu clock, not real-time: no timer slack (50 us by default), so the
   * sampler wakes at its own jittered deadline, not on the next interrupt
   * within 50 us of it, which is often a target thread's own timer: ticks
   * would then fall just as that thread wakes (real-time tasks have none) */
  if (o->clock_cpu && !sampler_rt) prctl(PR_SET_TIMERSLACK, 1UL, 0UL, 0UL, 0UL);
  return sampler_rt;
}

/* One recording: its targets (the first is the command or --pid, then the
 * subprocesses followed), the launched command, and the tick schedule. */
typedef struct rec_run {
  bf_smp *h;
  bf_store *st;
  const bf_smp_record_opts *o;
  target tg[MAX_TARGETS];
  size_t ntg;
  int pid, launched, child_status, child_reaped;
  int duration_over; /* the loop ended because duration_s passed */
  int sampler_rt;
  int64_t interval, backlog, next; /* ns; next: the coming tick's time */
  int64_t next_reap_ns; /* when to look for the launched child's exit again */
  uint64_t rng;
} rec_run;

/* The duration is over and the launched command still runs: stop it as
 * py-spy does, SIGTERM, then SIGKILL if it is still there 2 s later. */
static void stop_launched(rec_run *r) {
  if (waitpid(r->pid, &r->child_status, WNOHANG) == r->pid) {
    r->child_reaped = 1;
    return;
  }
  if (r->o->child_stopped) *r->o->child_stopped = 1;
  kill(r->pid, SIGTERM);
  for (int64_t until = bf_mono_ns() + 2000000000; bf_mono_ns() < until;) {
    if (waitpid(r->pid, &r->child_status, WNOHANG) == r->pid) {
      r->child_reaped = 1;
      return;
    }
    struct timespec ts = {0, 10000000};
    nanosleep(&ts, NULL);
  }
  kill(r->pid, SIGKILL);
}

/* Wait for the next tick (jittered); returns its time. OUT: *deadline, the
 * time slept until (0 when the tick was late), for the cpu clock (see tick). */
static int64_t next_tick(rec_run *r, int64_t *deadline) {
  target *tg = r->tg;
  int64_t interval = r->interval;
  /* jitter: uniform in [0.5, 1.5) intervals so periodic work is not aliased */
  int64_t step = interval / 2 + (int64_t)(xorshift(&r->rng) % (uint64_t)(interval > 0 ? interval : 1));
  r->next += step;
  int64_t next = r->next;
  int64_t now = bf_mono_ns();
  *deadline = now < next ? next : 0;
  if (now < next) {
    if (tg[0].nat && !tg[0].exited) /* hands signals on to seized threads meanwhile */
      bf_smp_native_wait_until(tg[0].nat, next);
    else
      wait_until(next, interval);
    now = bf_mono_ns();
  } else if (now - next > r->backlog) {
    /* too far behind to catch up: those ticks are lost */
    int64_t lost = (now - next) / interval;
    for (size_t i = 0; i < r->ntg; i++)
      if (!tg[i].exited) tg[i].missed += lost;
    r->next = now;
  } else if (now - next > interval) { /* late but within the backlog: sample now, back to
                                        * back, until on time */
    for (size_t i = 0; i < r->ntg; i++)
      if (!tg[i].exited) {
        tg[i].late++;
        if (now - next > tg[i].max_late_ns) tg[i].max_late_ns = now - next;
      }
  }
  return now;
}

/* Tick every live target. Returns 0 (OUT: *alive, the targets still there)
 * or a fatal negative errno, its message on r->h. */
static int tick_targets(rec_run *r, int64_t now, int64_t w, int64_t deadline, int *alive) {
  target *tg = r->tg;
  /* a launched command that ends once a stop came (the signal was passed on
   * to it) was interrupted, even when its exit is seen before the stop */
  const char *ended = r->o->stop && *r->o->stop ? "interrupted" : "complete";
  *alive = 0;
  tg[0].own_child = r->launched && !r->child_reaped && !tg[0].nat;
  for (size_t i = 0; i < r->ntg; i++) {
    if (tg[i].exited) continue;
    tg[i].deadline_ns = deadline;
    tg[i].sampler_rt = r->sampler_rt;
    int rc = tick(r->st, &tg[i], r->o, now, w);
    if (rc == -ESRCH) {
      tg[i].exited = 1;
      session_finish(r->st, &tg[i], r->launched && i == 0 ? ended : "target-exited", now,
                     profiler_cpu_ns());
      continue;
    }
    if (rc == -EPERM && tg[i].nat) return rc; /* message set by tick */
    if (rc < 0) return seterr(r->h, rc, "%s", rc == -ENOMEM ? "out of memory" : bf_store_errmsg(r->st));
    (*alive)++;
  }
  /* a traced child reports its stops and exit through native.c's waits;
   * otherwise it is looked for at most once a millisecond (a wait4 per tick
   * was a fifth of the sampler's syscalls at its top rate): until then an
   * ended child is a zombie whose reads fail with ESRCH, which ends its
   * session above. The exit is seen without reaping first (waitid WNOWAIT:
   * a group leader is reported once all its threads have exited), so the
   * session ends while the zombie's CPU time (cpu_clock.process_ms) can
   * still be read, and holds every thread's */
  int look = tg[0].nat || tg[0].exited || now >= r->next_reap_ns;
  if (look && !tg[0].nat) r->next_reap_ns = now + 1000000;
  if (r->launched && !r->child_reaped && look && !tg[0].nat && !tg[0].exited) {
    siginfo_t si;
    memset(&si, 0, sizeof si);
    if (waitid(P_PID, (id_t)r->pid, &si, WEXITED | WNOHANG | WNOWAIT) == 0 && si.si_pid == r->pid) {
      tg[0].exited = 1;
      session_finish(r->st, &tg[0], ended, now, profiler_cpu_ns());
    }
  }
  if (r->launched && !r->child_reaped && look &&
      (tg[0].nat ? bf_smp_native_child_exited(tg[0].nat, &r->child_status)
                 : waitpid(r->pid, &r->child_status, WNOHANG) == r->pid)) {
    r->child_reaped = 1;
    if (!tg[0].exited) {
      tg[0].exited = 1;
      session_finish(r->st, &tg[0], ended, now, profiler_cpu_ns());
    }
  }
  return 0;
}

/* --subprocesses: a session (child of its parent's) for each new Python
 * process below a target; one not Python yet is looked at again later. */
static void follow_children(rec_run *r) {
  target *tg = r->tg;
  for (size_t i = 0; i < r->ntg && r->ntg < MAX_TARGETS; i++) {
    if (tg[i].exited) continue;
    int kids[64];
    size_t nk = children_of(tg[i].pid, kids, 64);
    for (size_t k = 0; k < nk && r->ntg < MAX_TARGETS; k++) {
      int known = 0;
      for (size_t j = 0; j < r->ntg; j++) known |= tg[j].pid == kids[k];
      if (known) continue;
      bf_smp *ch = bf_smp_new();
      if (!ch) continue;
      if (bf_smp_attach(ch, kids[k]) < 0) { /* not Python (yet): try again later */
        bf_smp_free(ch);
        continue;
      }
      target *nt = &tg[r->ntg];
      memset(nt, 0, sizeof *nt);
      nt->h = ch;
      nt->own = 1;
      nt->pid = kids[k];
      if (session_start(r->h, r->st, nt, r->o, tg[i].session_id) < 0) {
        free(nt->extra_json);
        free(nt->py_json);
        bf_smp_free(ch);
        continue;
      }
      r->ntg++;
    }
  }
}

/* Sample until the duration ends, every target is gone, or a stop. Returns 0
 * or a fatal negative errno (message on r->h). OUT: *status ("complete" or
 * "interrupted"). */
static int sample_loop(rec_run *r, int64_t start, const char **status) {
  const bf_smp_record_opts *o = r->o;
  target *tg = r->tg;
  int rc;
  int64_t last_progress = start, last_progress_cb = start, last_children = start;
  int64_t end = o->duration_s > 0 ? start + (int64_t)(o->duration_s * 1e9) : INT64_MAX;
  int64_t prev = start - r->interval;
  *status = "complete";
  for (;;) {
    if (o->stop && *o->stop) {
      *status = "interrupted";
      return 0;
    }
    if (o->suspend && *o->suspend) {
      *o->suspend = 0;
      if ((rc = suspend_native(r->h, tg, r->ntg, o)) < 0) return rc;
      if (o->stop && *o->stop) continue;
    }
    int64_t deadline, now = next_tick(r, &deadline);
    if (now >= end) {
      r->duration_over = 1;
      return 0;
    }
    int64_t w = now - prev;
    prev = now;
    int alive;
    if ((rc = tick_targets(r, now, w, deadline, &alive)) < 0) return rc;
    if (!alive && !(r->ntg > 1 && !tg[0].exited)) {
      int any = 0;
      for (size_t i = 0; i < r->ntg; i++) any |= !tg[i].exited;
      if (!any) return 0;
    }
    if (o->subprocesses && now - last_children > 50000000) {
      last_children = now;
      follow_children(r);
    }
    if (now - last_progress > 250000000) {
      last_progress = now;
      for (size_t i = 0; i < r->ntg; i++)
        if (!tg[i].exited) rec_forget_threads(r->st, &tg[i], now, o->gil_only);
      /* never hold the database's write lock for long (a tracer may share it) */
      if ((rc = bf_store_checkpoint(r->st)) < 0 && rc != -EBUSY)
        return seterr(r->h, rc, "%s", bf_store_errmsg(r->st));
    }
    if (o->progress && now - last_progress_cb > 250000000) {
      last_progress_cb = now;
      bf_smp_progress p = {(double)(now - start) / 1e9, tg[0].samples, tg[0].missed, tg[0].invalid,
                           (double)tg[0].ticks * 1e9 / (double)(now - start + 1)};
      o->progress(o->progress_ud, &p);
    }
  }
}

/* Finish every target's session (status, at stop) and free its state; a
 * native target is released before a launched child is waited for. Returns
 * 0 or the first store error. */
static int finish_targets(rec_run *r, const char *status, int64_t stop) {
  target *tg = r->tg;
  int64_t cpu = profiler_cpu_ns();
  int frc = 0;
  for (size_t i = 0; i < r->ntg; i++) {
    if (!tg[i].exited) {
      int r2 = session_finish(r->st, &tg[i], status, stop, cpu);
      if (r2 < 0 && !frc) frc = r2;
    }
    if (tg[i].nat) { /* resume and detach before waiting for a launched child */
      if (r->launched && i == 0 && !r->child_reaped &&
          bf_smp_native_child_exited(tg[i].nat, &r->child_status))
        r->child_reaped = 1;
      bf_smp_native_free(tg[i].nat);
    }
    free(tg[i].extra_json);
    free(tg[i].py_json);
    free(tg[i].k_rows);
    bf_smp_tasks_free(tg[i].tk);
    if (tg[i].own) bf_smp_free(tg[i].h);
    bf_cpuclock_free(tg[i].cc);
    rec_memory_free(tg[i].mem);
    for (size_t k = 0; k < tg[i].nthreads; k++) {
      free(tg[i].threads[k].last_frames);
      free(tg[i].threads[k].batch);
      free(tg[i].threads[k].wbatch);
      free(tg[i].threads[k].k_runq_v);
    }
    free(tg[i].threads);
    rec_pending_free(&tg[i]);
  }
  return frc;
}

int bf_smp_record(bf_smp *h, bf_store *st, const bf_smp_record_opts *o, int64_t *session_id,
                  int *exit_status) {
  int rc = 0;
  rec_run run, *r = &run;
  memset(r, 0, sizeof *r);
  r->h = h;
  r->st = st;
  r->o = o;
  r->child_status = -1;
  target *tg = r->tg;
  *exit_status = -1;
  *session_id = 0;
  if (!(o->rate_hz >= 1 && o->rate_hz <= 1e6))
    return seterr(h, -EINVAL, "rate must be between 1 and 1000000 Hz");
  prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0);
  r->pid = o->pid;
  if (o->argv && o->argv[0]) {
    if ((r->pid = launch_attached(h, o, exit_status)) < 0) return r->pid;
    r->launched = 1;
  } else if ((rc = bf_smp_attach(h, r->pid)) < 0) {
    return rc;
  }
  tg[0].h = h;
  tg[0].pid = r->pid;
  r->ntg = 1;
  /* --mode exception / --opcodes: refused in one line where the target's
   * version does not keep what they read (the launched command is ended) */
  if ((rc = bf_smp_can(h, (o->exc_only ? BF_SMP_WANT_EXC : 0u) | (o->opcodes ? BF_SMP_WANT_OPCODE : 0u))) < 0) {
    if (r->launched) {
      kill(r->pid, SIGTERM);
      wait_launched(r->pid, o, exit_status);
    }
    return rc;
  }
  if (o->native) {
    rc = bf_smp_native_new(h, o->native_threads, &tg[0].nat);
    if (rc < 0) {
      char msg[256]; /* as long as it always was */
      snprintf(msg, sizeof msg, "%s", bf_smp_errmsg(h));
      seterr(h, rc, "%s", msg);
      if (r->launched) wait_launched(r->pid, o, exit_status);
      return rc;
    }
  }
  rc = session_start(h, st, &tg[0], o, o->parent_session);
  if (rc < 0) {
    bf_smp_native_free(tg[0].nat);
    if (r->launched) wait_launched(r->pid, o, exit_status);
    return rc;
  }
  *session_id = tg[0].session_id;
  if (o->session_started) *o->session_started = tg[0].session_id;
  /* from here a locked database never stops the capture: samples are held */
  bf_store_set_busy_timeout(st, BUSY_MS);

  r->interval = (int64_t)(1e9 / o->rate_hz);
  r->sampler_rt = sampler_priority(o, r->interval);
  /* A sampler that fell behind (preempted; a store write) samples back to
   * back until it is on schedule again, as long as it is at most this late;
   * ticks further behind are dropped and counted missed. Each sample still
   * carries the time since the previous one, so time estimates hold. */
  r->backlog = r->interval > SMP_BACKLOG_NS ? r->interval : SMP_BACKLOG_NS;
  r->rng = (uint64_t)bf_mono_ns() | 1;
  int64_t start = bf_mono_ns();
  r->next = start;
  const char *status;
  rc = sample_loop(r, start, &status);
  int64_t stop = bf_mono_ns();
  if (rc < 0) status = "incomplete";
  int frc = finish_targets(r, status, stop);
  if (o->progress) {
    bf_smp_progress p = {(double)(stop - start) / 1e9, tg[0].samples, tg[0].missed, tg[0].invalid,
                         tg[0].info.achieved_rate_hz};
    o->progress(o->progress_ud, &p);
  }
  if (r->launched && r->duration_over && !r->child_reaped) stop_launched(r);
  if (r->launched) {
    /* never leave the command behind: a stop signal was passed on to it (or
     * the recording alone was stopped); wait for it either way */
    while (!r->child_reaped) {
      pid_t w = waitpid(r->pid, &r->child_status, 0);
      if (w == r->pid) r->child_reaped = 1;
      else if (w < 0 && errno != EINTR) break;
    }
    if (o->child_pid) *o->child_pid = 0;
    if (r->child_reaped) *exit_status = r->child_status;
  }
  if (rc < 0) return rc;
  if (frc < 0) return seterr(h, frc, "%s", bf_store_errmsg(st));
  return 0;
}
