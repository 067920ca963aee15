/* native.c — mixed Python + C stacks. Per sample: interrupt the chosen
 * threads (PTRACE_SEIZE once, PTRACE_INTERRUPT per sample), copy each one's
 * registers and live stack, walk the Python frames while they are all
 * stopped (one consistent moment), resume them, and only then unwind the
 * copies with libunwind's remote interface: the ptrace accessors locate the
 * unwind tables, memory reads are served from the copy (or read live for
 * what lies outside it). Eval-loop C frames are replaced by the Python frames
 * they run, other C frames are symbolised once per address.
 */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ptrace.h>
#include <sys/uio.h>
#include <sys/user.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <libunwind-ptrace.h>
#include <libunwind.h>

#include "clock.h"
#include "jsonw.h"
#include "map.h"
#include "native.h"
#include "procmaps.h"
#include "vec.h"
#include "smp_int.h" /* smp_forget_tid */

#define NAT_MAX_DEPTH 256               /* C frames unwound per thread */
#define NAT_SNAP_FIRST (64 * 1024)      /* stack bytes copied when nothing is known */
#define NAT_SNAP_MAX (1024 * 1024)      /* never copy more than this per stop */
#define NAT_SNAP_SLACK 512              /* past the deepest address the last unwind used */
#define NAT_HIST 1024                   /* log-linear stop-time buckets */
#define NAT_DETACH_WAIT_NS 1000000000LL /* bounded wait for a stop when detaching (a loaded host may take that long to run the tracee) */
#define NAT_MAX_IPS 200000              /* symbol cache bound: past it start over */
#define NAT_STOP_WAIT_NS 2000000LL      /* longest a stopped thread waits for the others */
#define NAT_FIRST_STOP_NS 100000000LL   /* longest a sample waits for its first stop */

enum { NT_RUNNING = 0, NT_STOPPED, NT_PENDING, NT_GONE };

typedef struct nat_code {
  bf_smp_code pub;
} nat_code;

/* One symbolised address: the frame it belongs to and what kind of frame. */
typedef struct nat_ip {
  uint64_t addr; /* 0 = empty slot */
  nat_code *code;
  int eval;   /* CPython's eval loop: replaced by Python frames */
  int interp; /* inside the interpreter's own object (libpython / python) */
} nat_ip;

typedef struct nat_map {
  uint64_t lo, hi, off;
  const char *path; /* interned, NULL for anonymous */
  int exec, writable;
} nat_map;

/* Read-only pages of the target (unwind tables, code) cached for libunwind:
 * a lookup in .eh_frame_hdr reads word by word. */
#define NAT_PAGES 512
#define NAT_PAGE 4096
typedef struct nat_page {
  uint64_t addr; /* page address + 1; 0 = empty */
  unsigned char data[NAT_PAGE];
} nat_page;

typedef struct nat_thread {
  int tid;
  int state; /* NT_* */
  int group_stop;
  int snap_ok;
  void *upt;
  int64_t t_interrupt; /* PTRACE_INTERRUPT sent */
  int64_t t_stopped;   /* its stop seen by waitpid: the stop starts here */
  struct user_regs_struct regs;
  unsigned char *stack;
  size_t stack_len, stack_cap;
  uint64_t stack_lo;       /* address of stack[0] (the stack pointer) */
  uint64_t map_lo, map_hi; /* the mapping the stack pointer lies in */
  uint64_t deepest;        /* highest stack address the last unwind read */
  int64_t stops, stopped_ns, max_ns;
  char name[32];
  int stat_fd;       /* /proc/PID/task/TID/stat, -1 until opened */
  uint32_t run_state; /* BF_SMP_ON_CPU / BF_SMP_IDLE read just before the stop */
  int64_t state_sample; /* the sample run_state was read for */
} nat_thread;

/* Stop figures of a thread that has gone (kept for the session's record). */
typedef struct nat_tstat {
  int tid;
  char name[32];
  int64_t stops, stopped_ns, max_ns;
} nat_tstat;

#define NAT_MAX_TSTATS 256 /* threads listed in extra_json; the rest are summed */

typedef struct nat_tname {
  int tid;
  char name[32];
  int64_t read_ns, used_ns;
  int stat_fd, sched_fd; /* -1 until opened */
} nat_tname;

/* One unwound C frame before merging. */
typedef struct nat_frame {
  const nat_ip *ip;
} nat_frame;

struct bf_smp_native {
  bf_smp *h;
  int pid;
  char err[512];
  /* thread filter */
  char *filter;
  char **globs;
  size_t nglobs;
  long *ftids;
  size_t nftids;
  /* libunwind */
  unw_addr_space_t as;
  void *upt_pid;
  /* threads */
  nat_thread *th;
  size_t nth, cap_th;
  int *want;
  size_t nwant, cap_want;
  /* maps and interned paths */
  nat_map *maps;
  size_t nmaps, cap_maps;
  char **paths;
  size_t npaths, cap_paths;
  const char *interp_path;
  int64_t maps_sample; /* sample count at the last refresh */
  /* symbol caches */
  nat_ip *ips;
  size_t cap_ips, nips;
  nat_code **codes; /* every code entry (owned), in creation order */
  size_t ncodes, cap_codes;
  bf_map3 code_map;  /* (library path, name hash, collision index) → index into codes */
  /* output */
  bf_smp_thread *out;
  size_t nout, cap_out;
  bf_smp_frame *frames;
  size_t nframes, cap_frames;
  nat_frame *cf;
  size_t cap_cf;
  /* launched child */
  int leader_exited, leader_status;
  /* statistics */
  int64_t samples, stops, stopped_ns, max_ns;
  int64_t reinjected, unwind_failed, truncated, mismatch, gone, late;
  int64_t stop_wait_ns;
  nat_tstat *retired;
  size_t nretired, cap_retired;
  int64_t omitted; /* gone threads past NAT_MAX_TSTATS */
  int unwind_complete; /* the last unwind reached the stack's root */
  int seized_any;
  nat_tname *names; /* --native-threads globs: thread names by tid */
  size_t nnames, cap_names;
  sigset_t old_mask; /* SIGCHLD is blocked while the handle lives */
  int mask_set;
  uint64_t hist[NAT_HIST];      /* stop: seen stopped -> resumed */
  uint64_t hist_lat[NAT_HIST];  /* latency: interrupt sent -> seen stopped */
  nat_page *pages; /* NAT_PAGES, direct-mapped; emptied when maps change */
  /* the snapshot the accessors serve (set around one unwind) */
  nat_thread *cur;
};

