/* cpuclock.c — per-thread CPU time and on-CPU intervals of a target, as an
 * outside observer can know them (see cpuclock.h): perf context-switch
 * records in a ring per thread, or /proc state and schedstat when perf
 * events are refused.
 */
#include <errno.h>
#include <fcntl.h>
#include <linux/perf_event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "cpuclock.h"
#include "vec.h"

#define CC_IV 16               /* recent closed on-CPU intervals kept per thread */
#define CC_FORGET_TICKS 512    /* a thread unseen this many ticks is closed */
#define CC_SWITCH_RATE 30000   /* switches per second a ring should hold a tick of */
#define CC_RECORD_MAX 64       /* bytes of a record we look at */
#define CC_SYNC_TICKS 16       /* perf: schedstat read at most this often per thread */

enum { CC_UNKNOWN, CC_IN, CC_OUT, CC_GONE };

typedef struct cc_thread {
  int64_t tid;
  int perf;              /* 1: perf ring; 0: /proc */
  int fd;                /* perf event (task clock, counting), -1 none */
  int stat_fd, sched_fd; /* /proc files (schedstat method), -1 none */
  unsigned char *map;    /* perf mmap: one control page, then the ring */
  size_t map_len, data_len;
  uint64_t tail;
  int state;
  /* IN: when it went on a CPU; UNKNOWN: since when no switch is known (the
   * first record then tells what it did all along: an out means it ran from
   * here, an in that it did not) */
  int64_t since;
  int64_t cpu_ns;        /* CPU in closed intervals (perf); schedstat: last value */
  int64_t base_ns;       /* schedstat: value when first seen (-1 unknown) */
  /* perf: the thread's CPU time less its switch intervals, from schedstat
   * read while the thread is off a CPU (there it is exact), at most every
   * CC_SYNC_TICKS ticks. Positive: the scheduler's own work around each
   * switch, which the thread's CPU time includes (~1-2 us a switch in a VM,
   * 10-25% of a thread that waits on the GIL or sleeps thousands of times a
   * second). Negative: time inside the intervals the thread did not run, a
   * VM's steal time (the hypervisor ran another vCPU) and IRQ time, which
   * the records' clock holds and the thread's CPU time does not (3.3% of a
   * quiet CI host's, where vCPUs wake from idle often) */
  int64_t extra_ns;
  uint64_t sync_tick;
  struct cc_iv {
    int64_t a, b;
    int preempted;       /* it left the CPU still runnable (not to sleep or wait) */
  } iv[CC_IV];           /* recent closed on-CPU intervals (perf) */
  unsigned iv_next;
  int resync;            /* records were lost: take cpu_ns from the counter */
  int64_t cpu_told_ns;   /* the last CPU time given out (never goes back) */
  uint64_t last_tick;
} cc_thread;

struct bf_cpuclock {
  int pid;
  int perf_ok;
  size_t data_pages;
  char why[300];
  cc_thread *th;
  size_t n, cap;
  uint64_t tick;
  uint64_t lost;
  int64_t now_ns;       /* monotonic time of the last drain */
  int64_t gone_cpu_ns;  /* CPU of threads closed since */
  cc_thread self;       /* the sampler's own switches (bf_cpuclock_self_in) */
  int self_tried;
};

static int perf_open(int tid) {
  struct perf_event_attr a;
  memset(&a, 0, sizeof a);
  a.type = PERF_TYPE_SOFTWARE;
  a.size = sizeof a;
  a.config = PERF_COUNT_SW_TASK_CLOCK; /* counting: read() gives the exact CPU */
  a.context_switch = 1;                /* PERF_RECORD_SWITCH in and out */
  a.task = 1;                          /* PERF_RECORD_EXIT */
  a.sample_id_all = 1;
  a.sample_type = PERF_SAMPLE_TID | PERF_SAMPLE_TIME;
  a.use_clockid = 1;
  a.clockid = CLOCK_MONOTONIC; /* the sampler's clock: records compare with its ticks */
  a.exclude_kernel = 1;        /* allowed at perf_event_paranoid 2; the task clock counts all */
  a.exclude_hv = 1;
  a.watermark = 1;
  a.wakeup_watermark = 1u << 30; /* never woken: the ring is polled */
  return (int)syscall(SYS_perf_event_open, &a, tid, -1, -1, PERF_FLAG_FD_CLOEXEC);
}

