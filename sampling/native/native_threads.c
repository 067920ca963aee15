/* native_threads.c — the threads native mode stops: seizing, interrupting,
 * waiting for stops, resuming, and the --native-threads filter. */
#include "native_int.h"

/* ---- threads and ptrace --------------------------------------------------- */

nat_thread *nat_thread_find(bf_smp_native *n, int tid) {
  for (size_t i = 0; i < n->nth; i++)
    if (n->th[i].tid == tid) return &n->th[i];
  return NULL;
}

/* The thread's scheduler state before we stop it (once stopped /proc says
 * 't', which is us, not the target). */
void nat_read_run_state(bf_smp_native *n, nat_thread *t) {
  char buf[512];
  t->run_state = 0;
  t->state_sample = n->samples;
  if (t->stat_fd < 0) {
    char p[96];
    snprintf(p, sizeof p, "/proc/%d/task/%d/stat", n->pid, t->tid);
    t->stat_fd = open(p, O_RDONLY | O_CLOEXEC);
    if (t->stat_fd < 0) return;
  }
  ssize_t k = pread(t->stat_fd, buf, sizeof buf - 1, 0);
  if (k <= 0) return;
  buf[k] = 0;
  const char *p = strrchr(buf, ')');
  if (p && p[1] == ' ' && p[2]) t->run_state = p[2] == 'R' ? BF_SMP_ON_CPU : BF_SMP_IDLE;
}

void nat_thread_drop(bf_smp_native *n, nat_thread *t) {
  if (t->stops) {
    if (n->nretired < NAT_MAX_TSTATS &&
        bf_vec_grow((void **)&n->retired, &n->cap_retired, n->nretired + 1, sizeof *n->retired, 16) == 0) {
      nat_tstat *r = &n->retired[n->nretired++];
      r->tid = t->tid;
      memcpy(r->name, t->name, sizeof r->name);
      r->stops = t->stops;
      r->stopped_ns = t->stopped_ns;
      r->max_ns = t->max_ns;
    } else {
      n->omitted++;
    }
  }
  if (t->stat_fd >= 0) close(t->stat_fd);
  if (t->upt) _UPT_destroy(t->upt);
  free(t->stack);
  memset(t, 0, sizeof *t);
  t->stat_fd = -1;
  t->state = NT_GONE;
}

static void hist_add(uint64_t *hist, int64_t d) {
  uint64_t v = d > 0 ? (uint64_t)d : 0;
  size_t idx;
  if (v < 16) {
    idx = (size_t)v;
  } else {
    int e = 63 - __builtin_clzll(v);
    idx = 16 + (size_t)(e - 4) * 16 + (size_t)((v >> (e - 4)) & 15);
  }
  hist[idx < NAT_HIST ? idx : NAT_HIST - 1]++;
}

/* A thread's stop was just seen by waitpid. */
static void stop_seen(bf_smp_native *n, nat_thread *t) {
  t->t_stopped = bf_mono_ns();
  hist_add(n->hist_lat, t->t_stopped - t->t_interrupt);
}

void nat_resume(bf_smp_native *n, nat_thread *t) {
  if (t->state != NT_STOPPED) return;
  long rc = t->group_stop ? ptrace(PTRACE_LISTEN, t->tid, 0, 0) : ptrace(PTRACE_CONT, t->tid, 0, 0);
  int64_t d = bf_mono_ns() - t->t_stopped;
  t->state = rc < 0 ? NT_GONE : NT_RUNNING;
  t->stops++;
  t->stopped_ns += d;
  if (d > t->max_ns) t->max_ns = d;
  n->stops++;
  n->stopped_ns += d;
  if (d > n->max_ns) n->max_ns = d;
  hist_add(n->hist, d);
}

/* Registers and the live part of the stack of a stopped thread. */
static void snapshot(bf_smp_native *n, nat_thread *t) {
  t->snap_ok = 0;
  if (ptrace(PTRACE_GETREGS, t->tid, 0, &t->regs) < 0) return;
  uint64_t sp = t->regs.rsp;
  if (!(sp >= t->map_lo && sp < t->map_hi)) {
    const nat_map *m = nat_maps_find(n, sp);
    if (!m) return;
    t->map_lo = m->lo;
    t->map_hi = m->hi;
    t->deepest = 0;
  }
  uint64_t want = t->deepest > sp ? t->deepest - sp + NAT_SNAP_SLACK : NAT_SNAP_FIRST;
  if (want > NAT_SNAP_MAX) want = NAT_SNAP_MAX;
  if (want > t->map_hi - sp) want = t->map_hi - sp;
  if (bf_vec_grow((void **)&t->stack, &t->stack_cap, (size_t)want, 1, 16) < 0) return;
  struct iovec l = {t->stack, (size_t)want}, r = {(void *)(uintptr_t)sp, (size_t)want};
  ssize_t got = process_vm_readv(n->pid, &l, 1, &r, 1, 0);
  t->stack_lo = sp;
  t->stack_len = got > 0 ? (size_t)got : 0;
  t->snap_ok = 1;
}