static int seterr(bf_smp_native *n, int rc, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int seterr(bf_smp_native *n, int rc, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(n->err, sizeof n->err, fmt, ap);
  va_end(ap);
  return rc;
}


const char *bf_smp_native_errmsg(const bf_smp_native *n) { return n ? n->err : "out of memory"; }

/* ---- the accessors libunwind reads the snapshot through ----------------- */

/* libunwind hands the accessors only the argument given at unw_init_remote,
 * and _UPT_find_proc_info passes its own UPT handle on, so the snapshot being
 * unwound is found through this one pointer (bifocal unwinds on one thread). */
static __thread bf_smp_native *nat_active;

static const nat_map *maps_find(bf_smp_native *n, uint64_t addr);
static int prime(bf_smp_native *n);

static int acc_mem(unw_addr_space_t as, unw_word_t addr, unw_word_t *val, int write, void *arg) {
  (void)as;
  (void)arg;
  bf_smp_native *n = nat_active;
  if (write || !n) return -UNW_EINVAL;
  nat_thread *t = n->cur;
  if (t && t->snap_ok) {
    if (addr >= t->stack_lo && addr + sizeof *val <= t->stack_lo + t->stack_len) {
      memcpy(val, t->stack + (addr - t->stack_lo), sizeof *val);
      if (addr + sizeof *val > t->deepest) t->deepest = addr + sizeof *val;
      return 0;
    }
    if (addr >= t->map_lo && addr < t->map_hi && addr + sizeof *val > t->deepest)
      t->deepest = addr + sizeof *val;
  }
  /* unwind tables: from the page cache when the mapping is read-only */
  uint64_t pa = addr & ~(uint64_t)(NAT_PAGE - 1);
  if (n->pages && addr - pa <= NAT_PAGE - sizeof *val) {
    nat_page *pg = &n->pages[(pa / NAT_PAGE) % NAT_PAGES];
    if (pg->addr == pa + 1) {
      memcpy(val, pg->data + (addr - pa), sizeof *val);
      return 0;
    }
    const nat_map *m = maps_find(n, addr);
    if (m && !m->writable && pa >= m->lo && pa + NAT_PAGE <= m->hi) {
      struct iovec pl = {pg->data, NAT_PAGE}, pr = {(void *)(uintptr_t)pa, NAT_PAGE};
      if (process_vm_readv(n->pid, &pl, 1, &pr, 1, 0) == NAT_PAGE) {
        pg->addr = pa + 1;
        memcpy(val, pg->data + (addr - pa), sizeof *val);
        return 0;
      }
      pg->addr = 0;
    }
  }
  /* stack beyond the copy, or writable data: read live (process_vm_readv
   * needs no stopped thread; outer frames rarely change meanwhile) */
  struct iovec l = {val, sizeof *val}, r = {(void *)(uintptr_t)addr, sizeof *val};
  if (process_vm_readv(n->pid, &l, 1, &r, 1, 0) != (ssize_t)sizeof *val) return -UNW_EINVAL;
  return 0;
}

static int acc_reg(unw_addr_space_t as, unw_regnum_t reg, unw_word_t *val, int write, void *arg) {
  (void)as;
  (void)arg;
  bf_smp_native *n = nat_active;
  if (write) return -UNW_EREADONLYREG;
  if (!n || !n->cur) return -UNW_EBADREG;
  const struct user_regs_struct *r = &n->cur->regs;
  switch (reg) {
    case UNW_X86_64_RAX: *val = r->rax; break;
    case UNW_X86_64_RDX: *val = r->rdx; break;
    case UNW_X86_64_RCX: *val = r->rcx; break;
    case UNW_X86_64_RBX: *val = r->rbx; break;
    case UNW_X86_64_RSI: *val = r->rsi; break;
    case UNW_X86_64_RDI: *val = r->rdi; break;
    case UNW_X86_64_RBP: *val = r->rbp; break;
    case UNW_X86_64_RSP: *val = r->rsp; break;
    case UNW_X86_64_R8: *val = r->r8; break;
    case UNW_X86_64_R9: *val = r->r9; break;
    case UNW_X86_64_R10: *val = r->r10; break;
    case UNW_X86_64_R11: *val = r->r11; break;
    case UNW_X86_64_R12: *val = r->r12; break;
    case UNW_X86_64_R13: *val = r->r13; break;
    case UNW_X86_64_R14: *val = r->r14; break;
    case UNW_X86_64_R15: *val = r->r15; break;
    case UNW_X86_64_RIP: *val = r->rip; break;
    default: return -UNW_EBADREG;
  }
  return 0;
}

static int acc_fpreg(unw_addr_space_t as, unw_regnum_t reg, unw_fpreg_t *val, int write,
                     void *arg) {
  (void)as, (void)reg, (void)val, (void)write, (void)arg;
  return -UNW_EBADREG;
}

static int acc_resume(unw_addr_space_t as, unw_cursor_t *c, void *arg) {
  (void)as, (void)c, (void)arg;
  return -UNW_EINVAL;
}

static int acc_dyn_list(unw_addr_space_t as, unw_word_t *addr, void *arg) {
  (void)as, (void)addr, (void)arg;
  return -UNW_ENOINFO; /* no run-time registered (JIT) unwind info */
}

/* ---- /proc/PID/maps --------------------------------------------------- */

static const char *intern_path(bf_smp_native *n, const char *p) {
  for (size_t i = 0; i < n->npaths; i++)
    if (strcmp(n->paths[i], p) == 0) return n->paths[i];
  if (bf_vec_grow((void **)&n->paths, &n->cap_paths, n->npaths + 1, sizeof *n->paths, 16) < 0) return NULL;
  char *s = strdup(p);
  if (!s) return NULL;
  n->paths[n->npaths++] = s;
  return s;
}

static int add_map(void *ud, const bf_procmap *pm) {
  bf_smp_native *n = ud;
  if (bf_vec_grow((void **)&n->maps, &n->cap_maps, n->nmaps + 1, sizeof *n->maps, 16) < 0) return 1;
  nat_map *m = &n->maps[n->nmaps++];
  m->lo = pm->lo;
  m->hi = pm->hi;
  m->off = pm->off;
  m->exec = pm->perms[2] == 'x';
  m->writable = pm->perms[1] == 'w';
  m->path = *pm->name == '/' ? intern_path(n, pm->name) : NULL;
  return 0;
}

static int maps_refresh(bf_smp_native *n) {
  size_t had = n->nmaps;
  int64_t had_sample = n->maps_sample;
  n->nmaps = 0;
  n->maps_sample = n->samples;
  int rc = bf_procmaps_foreach(n->pid, add_map, n);
  if (rc < 0) { /* not opened (add_map never fails with < 0): the table is as it was */
    n->nmaps = had;
    n->maps_sample = had_sample;
    return rc == -ENOENT ? -ESRCH : rc;
  }
  /* code may have moved (dlclose/dlopen): cached unwind rules are stale */
  unw_flush_cache(n->as, 0, 0);
  for (size_t i = 0; n->pages && i < NAT_PAGES; i++) n->pages[i].addr = 0;
  return 0;
}

/* Mapping containing addr, refreshing the table at most once per sample. */
static const nat_map *maps_find(bf_smp_native *n, uint64_t addr) {
  for (int pass = 0; pass < 2; pass++) {
    size_t lo = 0, hi = n->nmaps;
    while (lo < hi) { /* maps are sorted by address */
      size_t mid = (lo + hi) / 2;
      if (addr < n->maps[mid].lo)
        hi = mid;
      else if (addr >= n->maps[mid].hi)
        lo = mid + 1;
      else
        return &n->maps[mid];
    }
    if (pass || n->maps_sample == n->samples || maps_refresh(n) < 0) break;
  }
  return NULL;
}

/* ---- symbols ------------------------------------------------------------ */

static nat_code *code_intern(bf_smp_native *n, const char *path, const char *name) {
  int64_t h = (int64_t)bf_hash_str(name, strlen(name)), k = 0;
  for (const int64_t *hit; (hit = bf_map3_get(&n->code_map, (int64_t)(uintptr_t)path, h, k)); k++) {
    nat_code *c = n->codes[*hit];
    if (strcmp(c->pub.qualname, name) == 0) return c; /* paths are interned: same pointer, same path */
  }
  if (bf_vec_grow((void **)&n->codes, &n->cap_codes, n->ncodes + 1, sizeof *n->codes, 4096) < 0) return NULL;
  nat_code *c = calloc(1, sizeof *c);
  char *q = strdup(name);
  if (!c || !q || bf_map3_put(&n->code_map, (int64_t)(uintptr_t)path, h, k, (int64_t)n->ncodes)) {
    free(c);
    free(q);
    return NULL;
  }
  c->pub.filename = path;
  c->pub.qualname = q;
  c->pub.firstlineno = 0;
  n->codes[n->ncodes++] = c;
  return c;
}

static int is_eval_symbol(const char *s) {
  /* the eval loop itself (also its GCC-split ".cold" part); wrappers like
   * PyEval_EvalFrameEx call it and stay ordinary frames */
  static const char ev[] = "_PyEval_EvalFrameDefault";
  return strncmp(s, ev, sizeof ev - 1) == 0 && (s[sizeof ev - 1] == 0 || s[sizeof ev - 1] == '.');
}

/* Symbolise addr (a pc, or a return address minus one). Cached per address.
 * c: the cursor at that frame, asked for the function's start (from the
 * unwind tables) only on a miss: in a stripped library the nearest exported
 * symbol may belong to an earlier function, and such frames are named by
 * their function's file offset instead ("0x3a40"), which is stable, or "??"
 * when no unwind table covers the address either. */
static const nat_ip *ip_lookup(bf_smp_native *n, uint64_t addr, unw_cursor_t *c) {
  if (n->nips * 2 >= n->cap_ips) {
    if (n->cap_ips && n->nips < NAT_MAX_IPS) {
      size_t oc = n->cap_ips;
      nat_ip *old = n->ips;
      nat_ip *ni = calloc(oc * 2, sizeof *ni);
      if (!ni) return NULL;
      n->ips = ni;
      n->cap_ips = oc * 2;
      for (size_t i = 0; i < oc; i++) {
        if (!old[i].addr) continue;
        size_t j = (size_t)((old[i].addr * 0x9E3779B97F4A7C15ull) >> 20) & (n->cap_ips - 1);
        while (ni[j].addr) j = (j + 1) & (n->cap_ips - 1);
        ni[j] = old[i];
      }
      free(old);
    } else {
      free(n->ips);
      n->cap_ips = 8192;
      n->nips = 0;
      if (!(n->ips = calloc(n->cap_ips, sizeof *n->ips))) {
        n->cap_ips = 0;
        return NULL;
      }
    }
  }
  size_t j = (size_t)((addr * 0x9E3779B97F4A7C15ull) >> 20) & (n->cap_ips - 1);
  while (n->ips[j].addr) {
    if (n->ips[j].addr == addr) return &n->ips[j];
    j = (j + 1) & (n->cap_ips - 1);
  }
  const nat_map *m = maps_find(n, addr);
  const char *path = m && m->path ? m->path : intern_path(n, "[anonymous]");
  if (!path) return NULL;
  char name[512];
  unw_word_t off = 0;
  unw_proc_info_t pi;
  uint64_t start = addr;
  if (c && unw_get_proc_info(c, &pi) == 0 && pi.start_ip && pi.start_ip <= addr &&
      addr < pi.end_ip)
    start = pi.start_ip;
  if (!m || !m->path ||
      _UPT_get_proc_name(n->as, addr, name, sizeof name, &off, n->upt_pid) != 0 || !name[0] ||
      off > addr - start) {
    /* unknown function: named by its start when the unwind tables know it,
     * else "??" (one per library) rather than one name per address */
    if (start != addr || !m)
      snprintf(name, sizeof name, "0x%llx",
               (unsigned long long)(m ? start - m->lo + m->off : start));
    else
      snprintf(name, sizeof name, "??");
  }
  nat_code *code = code_intern(n, path, name);
  if (!code) return NULL;
  nat_ip *e = &n->ips[j];
  e->addr = addr;
  e->code = code;
  e->eval = is_eval_symbol(name);
  e->interp = path == n->interp_path;
  n->nips++;
  return e;
}

/* ---- threads and ptrace --------------------------------------------------- */

static nat_thread *thread_find(bf_smp_native *n, int tid) {
  for (size_t i = 0; i < n->nth; i++)
    if (n->th[i].tid == tid) return &n->th[i];
  return NULL;
}

/* The thread's scheduler state before we stop it (once stopped /proc says
 * 't', which is us, not the target). */
static void read_run_state(bf_smp_native *n, nat_thread *t) {
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

static void thread_drop(bf_smp_native *n, nat_thread *t) {
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

static void resume(bf_smp_native *n, nat_thread *t) {
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
    const nat_map *m = maps_find(n, sp);
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
  nat_thread *t = thread_find(n, tid);
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
      resume(n, t); /* counts the stop it cost */
    }
    return;
  }
  long rc = ev == PTRACE_EVENT_STOP && is_job_stop(sig) ? ptrace(PTRACE_LISTEN, tid, 0, 0)
                                                       : ptrace(PTRACE_CONT, tid, 0, 0);
  if (t) t->state = rc < 0 ? NT_GONE : NT_RUNNING;
}

/* Consume whatever the tracees reported meanwhile, without blocking. */
static void reap_events(bf_smp_native *n) {
  int st;
  pid_t r;
  while ((r = waitpid(-1, &st, WNOHANG | __WALL)) > 0) on_status(n, r, st, 0);
}

/* Wait (SIGCHLD-driven) until the pending threads stopped, snapshotting
 * each as it stops. No thread is held more than hold_ns waiting for the
 * others: the deadline runs from the first stop seen (before it, from
 * NAT_FIRST_STOP_NS after the interrupts: nothing is stopped yet, so
 * waiting costs the target nothing). Returns 0 or -EINTR. */
static int collect_stops(bf_smp_native *n, size_t pending, int64_t hold_ns) {
  int64_t deadline = bf_mono_ns() + NAT_FIRST_STOP_NS;
  int any = 0;
  sigset_t chld;
  sigemptyset(&chld);
  sigaddset(&chld, SIGCHLD);
  while (pending) {
    int st;
    pid_t r = waitpid(-1, &st, WNOHANG | __WALL);
    if (r > 0) {
      nat_thread *t = thread_find(n, r);
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
    reap_events(n);
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

static int parse_filter(bf_smp_native *n, const char *spec) {
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
static nat_tname *tinfo(bf_smp_native *n, int tid) {
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
static ssize_t proc_read(bf_smp_native *n, int tid, int *fd, const char *what, char *buf,
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

static uint32_t stat_state(const char *buf) {
  const char *p = strrchr(buf, ')');
  if (!p || p[1] != ' ' || !p[2]) return 0;
  return p[2] == 'R' ? BF_SMP_ON_CPU : BF_SMP_IDLE;
}

/* A thread's OS name (/proc comm), re-read at most every NAT_NAME_NS: a
 * thread may name itself after it started. */
static const char *thread_name(bf_smp_native *n, int tid) {
  nat_tname *e = tinfo(n, tid);
  if (!e) return NULL;
  if (!e->read_ns || e->used_ns - e->read_ns > NAT_NAME_NS) {
    int fd = -1;
    e->name[0] = 0;
    if (proc_read(n, tid, &fd, "comm", e->name, sizeof e->name) > 0)
      e->name[strcspn(e->name, "\n")] = 0;
    if (fd >= 0) close(fd);
    e->read_ns = e->used_ns;
  }
  return e->name;
}

static int selected(bf_smp_native *n, const bf_smp_thread *t) {
  if (!n->filter) return 1;
  for (size_t i = 0; i < n->nftids; i++)
    if (n->ftids[i] == t->native_tid) return 1;
  const char *name = n->nglobs && t->native_tid > 0 ? thread_name(n, (int)t->native_tid) : NULL;
  for (size_t i = 0; i < n->nglobs; i++)
    if ((name && fnmatch(n->globs[i], name, 0) == 0) ||
        (t->py_name && fnmatch(n->globs[i], t->py_name, 0) == 0))
      return 1;
  return 0;
}

/* ---- handle ------------------------------------------------------------------ */

int bf_smp_native_new(bf_smp *h, const char *threads, bf_smp_native **out, char *errbuf,
                      size_t len) {
#if !defined(__x86_64__)
  (void)h, (void)threads, (void)out;
  snprintf(errbuf, len, "native stacks are only supported on x86-64");
  return -ENOTSUP;
#else
  bf_smp_native *n = calloc(1, sizeof *n);
  if (!n) {
    snprintf(errbuf, len, "out of memory");
    return -ENOMEM;
  }
  n->h = h;
  n->pid = bf_smp_pid(h);
  int rc = parse_filter(n, threads);
  if (rc < 0) {
    snprintf(errbuf, len, "bad --native-threads '%s' (a comma list of thread ids or name globs)",
             threads ? threads : "");
    bf_smp_native_free(n);
    return rc;
  }
  unw_accessors_t acc = _UPT_accessors;
  acc.access_mem = acc_mem;
  acc.access_reg = acc_reg;
  acc.access_fpreg = acc_fpreg;
  acc.resume = acc_resume;
  acc.get_dyn_info_list_addr = acc_dyn_list;
  n->as = unw_create_addr_space(&acc, 0);
  n->upt_pid = n->as ? _UPT_create(n->pid) : NULL;
  if (!n->as || !n->upt_pid) {
    snprintf(errbuf, len, "libunwind: cannot create a remote address space");
    bf_smp_native_free(n);
    return -ENOTSUP;
  }
  unw_set_caching_policy(n->as, UNW_CACHE_GLOBAL);
  n->stop_wait_ns = NAT_STOP_WAIT_NS;
  /* stops are awaited with sigtimedwait: SIGCHLD must stay pending */
  sigset_t chld;
  sigemptyset(&chld);
  sigaddset(&chld, SIGCHLD);
  pthread_sigmask(SIG_BLOCK, &chld, &n->old_mask);
  n->mask_set = 1;
  unw_set_cache_size(n->as, 4096, 0);
  n->samples = 1;
  n->pages = calloc(NAT_PAGES, sizeof *n->pages); /* optional: NULL reads live */
  rc = maps_refresh(n);
  if (rc < 0) {
    snprintf(errbuf, len, "cannot read /proc/%d/maps: %s", n->pid, strerror(-rc));
    bf_smp_native_free(n);
    return rc;
  }
  /* the interpreter's own object: libpython if mapped, else the executable */
  for (size_t i = 0; i < n->nmaps && !n->interp_path; i++) {
    const char *p = n->maps[i].path;
    const char *b = p ? strrchr(p, '/') : NULL;
    if (b && strncmp(b + 1, "libpython3.", 11) == 0) n->interp_path = p;
  }
  if (!n->interp_path) {
    char link[64], exe[512];
    snprintf(link, sizeof link, "/proc/%d/exe", n->pid);
    ssize_t k = readlink(link, exe, sizeof exe - 1);
    if (k > 0) {
      exe[k] = 0;
      char *d = strstr(exe, " (deleted)");
      if (d) *d = 0;
      n->interp_path = intern_path(n, exe);
    }
  }
  rc = prime(n);
  if (rc < 0) {
    snprintf(errbuf, len, "%s", n->err);
    bf_smp_native_free(n);
    return rc;
  }
  snprintf(n->err, sizeof n->err, "ok");
  *out = n;
  return 0;
#endif
}

void bf_smp_native_free(bf_smp_native *n) {
  if (!n) return;
  /* release every thread: a running tracee must be stopped to detach */
  for (size_t i = 0; i < n->nth; i++) {
    nat_thread *t = &n->th[i];
    if (t->state == NT_RUNNING) {
      if (ptrace(PTRACE_INTERRUPT, t->tid, 0, 0) == 0)
        t->state = NT_PENDING;
      else
        t->state = NT_GONE;
    }
  }
  int64_t give_up = bf_mono_ns() + NAT_DETACH_WAIT_NS;
  for (;;) {
    int pending = 0;
    for (size_t i = 0; i < n->nth; i++) {
      nat_thread *t = &n->th[i];
      if (t->state == NT_STOPPED) {
        ptrace(PTRACE_DETACH, t->tid, 0, 0);
        t->state = NT_GONE;
        continue;
      }
      if (t->state != NT_PENDING) continue;
      int st;
      pid_t r = waitpid(t->tid, &st, WNOHANG | __WALL);
      if (r < 0 && errno == EINTR) {
        pending++;
        continue;
      }
      if (r < 0) {
        t->state = NT_GONE;
        continue;
      }
      if (r == 0) {
        pending++;
        continue;
      }
      if (WIFSTOPPED(st)) {
        int sig = WSTOPSIG(st), ev = (unsigned)st >> 16;
        /* hand a signal caught on the way on; a job-control stop stays */
        ptrace(PTRACE_DETACH, t->tid, 0, (void *)(intptr_t)(ev == 0 ? sig : 0));
      } else if (t->tid == n->pid) {
        n->leader_exited = 1;
        n->leader_status = st;
      }
      t->state = NT_GONE;
    }
    /* past the bound, the kernel's detach at our exit releases the rest */
    if (!pending || bf_mono_ns() > give_up) break;
    struct timespec ts = {0, 1000000};
    nanosleep(&ts, NULL);
  }
  for (size_t i = 0; i < n->nth; i++) {
    if (n->th[i].upt) _UPT_destroy(n->th[i].upt);
    if (n->th[i].stat_fd >= 0) close(n->th[i].stat_fd);
    free(n->th[i].stack);
  }
  free(n->th);
  if (n->upt_pid) _UPT_destroy(n->upt_pid);
  if (n->as) unw_destroy_addr_space(n->as);
  for (size_t i = 0; i < n->ncodes; i++) {
    free((char *)n->codes[i]->pub.qualname);
    free(n->codes[i]);
  }
  free(n->codes);
  bf_map3_free(&n->code_map);
  free(n->ips);
  for (size_t i = 0; i < n->npaths; i++) free(n->paths[i]);
  free(n->paths);
  free(n->maps);
  free(n->want);
  free(n->out);
  free(n->frames);
  free(n->cf);
  free(n->filter);
  free(n->globs);
  free(n->ftids);
  free(n->retired);
  free(n->pages);
  for (size_t i = 0; i < n->nnames; i++) {
    if (n->names[i].stat_fd >= 0) close(n->names[i].stat_fd);
    if (n->names[i].sched_fd >= 0) close(n->names[i].sched_fd);
  }
  free(n->names);
  if (n->mask_set) {
    sigset_t chld;
    sigemptyset(&chld);
    sigaddset(&chld, SIGCHLD);
    struct timespec zero = {0, 0};
    while (sigtimedwait(&chld, NULL, &zero) > 0) {
    }
    pthread_sigmask(SIG_SETMASK, &n->old_mask, NULL);
  }
  free(n);
}

int bf_smp_native_child_exited(bf_smp_native *n, int *status) {
  reap_events(n);
  if (!n->leader_exited) return 0;
  *status = n->leader_status;
  return 1;
}

/* ---- sampling ----------------------------------------------------------------- */

/* Seize tid unless already traced; a new slot in state RUNNING. */
static nat_thread *thread_seize(bf_smp_native *n, int tid, const char *name, int *err) {
  nat_thread *t = thread_find(n, tid);
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
    snprintf(buf, len,
             "it is already traced by process %ld (%s); only one tracer at a time (detach it, "
             "or record without --native)",
             tracer, comm);
    return buf;
  }
  return "ptrace refused: kernel.yama.ptrace_scope or a missing CAP_SYS_PTRACE forbids it (run "
         "as root, `sudo sysctl kernel.yama.ptrace_scope=0`, or in a container add "
         "`--cap-add SYS_PTRACE`)";
}

/* Unwind t's snapshot into n->cf. Returns the number of C frames. */
static size_t unwind(bf_smp_native *n, nat_thread *t) {
  unw_cursor_t c;
  size_t k = 0;
  nat_active = n;
  n->cur = t;
  n->unwind_complete = 0;
  t->deepest = 0;
  if (bf_vec_grow((void **)&n->cf, &n->cap_cf, NAT_MAX_DEPTH, sizeof *n->cf, 16) < 0 ||
      unw_init_remote(&c, n->as, t->upt) < 0) {
    n->unwind_failed++;
    goto out;
  }
  int after_signal = 1; /* the first pc is exact, not a return address */
  while (k < NAT_MAX_DEPTH) {
    unw_word_t ip = 0;
    if (unw_get_reg(&c, UNW_REG_IP, &ip) < 0 || !ip) break;
    const nat_map *m = maps_find(n, ip);
    if (!m || !m->exec) break; /* garbage past the last real frame */
    /* a return address points after the call: look up the call itself */
    const nat_ip *e = ip_lookup(n, after_signal ? ip : ip - 1, &c);
    if (!e) break;
    n->cf[k++].ip = e;
    after_signal = unw_is_signal_frame(&c) > 0;
    int st = unw_step(&c);
    if (st == 0) n->unwind_complete = 1; /* reached the outermost frame */
    if (st <= 0) break;
  }
  if (!k) n->unwind_failed++;
out:
  n->cur = NULL;
  nat_active = NULL;
  return k;
}

static int push_out_frame(bf_smp_native *n, const bf_smp_code *code, int32_t line, uint32_t fl) {
  if (bf_vec_grow((void **)&n->frames, &n->cap_frames, n->nframes + 1, sizeof *n->frames, 16) < 0)
    return -ENOMEM;
  n->frames[n->nframes++] = (bf_smp_frame){code, line, fl};
  return 0;
}

/* Returns 0 (merged), 1 (only Python frames could be kept), -ENOMEM.
 * Merge nc unwound C frames (n->cf, innermost first) with the Python frames
 * py[0..np) (innermost first) into n->frames. The rule:
 *  - the Python frames split into groups, each ending (outwards) at a frame
 *    flagged ENTRY: the frames one C call of the eval loop runs;
 *  - the k-th eval-loop C frame from the inside is replaced by group k;
 *  - other C frames stay, except frames of the interpreter's own object
 *    between two eval frames (call machinery: _PyFunction_Vectorcall, ...)
 *    and every C frame outside the outermost Python frame (thread start,
 *    main, Py_RunMain), so stacks keep the roots of Python-only samples;
 *  - groups left over when the unwind stopped short go on the outer end. */
static int merge(bf_smp_native *n, const bf_smp_frame *py, size_t np, size_t nc) {
  size_t gstart[NAT_MAX_DEPTH + 1], ng = 0;
  int any_entry = 0;
  for (size_t i = 0; i < np; i++) any_entry |= (py[i].flags & BF_SMP_FRAME_ENTRY) != 0;
  size_t neval = 0;
  for (size_t i = 0; i < nc; i++) neval += n->cf[i].ip->eval;
  if (any_entry) {
    for (size_t i = 0; i < np && ng < NAT_MAX_DEPTH; i++) {
      if (i == 0 || (py[i - 1].flags & BF_SMP_FRAME_ENTRY)) gstart[ng++] = i;
    }
  } else {
    /* no boundaries known: one Python frame per eval frame from the inside,
     * the rest to the outermost one */
    for (size_t i = 0; i < np && ng < NAT_MAX_DEPTH && (ng + 1 < neval || ng == 0); i++)
      gstart[ng++] = i;
  }
  gstart[ng] = np;
  size_t k = 0;
  int rc;
  if (ng && !neval && n->unwind_complete) {
    /* a whole C stack without the eval loop in it: its symbol is unknown
     * (stripped interpreter); C frames cannot be placed, keep Python's */
    n->mismatch++;
    for (size_t j = 0; j < np; j++)
      if ((rc = push_out_frame(n, py[j].code, py[j].line, py[j].flags)) < 0) return rc;
    return 1;
  }
  for (size_t i = 0; i < nc; i++) {
    const nat_ip *e = n->cf[i].ip;
    if (ng && k >= ng) break; /* outside the outermost Python frame */
    if (e->eval && k < ng) {
      for (size_t j = gstart[k]; j < gstart[k + 1]; j++)
        if ((rc = push_out_frame(n, py[j].code, py[j].line, py[j].flags)) < 0) return rc;
      k++;
      continue;
    }
    if (k > 0 && e->interp) continue;
    if ((rc = push_out_frame(n, &e->code->pub, 0, BF_SMP_FRAME_NATIVE)) < 0) return rc;
  }
  if (neval > ng && ng) n->mismatch++;
  if (k < ng) {
    n->truncated++;
    for (size_t j = gstart[k]; j < np; j++)
      if ((rc = push_out_frame(n, py[j].code, py[j].line, py[j].flags)) < 0) return rc;
  }
  return 0;
}

/* Seize n->want[i] unless traced already. NULL when gone or refused;
 * *rc < 0 only when refused before any thread was ever seized (with the
 * reason on n): later refusals are per-thread events. */
static nat_thread *seize_wanted(bf_smp_native *n, size_t i, int *rc) {
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
    *rc = seterr(n, -EPERM, "cannot trace thread %d of process %d: %s", n->want[i], n->pid,
                 explain_trace(n, n->want[i], err, why, sizeof why));
  }
  return NULL;
}

/* Choose the first threads (one walk) and seize them, so that a refusal is
 * reported before the caller writes anything. */
static int prime(bf_smp_native *n) {
  const bf_smp_thread *pt;
  size_t npt;
  int rc = -EIO;
  for (int tries = 0; tries < 20 && rc == -EIO; tries++) rc = bf_smp_sample(n->h, 0, &pt, &npt);
  if (rc < 0) return seterr(n, rc, "%s", bf_smp_errmsg(n->h));
  n->nwant = 0;
  for (size_t i = 0; i < npt; i++) {
    if (pt[i].native_tid <= 0 || !selected(n, &pt[i])) continue;
    if (bf_vec_grow((void **)&n->want, &n->cap_want, n->nwant + 1, sizeof *n->want, 16) < 0)
      return seterr(n, -ENOMEM, "out of memory");
    n->want[n->nwant++] = (int)pt[i].native_tid;
  }
  for (size_t i = 0; i < n->nwant; i++) {
    seize_wanted(n, i, &rc);
    if (rc < 0) return rc;
  }
  return 0;
}

int bf_smp_native_sample(bf_smp_native *n, unsigned want, const bf_smp_thread **threads,
                         size_t *count) {
  const bf_smp_thread *pt;
  size_t npt;
  int rc;
  n->samples++;
  reap_events(n);
  /* which threads to stop: those of the previous sample (new threads are
   * seized when a walk first sees them; prime() chose the first ones) */
  for (size_t i = 0; i < n->nwant; i++) {
    nat_thread *t = seize_wanted(n, i, &rc);
    if (rc < 0) return rc;
    if (!t) continue;
    if (t->state == NT_PENDING) continue; /* still on its way from an earlier sample */
    if (t->state != NT_RUNNING) continue;
    if (want & BF_SMP_WANT_STATE) read_run_state(n, t);
    t->t_interrupt = bf_mono_ns();
    if (ptrace(PTRACE_INTERRUPT, t->tid, 0, 0) < 0) {
      t->state = NT_GONE;
      smp_forget_tid(n->h, t->tid);
      continue;
    }
    t->state = NT_PENDING;
  }
  size_t pending = 0;
  for (size_t i = 0; i < n->nwant; i++) {
    nat_thread *t = thread_find(n, n->want[i]);
    pending += t && t->state == NT_PENDING;
  }
  int intr = collect_stops(n, pending, n->stop_wait_ns) == -EINTR;
  /* threads still not stopped (waiting for a CPU, or in uninterruptible
   * sleep) get no C frames this time; their stop is resumed when it comes */
  /* the Python frames, read while the chosen threads stand still */
  /* (thread state and CPU time come from /proc afterwards, not in here) */
  unsigned walk_want = want & ~(unsigned)(BF_SMP_WANT_STATE | BF_SMP_WANT_CPU_TIME);
  rc = intr ? -EINTR : bf_smp_sample(n->h, walk_want, &pt, &npt);
  for (size_t i = 0; i < n->nth; i++) resume(n, &n->th[i]);
  reap_events(n); /* stops that came in after the deadline: resume them now */
  if (rc < 0) {
    if (rc == -EINTR) return seterr(n, rc, "interrupted while waiting for a thread to stop");
    return seterr(n, rc, "%s", bf_smp_errmsg(n->h));
  }
  /* unwind (threads running again) and merge */
  n->nout = n->nframes = 0;
  n->nwant = 0;
  if (bf_vec_grow((void **)&n->out, &n->cap_out, npt ? npt : 1, sizeof *n->out, 16) < 0) return -ENOMEM;
  for (size_t i = 0; i < npt; i++) {
    bf_smp_thread *o = &n->out[n->nout++];
    *o = pt[i];
    size_t first = n->nframes;
    nat_thread *t = pt[i].native_tid > 0 ? thread_find(n, (int)pt[i].native_tid) : NULL;
    if (pt[i].native_tid > 0 && selected(n, &pt[i])) {
      if (bf_vec_grow((void **)&n->want, &n->cap_want, n->nwant + 1, sizeof *n->want, 16) < 0) return -ENOMEM;
      n->want[n->nwant++] = (int)pt[i].native_tid;
    }
    size_t nc = t && t->snap_ok && t->state != NT_GONE ? unwind(n, t) : 0;
    if (t) {
      t->snap_ok = 0;
      const char *nm = thread_name(n, t->tid); /* fresh: threads rename themselves */
      snprintf(t->name, sizeof t->name, "%s", nm && *nm ? nm : pt[i].name ? pt[i].name : "");
    }
    /* state: as it was before the stop for the threads stopped now */
    nat_tname *ti = (want & (BF_SMP_WANT_STATE | BF_SMP_WANT_CPU_TIME)) && pt[i].native_tid > 0
                        ? tinfo(n, (int)pt[i].native_tid)
                        : NULL;
    char buf[512];
    if (want & BF_SMP_WANT_STATE) {
      if (t && t->state_sample == n->samples && t->run_state)
        o->flags |= t->run_state;
      else if (ti && proc_read(n, ti->tid, &ti->stat_fd, "stat", buf, sizeof buf) > 0)
        o->flags |= stat_state(buf);
    }
    if ((want & BF_SMP_WANT_CPU_TIME) && ti &&
        proc_read(n, ti->tid, &ti->sched_fd, "schedstat", buf, sizeof buf) > 0)
      o->cpu_ns = strtoll(buf, NULL, 10);
    if (nc) {
      rc = merge(n, pt[i].frames, pt[i].nframes, nc);
      if (rc == 0) o->flags |= BF_SMP_NATIVE;
      if (rc > 0) rc = 0;
    } else {
      rc = 0;
      for (size_t j = 0; j < pt[i].nframes && rc == 0; j++)
        rc = push_out_frame(n, pt[i].frames[j].code, pt[i].frames[j].line, pt[i].frames[j].flags);
    }
    if (rc < 0) return seterr(n, rc, "out of memory");
    o->nframes = n->nframes - first;
    o->frames = (const bf_smp_frame *)(uintptr_t)first;
  }
  for (size_t i = 0; i < n->nout; i++) n->out[i].frames = n->frames + (uintptr_t)n->out[i].frames;
  reap_events(n);
  /* forget threads that are gone */
  for (size_t i = 0; i < n->nth; i++)
    if (n->th[i].state == NT_GONE && n->th[i].tid) {
      n->gone++;
      thread_drop(n, &n->th[i]);
    }
  *threads = n->out;
  *count = n->nout;
  return 0;
}

/* ---- statistics ----------------------------------------------------------------- */

static int64_t hist_pct(const uint64_t *hist, double q) {
  uint64_t total = 0, acc = 0;
  for (size_t i = 0; i < NAT_HIST; i++) total += hist[i];
  if (!total) return 0;
  uint64_t rank = (uint64_t)(q * (double)(total - 1)) + 1;
  for (size_t i = 0; i < NAT_HIST; i++) {
    acc += hist[i];
    if (acc >= rank) {
      if (i < 16) return (int64_t)i;
      size_t e = (i - 16) / 16 + 4, sub = (i - 16) % 16;
      uint64_t lo = (uint64_t)(16 + sub) << (e - 4), w = 1ull << (e - 4);
      return (int64_t)(lo + w / 2);
    }
  }
  return 0;
}

int bf_smp_native_stats_json(const bf_smp_native *n, char **json) {
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  if (!f) return -ENOMEM;
  fprintf(f,
          "{\"native\":{\"stops\":%lld,\"stopped_ns\":%lld,\"stop_p50_ns\":%lld,"
          "\"stop_p90_ns\":%lld,\"stop_p99_ns\":%lld,\"stop_max_ns\":%lld,"
          "\"signals_reinjected\":%lld,\"unwind_failed\":%lld,\"unwind_truncated\":%lld,"
          "\"merge_mismatch\":%lld,\"threads_gone\":%lld,\"late_stops\":%lld,"
          "\"stop_wait_ns\":%lld,\"interrupt_p50_ns\":%lld,\"interrupt_p99_ns\":%lld,"
          "\"threads\":[",
          (long long)n->stops, (long long)n->stopped_ns, (long long)hist_pct(n->hist, 0.5),
          (long long)hist_pct(n->hist, 0.9), (long long)hist_pct(n->hist, 0.99), (long long)n->max_ns,
          (long long)n->reinjected, (long long)n->unwind_failed, (long long)n->truncated,
          (long long)n->mismatch, (long long)n->gone, (long long)n->late,
          (long long)n->stop_wait_ns, (long long)hist_pct(n->hist_lat, 0.5),
          (long long)hist_pct(n->hist_lat, 0.99));
  size_t listed = 0;
  int64_t omitted = n->omitted;
  for (size_t i = 0; i < n->nretired + n->nth; i++) {
    nat_tstat ts;
    if (i < n->nretired) {
      ts = n->retired[i];
    } else {
      const nat_thread *t = &n->th[i - n->nretired];
      if (!t->tid || !t->stops) continue;
      ts.tid = t->tid;
      memcpy(ts.name, t->name, sizeof ts.name);
      ts.stops = t->stops;
      ts.stopped_ns = t->stopped_ns;
      ts.max_ns = t->max_ns;
    }
    if (listed == NAT_MAX_TSTATS) {
      omitted++;
      continue;
    }
    fprintf(f, "%s{\"tid\":%d,\"name\":", listed ? "," : "", ts.tid);
    bf_json_str(f, ts.name);
    fprintf(f, ",\"stops\":%lld,\"stopped_ns\":%lld,\"max_ns\":%lld}", (long long)ts.stops,
            (long long)ts.stopped_ns, (long long)ts.max_ns);
    listed++;
  }
  fprintf(f, "],\"threads_omitted\":%lld}}", (long long)omitted);
  if (fclose(f) != 0 || !buf) {
    free(buf);
    return -ENOMEM;
  }
  *json = buf;
  return 0;
}

static int json_num(const char *js, const char *key, long long *v) {
  char pat[64];
  snprintf(pat, sizeof pat, "\"%s\":", key);
  const char *p = strstr(js, pat);
  if (!p) return -ENOENT;
  *v = strtoll(p + strlen(pat), NULL, 10);
  return 0;
}

static void fmt_ns(char *b, size_t len, long long ns) {
  if (ns < 1000000)
    snprintf(b, len, "%.0f us", (double)ns / 1e3);
  else if (ns < 1000000000LL)
    snprintf(b, len, "%.1f ms", (double)ns / 1e6);
  else
    snprintf(b, len, "%.2f s", (double)ns / 1e9);
}

int bf_smp_native_summary(const char *extra_json, char *buf, size_t len) {
  long long stops, total, p50, p99, mx;
  if (!extra_json || !strstr(extra_json, "\"native\"") ||
      json_num(extra_json, "stops", &stops) < 0 || json_num(extra_json, "stopped_ns", &total) < 0 ||
      json_num(extra_json, "stop_p50_ns", &p50) < 0 ||
      json_num(extra_json, "stop_p99_ns", &p99) < 0 || json_num(extra_json, "stop_max_ns", &mx) < 0 ||
      stops <= 0)
    return -ENOENT;
  char a[32], b[32], c[32], d[32];
  fmt_ns(a, sizeof a, p50);
  fmt_ns(b, sizeof b, p99);
  fmt_ns(c, sizeof c, mx);
  fmt_ns(d, sizeof d, total);
  snprintf(buf, len, "threads stopped %lld times: median %s, p99 %s, max %s per stop; %s in all",
           stops, a, b, c, d);
  return 0;
}