/* A perf event and its ring for t->tid; on failure t stays on /proc. */
static void ring_open(const bf_cpuclock *c, cc_thread *t) {
  t->fd = perf_open((int)t->tid);
  if (t->fd < 0) return;
  t->data_len = c->data_pages * 4096;
  t->map_len = t->data_len + 4096;
  void *m = mmap(NULL, t->map_len, PROT_READ | PROT_WRITE, MAP_SHARED, t->fd, 0);
  if (m == MAP_FAILED) { /* e.g. perf_event_mlock_kb spent: this thread uses /proc */
    close(t->fd);
    t->fd = -1;
    return;
  }
  t->map = m;
  t->perf = 1;
  t->state = CC_UNKNOWN;
  t->since = bf_mono_ns();
}

bf_cpuclock *bf_cpuclock_new(int pid, int64_t interval_ns) {
  bf_cpuclock *c = calloc(1, sizeof *c);
  if (!c) return NULL;
  c->pid = pid;
  double bytes = (double)interval_ns / 1e9 * CC_SWITCH_RATE * 24;
  size_t pages = 4;
  while (pages < 64 && (double)pages * 4096 < bytes) pages *= 2;
  c->data_pages = pages;
  const char *force = getenv("BIFOCAL_CPU_CLOCK");
  if (force && strcmp(force, "schedstat") == 0) {
    snprintf(c->why, sizeof c->why, "BIFOCAL_CPU_CLOCK=schedstat asked for /proc");
    return c;
  }
  int fd = perf_open(pid);
  if (fd < 0) {
    int e = errno;
    char par[16] = "?";
    int pf = open("/proc/sys/kernel/perf_event_paranoid", O_RDONLY | O_CLOEXEC);
    if (pf >= 0) {
      ssize_t k = read(pf, par, sizeof par - 1);
      par[k > 0 ? k : 0] = 0;
      par[strcspn(par, "\n")] = 0;
      close(pf);
    }
    snprintf(c->why, sizeof c->why,
             "perf_event_open on pid %d refused (%s; kernel.perf_event_paranoid=%s, or a "
             "container's seccomp): /proc state and schedstat instead, where a thread waiting "
             "for a CPU counts as running",
             pid, strerror(e), par);
    return c;
  }
  close(fd);
  c->perf_ok = 1;
  snprintf(c->why, sizeof c->why, "perf context-switch records per thread");
  return c;
}

static void th_close(cc_thread *t) {
  if (t->map) munmap(t->map, t->map_len);
  if (t->fd >= 0) close(t->fd);
  if (t->stat_fd >= 0) close(t->stat_fd);
  if (t->sched_fd >= 0) close(t->sched_fd);
  t->map = NULL;
  t->fd = t->stat_fd = t->sched_fd = -1;
}

void bf_cpuclock_free(bf_cpuclock *c) {
  if (!c) return;
  for (size_t i = 0; i < c->n; i++) th_close(&c->th[i]);
  if (c->self_tried) th_close(&c->self);
  free(c->th);
  free(c);
}

const char *bf_cpuclock_method(const bf_cpuclock *c) {
  return c->perf_ok ? "perf-switch" : "schedstat";
}

const char *bf_cpuclock_why(const bf_cpuclock *c) { return c->why; }

uint64_t bf_cpuclock_lost(const bf_cpuclock *c) { return c->lost; }

