/* inspect.c — sample one process, or a process tree, for dump/top/live (see
 * inspect.h). Children are found through /proc/PID/task/TID/children. */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"
#include "clock.h"
#include "inspect.h"
#include "native.h"

#define MAX_TARGETS 64

typedef struct target {
  int pid;
  bf_smp *h;
  bf_smp_native *nat;
} target;

struct bf_inspect {
  bf_inspect_opts o;
  target t[MAX_TARGETS];
  size_t n;
  int64_t last_scan_ns;
  char err[512];
};

static void target_free(target *t) {
  bf_smp_native_free(t->nat);
  bf_smp_free(t->h);
  memset(t, 0, sizeof *t);
}

/* Attach one target; 0, or negative errno with the message in l->err. */
static int target_open(bf_inspect *l, int pid, target *t) {
  memset(t, 0, sizeof *t);
  t->pid = pid;
  t->h = bf_smp_new();
  if (!t->h) {
    snprintf(l->err, sizeof l->err, "out of memory");
    return -ENOMEM;
  }
  int rc = bf_smp_attach(t->h, pid);
  if (rc < 0) {
    snprintf(l->err, sizeof l->err, "%s", bf_smp_errmsg(t->h));
    target_free(t);
    return rc;
  }
  if (l->o.native) {
    rc = bf_smp_native_new(t->h, l->o.native_threads, &t->nat);
    if (rc < 0) {
      snprintf(l->err, sizeof l->err, "%s", bf_smp_errmsg(t->h));
      target_free(t);
      return rc;
    }
    if (l->o.native_stop_wait_ns > 0) bf_smp_native_set_stop_wait(t->nat, l->o.native_stop_wait_ns);
  }
  return 0;
}

/* Direct children of pid, from every task's children file. */
static size_t children_of(int pid, int *out, size_t max) {
  char path[96];
  snprintf(path, sizeof path, "/proc/%d/task", pid);
  DIR *d = opendir(path);
  if (!d) return 0;
  size_t n = 0;
  struct dirent *e;
  while ((e = readdir(d)) && n < max) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    char cp[128], buf[1024];
    snprintf(cp, sizeof cp, "/proc/%d/task/%.16s/children", pid, e->d_name);
    FILE *f = fopen(cp, "re");
    if (!f) continue;
    size_t len = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[len] = 0;
    char *p = buf, *end;
    while (n < max) {
      long c = strtol(p, &end, 10);
      if (end == p) break;
      if (c > 0) out[n++] = (int)c;
      p = end;
    }
  }
  closedir(d);
  return n;
}

static int known(const bf_inspect *l, int pid) {
  for (size_t i = 0; i < l->n; i++)
    if (l->t[i].pid == pid) return 1;
  return 0;
}

/* Attach Python descendants not seen yet; non-Python ones are skipped (and
 * looked at again at the next scan: a fork may exec Python later). */
static void scan_children(bf_inspect *l) {
  int queue[256];
  size_t nq = 0, qi = 0;
  queue[nq++] = l->t[0].pid;
  while (qi < nq && l->n < MAX_TARGETS) {
    int kids[64];
    size_t nk = children_of(queue[qi++], kids, 64);
    for (size_t k = 0; k < nk; k++) {
      if (nq < sizeof queue / sizeof *queue) queue[nq++] = kids[k];
      if (known(l, kids[k]) || l->n >= MAX_TARGETS) continue;
      char save[sizeof l->err];
      memcpy(save, l->err, sizeof save);
      if (target_open(l, kids[k], &l->t[l->n]) == 0) l->n++;
      memcpy(l->err, save, sizeof save);
    }
  }
  l->last_scan_ns = bf_mono_ns();
}

int bf_inspect_open(int pid, const bf_inspect_opts *o, bf_inspect **out) {
  *out = NULL;
  bf_inspect *l = calloc(1, sizeof *l);
  if (!l) {
    bf_cli_error("out of memory");
    return 1;
  }
  l->o = *o;
  int rc = target_open(l, pid, &l->t[0]);
  if (rc < 0) {
    bf_cli_error("%s", l->err);
    free(l);
    return rc == -EINVAL ? 2 : 1;
  }
  l->n = 1;
  if (o->subprocesses) scan_children(l);
  *out = l;
  return 0;
}

void bf_inspect_free(bf_inspect *l) {
  if (!l) return;
  for (size_t i = 0; i < l->n; i++) target_free(&l->t[i]);
  free(l);
}

const char *bf_inspect_python_version(const bf_inspect *l) { return bf_smp_python_version(l->t[0].h); }
const char *bf_inspect_wait(const bf_smp_thread *t) {
  if (!t->kclass || t->kclass == BF_SMP_K_CPU) return NULL;
  return t->ktarget && t->ktarget->text ? t->ktarget->text : "(unknown)";
}

const char *bf_inspect_wait_class(const bf_smp_thread *t) {
  static const char *const names[] = {NULL, "cpu", "network", "disk", "lock", "gil", "sleep", "fault", "other"};
  return t->kclass < sizeof names / sizeof *names ? names[t->kclass] : "other";
}

const char *bf_inspect_errmsg(const bf_inspect *l) { return l->err[0] ? l->err : "no error"; }
size_t bf_inspect_count(const bf_inspect *l) { return l->n; }

int bf_inspect_sample(bf_inspect *l, int tries, bf_inspect_fn fn, void *ud, int *invalid) {
  if (l->o.subprocesses && bf_mono_ns() - l->last_scan_ns > 1000000000) scan_children(l);
  /* the kernel lens too (a few /proc reads per blocked thread; none for a
   * thread that has not run since): not with --native, whose threads are
   * stopped by it */
  unsigned want = BF_SMP_WANT_STATE | (l->o.gil_only ? BF_SMP_WANT_GIL_ONLY : 0) |
                  (l->o.settled ? BF_SMP_WANT_SETTLED : 0) | (l->o.native ? 0 : BF_SMP_WANT_KERNEL);
  int torn = 0, good = 0;
  for (size_t i = 0; i < l->n;) {
    target *t = &l->t[i];
    const bf_smp_thread *th = NULL;
    size_t n = 0;
    int rc = -EIO;
    for (int k = 0; k < (tries > 0 ? tries : 1) && rc == -EIO; k++)
      rc = t->nat ? bf_smp_native_sample(t->nat, want, &th, &n) : bf_smp_sample(t->h, want, &th, &n);
    if (rc == -ESRCH && i > 0) { /* a child exited: drop it */
      target_free(t);
      l->t[i] = l->t[--l->n];
      continue;
    }
    if (rc == -ESRCH) return -ESRCH;
    if (rc == -EIO) {
      torn++;
    } else if (rc < 0) {
      snprintf(l->err, sizeof l->err, "%s", t->nat ? bf_smp_native_errmsg(t->nat) : bf_smp_errmsg(t->h));
      return rc;
    } else {
      good++;
      int frc = fn(ud, t->nat ? NULL : t->h, t->pid, bf_smp_python_version(t->h), bf_smp_python_build(t->h), th, n);
      if (frc < 0) return frc;
    }
    i++;
  }
  if (invalid) *invalid = torn;
  if (!good && torn) {
    snprintf(l->err, sizeof l->err, "torn read (the target changed while being read)");
    return -EIO;
  }
  return 0;
}
