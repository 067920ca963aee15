/* threads.c — a slot per thread state the walk meets (its OS thread's
 * name, its /proc descriptors, its cached tid), and what /proc tells of the
 * thread: running or idle, CPU time, and whether it is off CPU (the
 * torn-stack check's proof that a stack held still).
 */
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "smp_int.h"
#include "vec.h"

void smp_slot_close(smp_tslot *s) {
  free(s->name);
  free(s->py_name);
  s->name = s->py_name = NULL;
  if (s->stat_fd >= 0) close(s->stat_fd);
  if (s->sched_fd >= 0) close(s->sched_fd);
  if (s->sys_fd >= 0) close(s->sys_fd);
  s->stat_fd = s->sched_fd = s->sys_fd = -1;
}

smp_tslot *smp_slot_get(bf_smp *h, uint64_t tstate, int64_t tid) {
  for (size_t i = 0; i < h->nslots; i++)
    if (h->slots[i].tstate == tstate && h->slots[i].tid == tid) {
      h->slots[i].seen = h->gen;
      return &h->slots[i];
    }
  if (bf_vec_grow((void **)&h->slots, &h->cap_slots, h->nslots + 1, sizeof *h->slots, 16) < 0) return NULL;
  smp_tslot *s = &h->slots[h->nslots++];
  memset(s, 0, sizeof *s);
  s->tstate = tstate;
  s->tid = tid;
  s->stat_fd = s->sched_fd = s->sys_fd = -1;
  s->seen = h->gen;
  if (tid > 0 && h->pid > 0) {
    char p[96];
    snprintf(p, sizeof p, "/proc/%d/task/%lld/comm", h->pid, (long long)tid);
    int fd = open(p, O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
      char nm[32];
      ssize_t n = read(fd, nm, sizeof nm - 1);
      if (n > 0) {
        nm[n - (nm[n - 1] == '\n')] = 0;
        if (nm[0]) s->name = strdup(nm); /* NULL when out of memory: no name */
      }
      close(fd);
    }
  }
  return s;
}

void smp_slots_sweep(bf_smp *h) {
  size_t o = 0;
  for (size_t i = 0; i < h->nslots; i++) {
    if (h->gen - h->slots[i].seen > 64) {
      smp_slot_close(&h->slots[i]);
      continue;
    }
    h->slots[o++] = h->slots[i];
  }
  h->nslots = o;
}

/* native.c hook: tid is gone. On 3.8-3.10 a slot caches the tid read from
 * glibc's struct pthread, whose address a new thread may reuse: drop the
 * slot so the next walk reads the tid afresh. */
void smp_forget_tid(bf_smp *h, int64_t tid) {
  size_t o = 0;
  for (size_t i = 0; i < h->nslots; i++) {
    if (h->slots[i].tid == tid) {
      smp_slot_close(&h->slots[i]);
      continue;
    }
    h->slots[o++] = h->slots[i];
  }
  h->nslots = o;
}

int smp_proc_pread(bf_smp *h, smp_tslot *s, int *fd, const char *what, char *buf, size_t len) {
  if (*fd < 0) {
    char p[96];
    snprintf(p, sizeof p, "/proc/%d/task/%lld/%s", h->pid, (long long)s->tid, what);
    *fd = open(p, O_RDONLY | O_CLOEXEC);
    if (*fd < 0) return -1;
  }
  ssize_t n = pread(*fd, buf, len - 1, 0);
  if (n <= 0) return -1;
  buf[n] = 0;
  return 0;
}

/* /proc reads cost a few microseconds each, so a thread's state is
 * refreshed at most every SMP_STATE_MIN_NS; in between the last one is kept
 * (and no new CPU time is reported: cpu_ns stays -1). */
#define SMP_STATE_MIN_NS 200000

void smp_thread_status(bf_smp *h, smp_tslot *s, unsigned want, bf_smp_thread *t) {
  char buf[512];
  if (!s || s->tid <= 0 || h->pid <= 0) return;
  if (s->state_ns && h->now_ns - s->state_ns < SMP_STATE_MIN_NS) {
    if (want & BF_SMP_WANT_STATE) t->flags |= s->state_flags;
    if (want & BF_SMP_WANT_KERNEL) smp_kstate_copy(h, s, t);
    return;
  }
  s->state_ns = h->now_ns;
  s->state_flags = 0;
  if ((want & BF_SMP_WANT_STATE) && smp_proc_pread(h, s, &s->stat_fd, "stat", buf, sizeof buf) == 0) {
    const char *p = strrchr(buf, ')');
    if (p && p[1] == ' ' && p[2]) s->state_flags = (p[2] == 'R') ? BF_SMP_ON_CPU : BF_SMP_IDLE;
    t->flags |= s->state_flags;
    if ((want & BF_SMP_WANT_KERNEL) && p && p[1] == ' ') smp_kstate_read(h, s, p + 2, t);
  }
  if ((want & BF_SMP_WANT_CPU_TIME) &&
      smp_proc_pread(h, s, &s->sched_fd, "schedstat", buf, sizeof buf) == 0)
    t->cpu_ns = strtoll(buf, NULL, 10);
}


/* Whether thread tid is off CPU now: asleep or stopped, or runnable but last
 * run on the CPU this code runs on (a sampler that displaced it, as under
 * --clock cpu). OUT: *pcount, the times it has been scheduled in so far
 * (/proc/PID/task/TID/schedstat). A thread off CPU whose count has not
 * moved later did not run in between: its frames did not change. -1 when
 * that cannot be told. */
int smp_thread_off_cpu(bf_smp *h, int64_t tid, uint64_t *pcount) {
  smp_tslot *s = NULL;
  char buf[512];
  for (size_t i = 0; i < h->nslots && !s; i++)
    if (h->slots[i].tid == tid) s = &h->slots[i];
  if (!s || h->pid <= 0) return -1;
  unsigned long long run, wait, pc;
  if (smp_proc_pread(h, s, &s->sched_fd, "schedstat", buf, sizeof buf) < 0 ||
      sscanf(buf, "%llu %llu %llu", &run, &wait, &pc) != 3)
    return -1;
  *pcount = pc;
  int cpu = sched_getcpu();
  if (smp_proc_pread(h, s, &s->stat_fd, "stat", buf, sizeof buf) < 0) return -1;
  const char *p = strrchr(buf, ')');
  if (!p || p[1] != ' ' || !p[2]) return -1;
  if (p[2] != 'R') return 1;
  /* runnable: field 39, the CPU it last ran on (36 fields after the state) */
  p += 2;
  for (int f = 0; f < 36 && p; f++) {
    p = strchr(p, ' ');
    if (p) p++;
  }
  return p && cpu >= 0 && atoi(p) == cpu && sched_getcpu() == cpu;
}