static void iv_push(cc_thread *t, int64_t a, int64_t b, int preempted) {
  if (b <= a) return;
  t->iv[t->iv_next % CC_IV].a = a;
  t->iv[t->iv_next % CC_IV].b = b;
  t->iv[t->iv_next % CC_IV].preempted = preempted;
  t->iv_next++;
  t->cpu_ns += b - a;
}

/* out: 0 switched in, 1 out to sleep or wait (or exit), 2 out preempted */
static void on_switch(cc_thread *t, int out, int64_t time) {
  if (out) {
    /* from UNKNOWN: no switch since `since`, so it ran all along */
    if (t->state == CC_IN || t->state == CC_UNKNOWN) iv_push(t, t->since, time, out == 2);
    t->state = CC_OUT;
  } else if (t->state != CC_IN) {
    t->state = CC_IN;
    t->since = time;
  }
}

static void ring_copy(const cc_thread *t, uint64_t pos, void *dst, size_t len) {
  const unsigned char *data = t->map + 4096;
  size_t off = (size_t)(pos % t->data_len), first = t->data_len - off;
  if (first >= len) {
    memcpy(dst, data + off, len);
  } else {
    memcpy(dst, data + off, first);
    memcpy((unsigned char *)dst + first, data, len - first);
  }
}

static uint64_t rd64(const unsigned char *p) {
  uint64_t v;
  memcpy(&v, p, 8);
  return v;
}

static void ring_drain(bf_cpuclock *c, cc_thread *t) {
  struct perf_event_mmap_page *pg = (struct perf_event_mmap_page *)t->map;
  uint64_t head = __atomic_load_n(&pg->data_head, __ATOMIC_ACQUIRE);
  while (t->tail + sizeof(struct perf_event_header) <= head) {
    unsigned char rec[CC_RECORD_MAX];
    struct perf_event_header hd;
    ring_copy(t, t->tail, &hd, sizeof hd);
    if (hd.size < sizeof hd || t->tail + hd.size > head) break;
    size_t len = hd.size < sizeof rec ? hd.size : sizeof rec;
    ring_copy(t, t->tail, rec, len);
    switch (hd.type) {
      case PERF_RECORD_SWITCH: /* header, sample_id {pid, tid, time} */
        if (len >= 24)
          on_switch(t,
                    !(hd.misc & PERF_RECORD_MISC_SWITCH_OUT)          ? 0
                    : (hd.misc & PERF_RECORD_MISC_SWITCH_OUT_PREEMPT) ? 2
                                                                      : 1,
                    (int64_t)rd64(rec + 16));
        break;
      case PERF_RECORD_EXIT: /* header, pid, ppid, tid, ptid, time */
        if (len >= 32) on_switch(t, 1, (int64_t)rd64(rec + 24));
        t->state = CC_GONE;
        break;
      case PERF_RECORD_LOST: /* header, id, lost */
        if (len >= 24) c->lost += rd64(rec + 16);
        t->resync = 1;
        break;
      default: break;
    }
    t->tail += hd.size;
  }
  __atomic_store_n(&pg->data_tail, t->tail, __ATOMIC_RELEASE);
  if (t->resync && t->state != CC_GONE) {
    /* switches were dropped: the counter has the exact CPU since open, and
     * the next record tells the state from here on */
    uint64_t v = 0;
    int64_t now = bf_mono_ns();
    if (read(t->fd, &v, sizeof v) == (ssize_t)sizeof v) t->cpu_ns = (int64_t)v;
    t->state = CC_UNKNOWN;
    t->since = now;
    t->resync = 0;
  }
}

/* A thread's CPU time as the clock knows it now, never less than what was
 * given out for it (a steal correction may come after a charge). */
static int64_t th_total(const bf_cpuclock *c, const cc_thread *t) {
  if (!t->perf) return t->cpu_ns - t->base_ns;
  int64_t v = t->cpu_ns + t->extra_ns + (t->state == CC_IN ? c->now_ns - t->since : 0);
  return v > t->cpu_told_ns ? v : t->cpu_told_ns;
}