static int is_job_stop(int sig) {
  return sig == SIGSTOP || sig == SIGTSTP || sig == SIGTTIN || sig == SIGTTOU;
}

/* Handle one wait status of tracee tid. With take set, the interrupt-stop
 * (or job-control stop) of a thread we are waiting for leaves it STOPPED
 * for a snapshot; every other stop is resumed at once: a signal the target
 * receives is handed on (re-injected), a job-control stop is kept
 * (PTRACE_LISTEN), an interrupt-stop arriving late ends its stop. */
static void on_status(bf_smp_native *n, int tid, int st, int take) {
  nat_thread *t = nat_thread_find(n, tid);
  if (WIFEXITED(st) || WIFSIGNALED(st)) {
    if (tid == n->pid) {
      n->leader_exited = 1;
      n->leader_status = st;
    }
    if (t) t->state = NT_GONE;
    return;
  }
  if (!WIFSTOPPED(st)) return;
  int sig = WSTOPSIG(st), ev = (unsigned)st >> 16;
  if (ev == 0) { /* signal-delivery-stop; a pending interrupt still reports later */
    n->reinjected++;
    if (ptrace(PTRACE_CONT, tid, 0, (void *)(intptr_t)sig) < 0 && t) t->state = NT_GONE;
    return;
  }
  if (ev == PTRACE_EVENT_STOP && t && t->state == NT_PENDING) {
    t->group_stop = is_job_stop(sig);
    t->state = NT_STOPPED;
    stop_seen(n, t);
    if (!take) {
      n->late++;
      nat_resume(n, t); /* counts the stop it cost */
    }
    return;
  }
  long rc = ev == PTRACE_EVENT_STOP && is_job_stop(sig) ? ptrace(PTRACE_LISTEN, tid, 0, 0)
                                                       : ptrace(PTRACE_CONT, tid, 0, 0);
  if (t) t->state = rc < 0 ? NT_GONE : NT_RUNNING;
}

/* Consume whatever the tracees reported meanwhile, without blocking. */
void nat_reap_events(bf_smp_native *n) {
  int st;
  pid_t r;
  while ((r = waitpid(-1, &st, WNOHANG | __WALL)) > 0) on_status(n, r, st, 0);
}

/* Wait (SIGCHLD-driven) until the pending threads stopped, snapshotting
 * each as it stops. No thread is held more than hold_ns waiting for the
 * others: the deadline runs from the first stop seen (before it, from
 * NAT_FIRST_STOP_NS after the interrupts: nothing is stopped yet, so
 * waiting costs the target nothing). Returns 0 or -EINTR. */
int nat_collect_stops(bf_smp_native *n, size_t pending, int64_t hold_ns) {
  int64_t deadline = bf_mono_ns() + NAT_FIRST_STOP_NS;
  int any = 0;
  sigset_t chld;
  sigemptyset(&chld);
  sigaddset(&chld, SIGCHLD);
  while (pending) {
    int st;
    pid_t r = waitpid(-1, &st, WNOHANG | __WALL);
    if (r > 0) {
      nat_thread *t = nat_thread_find(n, r);
      int was = t && t->state == NT_PENDING;
      on_status(n, r, st, 1);
      if (was && t->state != NT_PENDING) {
        pending--;
        if (t->state == NT_STOPPED) {
          if (!any && t->t_stopped + hold_ns < deadline) deadline = t->t_stopped + hold_ns;
          any = 1;
          snapshot(n, t);
        }
      }
      continue;
    }
    if (r < 0) break; /* no tracee left */
    int64_t left = deadline - bf_mono_ns();
    if (left <= 0) break;
    struct timespec ts = {left / 1000000000, left % 1000000000};
    if (sigtimedwait(&chld, NULL, &ts) < 0) {
      if (errno == EAGAIN) break;
      if (errno == EINTR) return -EINTR;
    }
  }
  return 0;
}