void bf_cpuclock_drain(bf_cpuclock *c) {
  c->tick++;
  c->now_ns = bf_mono_ns();
  size_t o = 0;
  for (size_t i = 0; i < c->n; i++) {
    cc_thread *t = &c->th[i];
    if (t->map) ring_drain(c, t);
    if (c->tick - t->last_tick > CC_FORGET_TICKS) {
      c->gone_cpu_ns += th_total(c, t);
      th_close(t);
      continue;
    }
    c->th[o++] = *t;
  }
  c->n = o;
}

static cc_thread *th_get(bf_cpuclock *c, int64_t tid, int *fresh) {
  *fresh = 0;
  cc_thread *t = NULL;
  for (size_t i = 0; i < c->n && !t; i++)
    if (c->th[i].tid == tid) t = &c->th[i];
  if (t && t->state != CC_GONE) return t;
  if (t) { /* the tid was reused by a new thread */
    c->gone_cpu_ns += th_total(c, t);
    th_close(t);
  } else if (bf_vec_grow((void **)&c->th, &c->cap, c->n + 1, sizeof *c->th, 16)) {
    return NULL;
  }
  if (!t) t = &c->th[c->n++];
  memset(t, 0, sizeof *t);
  t->tid = tid;
  t->fd = t->stat_fd = t->sched_fd = -1;
  t->state = CC_UNKNOWN;
  *fresh = 1;
  if (c->perf_ok) ring_open(c, t);
  return t;
}

static int proc_pread(int pid, int64_t tid, int *fd, const char *what, char *buf, size_t len) {
  if (*fd < 0) {
    char p[96];
    snprintf(p, sizeof p, "/proc/%d/task/%lld/%s", pid, (long long)tid, what);
    *fd = open(p, O_RDONLY | O_CLOEXEC);
    if (*fd < 0) return -1;
  }
  ssize_t n = pread(*fd, buf, len - 1, 0);
  if (n <= 0) return -1;
  buf[n] = 0;
  return 0;
}

int bf_cpuclock_thread(bf_cpuclock *c, int64_t tid, int64_t from_ns, int64_t at_ns,
                       int64_t until_ns, int64_t *cpu_ns, int *on_cpu, int *known,
                       int64_t *switch_ns, int *waiting) {
  int fresh;
  cc_thread *t = th_get(c, tid, &fresh);
  if (!t) return -ENOMEM;
  t->last_tick = c->tick;
  *on_cpu = 0;
  *known = !fresh;
  *switch_ns = 0;
  *waiting = 0;
  if (t->perf) {
    int64_t now = c->now_ns > t->since ? c->now_ns : t->since;
    int state = t->state;
    if (state == CC_UNKNOWN && !fresh) {
      /* no switch since `since`: it either ran all along or slept all along;
       * the counter tells which (a read of a running thread costs an IPI, but
       * only until its first switch) */
      uint64_t v = 0;
      state = CC_OUT;
      if (read(t->fd, &v, sizeof v) == (ssize_t)sizeof v) {
        if ((int64_t)v - t->cpu_ns > (bf_mono_ns() - t->since) / 2) state = CC_IN;
        if ((int64_t)v > t->cpu_ns) now = t->since + ((int64_t)v - t->cpu_ns);
      }
    }
    char buf[256];
    if (fresh || (state == CC_OUT && t->base_ns >= 0 && c->tick - t->sync_tick >= CC_SYNC_TICKS)) {
      /* off a CPU, its schedstat is exact up to its last switch (on one, it
       * lags by the current run); t->cpu_ns is complete up to there too */
      t->sync_tick = c->tick;
      if (proc_pread(c->pid, tid, &t->sched_fd, "schedstat", buf, sizeof buf) == 0) {
        int64_t v = strtoll(buf, NULL, 10);
        /* no switch since the drain (else the intervals are behind) */
        const struct perf_event_mmap_page *pg = (const void *)t->map;
        if (fresh) t->base_ns = v;
        else if (__atomic_load_n(&pg->data_head, __ATOMIC_ACQUIRE) == t->tail)
          t->extra_ns = v - t->base_ns - t->cpu_ns;
      } else if (fresh) {
        t->base_ns = -1;
      }
    }
    /* a switch-out is seen a little after it happened: a running thread's
     * CPU was counted up to the drain, and may be found slightly less now */
    *cpu_ns = t->cpu_ns + t->extra_ns + (state == CC_IN ? now - t->since : 0);
    *switch_ns = t->extra_ns;
    if (*cpu_ns < t->cpu_told_ns) *cpu_ns = t->cpu_told_ns;
    t->cpu_told_ns = *cpu_ns;
    if (fresh) return 0; /* opened after the window */
    /* on a CPU at at_ns; or preempted in [from_ns, at_ns] (e.g. by the
     * sampler itself) and not back since: its stack still shows where it
     * was running then. A thread that went to sleep or to wait meanwhile
     * is not on a CPU at at_ns, and is left out. */
    int on = state == CC_IN && t->since <= at_ns;
    unsigned k = t->iv_next > CC_IV ? CC_IV : t->iv_next;
    for (unsigned i = 0; i < k && !on; i++) { /* newest first */
      const struct cc_iv *iv = &t->iv[(t->iv_next - 1 - i) % CC_IV];
      if (iv->a > at_ns) continue; /* began after at_ns */
      /* the last interval begun by at_ns */
      on = at_ns < iv->b || (iv->b >= from_ns && iv->preempted);
      break;
    }
    /* went to sleep or to wait before until_ns: its stack may have been
     * read after that, where it waits, not where it ran at at_ns */
    for (unsigned i = 0; i < k && on && until_ns > at_ns; i++) {
      const struct cc_iv *iv = &t->iv[(t->iv_next - 1 - i) % CC_IV];
      if (iv->b <= at_ns) break;
      if (iv->b <= until_ns && !iv->preempted) on = 0;
    }
    /* off a CPU since it went to sleep or to wait, before at_ns: its stack
     * is where it waits */
    *waiting = !on && state == CC_OUT && t->iv_next &&
               !t->iv[(t->iv_next - 1) % CC_IV].preempted &&
               t->iv[(t->iv_next - 1) % CC_IV].b <= at_ns;
    *on_cpu = on;
    return 0;
  }
  /* /proc: the state read now, right after the stack */
  char buf[512];
  if (proc_pread(c->pid, tid, &t->sched_fd, "schedstat", buf, sizeof buf) == 0)
    t->cpu_ns = strtoll(buf, NULL, 10);
  if (fresh) t->base_ns = t->cpu_ns;
  *cpu_ns = t->cpu_ns - t->base_ns;
  if (proc_pread(c->pid, tid, &t->stat_fd, "stat", buf, sizeof buf) == 0) {
    const char *p = strrchr(buf, ')');
    if (p && p[1] == ' ' && p[2] == 'R') *on_cpu = 1;
  }
  return 0;
}

int64_t bf_cpuclock_self_in(bf_cpuclock *c) {
  cc_thread *t = &c->self;
  if (!c->self_tried) {
    c->self_tried = 1;
    memset(t, 0, sizeof *t);
    t->fd = t->stat_fd = t->sched_fd = -1;
    t->tid = 0; /* perf_event_open: the calling thread */
    if (c->perf_ok) ring_open(c, t);
  }
  if (!t->map) return -1;
  ring_drain(c, t);
  return t->state == CC_IN ? t->since : -1;
}

int64_t bf_cpuclock_total_ns(const bf_cpuclock *c) {
  int64_t s = c->gone_cpu_ns;
  for (size_t i = 0; i < c->n; i++) s += th_total(c, &c->th[i]);
  return s;
}