int bf_smp_native_wait_until(bf_smp_native *n, int64_t deadline_ns) {
  sigset_t chld;
  sigemptyset(&chld);
  sigaddset(&chld, SIGCHLD);
  for (;;) {
    nat_reap_events(n);
    int64_t left = deadline_ns - bf_mono_ns();
    if (left <= 0) return 0;
    struct timespec ts = {left / 1000000000, left % 1000000000};
    if (sigtimedwait(&chld, NULL, &ts) < 0) {
      if (errno == EAGAIN) return 0;
      if (errno == EINTR) return -EINTR;
    }
  }
}

void bf_smp_native_set_stop_wait(bf_smp_native *n, int64_t ns) {
  n->stop_wait_ns = ns > 0 ? ns : NAT_STOP_WAIT_NS;
}

/* ---- the filter ------------------------------------------------------------ */

int nat_parse_filter(bf_smp_native *n, const char *spec) {
  size_t cap_tids = 0, cap_globs = 0;
  if (!spec) return 0;
  if (!(n->filter = strdup(spec))) return -ENOMEM;
  for (char *tok = strtok(n->filter, ","); tok; tok = strtok(NULL, ",")) {
    while (*tok == ' ') tok++;
    if (!*tok) continue;
    char *end;
    long v = strtol(tok, &end, 10);
    if (*end == 0 && v > 0) {
      if (bf_vec_grow((void **)&n->ftids, &cap_tids, n->nftids + 1, sizeof *n->ftids, 16) < 0) return -ENOMEM;
      n->ftids[n->nftids++] = v;
      continue;
    }
    if (bf_vec_grow((void **)&n->globs, &cap_globs, n->nglobs + 1, sizeof *n->globs, 16) < 0) return -ENOMEM;
    n->globs[n->nglobs++] = tok;
  }
  if (!n->nftids && !n->nglobs) return -EINVAL;
  return 0;
}

/* Per-tid /proc state of every Python thread (seized or not): its name
 * and open stat/schedstat files. Entries not used for a while are dropped. */
#define NAT_NAME_NS 500000000LL
nat_tname *nat_tinfo(bf_smp_native *n, int tid) {
  int64_t now = bf_mono_ns();
  size_t i;
  for (i = 0; i < n->nnames; i++)
    if (n->names[i].tid == tid) break;
  if (i == n->nnames) {
    size_t o = 0;
    for (size_t k = 0; k < n->nnames; k++) {
      if (now - n->names[k].used_ns < 10 * NAT_NAME_NS) {
        n->names[o++] = n->names[k];
        continue;
      }
      if (n->names[k].stat_fd >= 0) close(n->names[k].stat_fd);
      if (n->names[k].sched_fd >= 0) close(n->names[k].sched_fd);
    }
    n->nnames = o;
    if (bf_vec_grow((void **)&n->names, &n->cap_names, n->nnames + 1, sizeof *n->names, 16) < 0) return NULL;
    i = n->nnames++;
    memset(&n->names[i], 0, sizeof n->names[i]);
    n->names[i].tid = tid;
    n->names[i].stat_fd = n->names[i].sched_fd = -1;
  }
  n->names[i].used_ns = now;
  return &n->names[i];
}

/* pread a /proc/PID/task/TID file through a cached fd. */
ssize_t nat_proc_read(bf_smp_native *n, int tid, int *fd, const char *what, char *buf,
                         size_t len) {
  if (*fd < 0) {
    char p[96];
    snprintf(p, sizeof p, "/proc/%d/task/%d/%s", n->pid, tid, what);
    if ((*fd = open(p, O_RDONLY | O_CLOEXEC)) < 0) return -1;
  }
  ssize_t k = pread(*fd, buf, len - 1, 0);
  buf[k > 0 ? k : 0] = 0;
  return k;
}

uint32_t nat_stat_state(const char *buf) {
  const char *p = strrchr(buf, ')');
  if (!p || p[1] != ' ' || !p[2]) return 0;
  return p[2] == 'R' ? BF_SMP_ON_CPU : BF_SMP_IDLE;
}

/* A thread's OS name (/proc comm), re-read at most every NAT_NAME_NS: a
 * thread may name itself after it started. */
const char *nat_thread_name(bf_smp_native *n, int tid) {
  nat_tname *e = nat_tinfo(n, tid);
  if (!e) return NULL;
  if (!e->read_ns || e->used_ns - e->read_ns > NAT_NAME_NS) {
    int fd = -1;
    e->name[0] = 0;
    if (nat_proc_read(n, tid, &fd, "comm", e->name, sizeof e->name) > 0)
      e->name[strcspn(e->name, "\n")] = 0;
    if (fd >= 0) close(fd);
    e->read_ns = e->used_ns;
  }
  return e->name;
}

int nat_selected(bf_smp_native *n, const bf_smp_thread *t) {
  if (!n->filter) return 1;
  for (size_t i = 0; i < n->nftids; i++)
    if (n->ftids[i] == t->native_tid) return 1;
  const char *name = n->nglobs && t->native_tid > 0 ? nat_thread_name(n, (int)t->native_tid) : NULL;
  for (size_t i = 0; i < n->nglobs; i++)
    if ((name && fnmatch(n->globs[i], name, 0) == 0) ||
        (t->py_name && fnmatch(n->globs[i], t->py_name, 0) == 0))
      return 1;
  return 0;
}


/* Seize tid unless already traced; a new slot in state RUNNING. */
static nat_thread *thread_seize(bf_smp_native *n, int tid, const char *name, int *err) {
  nat_thread *t = nat_thread_find(n, tid);
  if (t) return t;
  /* TRACEEXEC: without it an exec would send the tracee a SIGTRAP that,
   * handed on, kills it; with it the exec reports an event we continue */
  if (ptrace(PTRACE_SEIZE, tid, 0, (void *)(intptr_t)PTRACE_O_TRACEEXEC) < 0) {
    *err = -errno;
    return NULL;
  }
  /* reuse a dead slot before growing */
  for (size_t i = 0; i < n->nth && !t; i++)
    if (n->th[i].state == NT_GONE && !n->th[i].tid) t = &n->th[i];
  if (!t) {
    if (bf_vec_grow((void **)&n->th, &n->cap_th, n->nth + 1, sizeof *n->th, 16) < 0) {
      ptrace(PTRACE_DETACH, tid, 0, 0); /* fails while running; our exit detaches */
      *err = -ENOMEM;
      return NULL;
    }
    t = &n->th[n->nth++];
  }
  memset(t, 0, sizeof *t);
  t->tid = tid;
  t->stat_fd = -1;
  t->state = NT_RUNNING;
  t->upt = _UPT_create(tid);
  if (name) snprintf(t->name, sizeof t->name, "%s", name);
  return t;
}

/* Why PTRACE_SEIZE of tid was refused, and what to do (into buf). */
static const char *explain_trace(bf_smp_native *n, int tid, int err, char *buf, size_t len) {
  if (err != -EPERM && err != -EACCES) return strerror(-err);
  char p[96], line[256];
  long tracer = 0;
  snprintf(p, sizeof p, "/proc/%d/task/%d/status", n->pid, tid);
  FILE *f = fopen(p, "re");
  while (f && fgets(line, sizeof line, f))
    if (sscanf(line, "TracerPid: %ld", &tracer) == 1) break;
  if (f) fclose(f);
  if (tracer > 0) {
    char comm[64] = "?";
    snprintf(p, sizeof p, "/proc/%ld/comm", tracer);
    f = fopen(p, "re");
    if (f) {
      if (fgets(comm, sizeof comm, f)) comm[strcspn(comm, "\n")] = 0;
      fclose(f);
    }
    snprintf(buf, len, "it is already traced by process %ld (%s); only one tracer at a time", tracer,
             comm); /* repl/cli_hints.c adds the remedy */
    return buf;
  }
  return "ptrace refused: kernel.yama.ptrace_scope or a missing CAP_SYS_PTRACE forbids it (run "
         "as root, `sudo sysctl kernel.yama.ptrace_scope=0`, or in a container add "
         "`--cap-add SYS_PTRACE`)";
}

/* Seize n->want[i] unless traced already. NULL when gone or refused;
 * *rc < 0 only when refused before any thread was ever seized (with the
 * reason on n): later refusals are per-thread events. */
nat_thread *nat_seize_wanted(bf_smp_native *n, size_t i, int *rc) {
  int err = 0;
  *rc = 0;
  nat_thread *t = thread_seize(n, n->want[i], NULL, &err);
  if (t) {
    n->seized_any = 1;
    return t;
  }
  if (err == -ESRCH) { /* exited meanwhile (or a stale tid: see smp_forget_tid) */
    smp_forget_tid(n->h, n->want[i]);
    return NULL;
  }
  if ((err == -EPERM || err == -EACCES) && !n->seized_any) {
    char why[256];
    *rc = nat_seterr(n, -EPERM, "cannot trace thread %d of process %d: %s", n->want[i], n->pid,
                 explain_trace(n, n->want[i], err, why, sizeof why));
  }
  return NULL;
}
