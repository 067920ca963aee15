/* attach.c — the sampler handle and attaching to a CPython process: find
 * libpython (or the executable) in /proc/PID/maps, _PyRuntime and the type
 * objects in its ELF symbols, the version and build, and the layout to walk
 * it with. Remote memory is untrusted: every read goes through remote.c.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>
#include <signal.h>

#include "procmaps.h"
#include "smp_int.h"

static ssize_t pvm_readv(void *ud, const struct iovec *l, size_t nl, const struct iovec *r,
                         size_t nr) {
  int pid = (int)(intptr_t)ud;
  return process_vm_readv(pid, l, nl, r, nr, 0);
}

int smp_seterr(bf_smp *h, int rc, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(h->err, sizeof h->err, fmt, ap);
  va_end(ap);
  return rc;
}

bf_smp *bf_smp_new(void) {
  bf_smp *h = calloc(1, sizeof *h);
  if (!h) return NULL;
  strcpy(h->err, "not attached");
  h->build = "release";
  h->pthread_tid_off = -1;
  h->readv = pvm_readv;
  /* the marker frame of a stack cut at SMP_MAX_DEPTH: interned like any
   * code object, so every view and export shows it */
  h->trunc.pub.filename = "<frames beyond the 4096th not read>";
  h->trunc.pub.qualname = "<truncated>";
  return h;
}

/* Start time of pid (/proc/PID/stat field 22, clock ticks since boot), 0
 * when unreadable. The comm field may hold spaces and ')': parse after the
 * last ')'. */
static unsigned long long proc_start_time(int pid) {
  char path[64], buf[1024];
  snprintf(path, sizeof path, "/proc/%d/stat", pid);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (n <= 0) return 0;
  buf[n] = 0;
  char *p = strrchr(buf, ')');
  if (!p) return 0;
  p++;
  for (int field = 3; field < 22; field++) { /* p is before field 3 (state) */
    while (*p == ' ') p++;
    while (*p && *p != ' ') p++;
    if (!*p) return 0;
  }
  return strtoull(p, NULL, 10);
}

/* Pin h to the process pid names now (a pidfd, else its start time). A
 * re-attach to the pinned pid keeps the pin: 0, or -ESRCH when the pinned
 * process has ended and pid names another one. */
static int smp_pin(bf_smp *h, int pid) {
  if (h->pin_pid == pid) return smp_pin_gone(h) ? -ESRCH : 0;
  if (h->pin_pid && h->pin_fd >= 0) close(h->pin_fd);
  h->pin_pid = pid;
  h->pin_fd = -1;
#ifdef SYS_pidfd_open
  h->pin_fd = (int)syscall(SYS_pidfd_open, pid, 0);
#endif
  h->pin_start = proc_start_time(pid);
  if (h->pin_fd < 0 && !h->pin_start) { /* neither: nothing to pin by */
    h->pin_pid = 0;
    return 0;
  }
  return 0;
}

int smp_pin_gone(bf_smp *h) {
  if (!h->pin_pid) return 0;
  if (h->pin_fd >= 0) { /* readable once the process has exited */
    struct pollfd pf = {h->pin_fd, POLLIN, 0};
    return poll(&pf, 1, 0) > 0;
  }
  unsigned long long st = proc_start_time(h->pin_pid);
  return st != h->pin_start;
}

void bf_smp_free(bf_smp *h) {
  if (!h) return;
  if (h->pin_pid && h->pin_fd >= 0) close(h->pin_fd);
  smp_code_cache_free(h);
  smp_kcache_free(h);
  for (size_t i = 0; i < h->nslots; i++) smp_slot_close(&h->slots[i]);
  free(h->slots);
  smp_pynames_clear(h);
  smp_ns_reset(h);
  free(h->threads);
  free(h->frames);
  free(h->frame_addr);
  free(h->pref);
  free(h->pref_next);
  free(h->pool);
  bf_pmap_free(&h->pref_hash);
  free(h->span_buf);
  free(h->plan_key);
  free(h->plan_ord);
  free(h->plan_sp);
  free(h);
}

const char *bf_smp_errmsg(const bf_smp *h) { return h ? h->err : "out of memory"; }
const char *bf_smp_python_version(const bf_smp *h) { return h->version; }
const char *bf_smp_python_build(const bf_smp *h) { return h->build; }
int bf_smp_pid(const bf_smp *h) { return h->pid; }
uint64_t bf_smp_read_calls(const bf_smp *h) { return h->read_calls; }
uint64_t bf_smp_read_bytes(const bf_smp *h) { return h->read_bytes; }
uint64_t bf_smp_read_iovs(const bf_smp *h) { return h->read_iovs; }

void bf_smp_consistency(const bf_smp *h, bf_smp_consistency_stats *out) {
  out->retries = h->torn_retries;
  out->invalid = h->torn_invalid;
  out->stable = h->torn_stable;
  out->truncated = h->truncated;
  out->cut = h->torn_cut;
  out->stalled = h->torn_stalls;
}

void smp_set_reader(bf_smp *h, smp_readv_fn fn, void *ud) {
  h->readv = fn;
  h->readv_ud = ud;
}

void smp_set_layout(bf_smp *h, const smp_layout *lay, uint64_t runtime_addr) {
  h->lay = *lay;
  h->runtime_addr = runtime_addr;
  h->attached = 1;
}

const char *bf_smp_strerror(int err) {
  switch (err) {
    case -ESRCH: return "no such process";
    case -ENOEXEC: return "not a Python process";
    case -ENOTSUP: return "unsupported Python version or build";
    case -EPERM:
    case -EACCES: return "permission denied";
    case -EAGAIN: return "Python runtime not initialised yet";
    default: return strerror(err < 0 ? -err : err);
  }
}

/* ---- attach ------------------------------------------------------------- */

/* Why reading another process's memory is denied, and how to grant it. */
static int explain_eperm(bf_smp *h, int pid) {
  char path[64];
  struct stat st;
  snprintf(path, sizeof path, "/proc/%d", pid);
  if (stat(path, &st) == 0 && st.st_uid != geteuid() && geteuid() != 0)
    return smp_seterr(h, -EPERM,
                  "cannot read process %d: it belongs to uid %u, you are uid %u "
                  "(run bifocal as that user or as root)",
                  pid, (unsigned)st.st_uid, (unsigned)geteuid());
  FILE *f = fopen("/proc/sys/kernel/yama/ptrace_scope", "r");
  int scope = -1;
  if (f) {
    if (fscanf(f, "%d", &scope) != 1) scope = -1;
    fclose(f);
  }
  /* CAP_SYS_PTRACE is bit 19 of the effective set */
  int has_cap = 0;
  f = fopen("/proc/self/status", "r");
  if (f) {
    char line[256];
    while (fgets(line, sizeof line, f)) {
      unsigned long long cap;
      if (sscanf(line, "CapEff: %llx", &cap) == 1) has_cap = (int)((cap >> 19) & 1);
    }
    fclose(f);
  }
  if (scope >= 1 && !has_cap)
    return smp_seterr(h, -EPERM,
                  "cannot read process %d: kernel.yama.ptrace_scope is %d", pid,
                  scope); /* the remedy: repl/cli_hints.c */
  if (!has_cap)
    return smp_seterr(h, -EPERM,
                  "cannot read process %d: missing CAP_SYS_PTRACE (in a container, add "
                  "`--cap-add SYS_PTRACE`; or run as root)",
                  pid);
  return smp_seterr(h, -EPERM, "cannot read process %d: permission denied (ptrace access check)",
                pid);
}

typedef struct mapping {
  char path[512];
  uint64_t start;
  int found;
} mapping;

typedef struct map_query {
  const char *prefix, *exact;
  mapping *m;
} map_query;

static int match_mapping(void *ud, const bf_procmap *pm) {
  const map_query *q = ud;
  const char *p = pm->name;
  if (*p != '/' || pm->off != 0) return 0;
  const char *base = strrchr(p, '/') + 1;
  int hit = q->exact ? strcmp(p, q->exact) == 0 : strncmp(base, q->prefix, strlen(q->prefix)) == 0;
  if (!hit || (!q->exact && !strstr(base, ".so"))) return 0;
  snprintf(q->m->path, sizeof q->m->path, "%s", p);
  q->m->start = pm->lo;
  q->m->found = 1;
  return 1;
}

/* Find the offset-0 mapping of a file whose basename starts with prefix
 * (or equals exact path when exact != NULL). */
static int find_mapping(int pid, const char *prefix, const char *exact, mapping *m) {
  map_query q = {prefix, exact, m};
  m->found = 0;
  int rc = bf_procmaps_foreach(pid, match_mapping, &q);
  return rc < 0 ? rc : 0;
}


/* glibc's struct pthread keeps the kernel tid at a fixed offset; find it on
 * the main thread (tid == pid, as the target's PID namespace numbers it) so
 * 3.8-3.10 thread ids map to native tids. */
static void calibrate_pthread(bf_smp *h, uint64_t pthread_addr) {
  uint32_t v = 0, pid = (uint32_t)smp_ns_pid(h);
  if (!pthread_addr) return;
  if (smp_read(h, pthread_addr + 0x2d0, &v, 4) == 0 && v == pid) {
    h->pthread_tid_off = 0x2d0;
    return;
  }
  /* other libc layouts: scan (struct pthread may end near its mapping's end) */
  unsigned char buf[1024];
  for (size_t span = sizeof buf; span >= 256; span /= 2) {
    if (smp_read(h, pthread_addr, buf, span) < 0) continue;
    for (size_t off = 0; off + 4 <= span; off += 4)
      if (rd32(buf + off) == pid) {
        h->pthread_tid_off = (int64_t)off;
        return;
      }
    return;
  }
}

/* A re-attach (e.g. the process exec'd) starts from a clean slate. */
static void attach_reset(bf_smp *h, int pid) {
  smp_code_cache_clear(h);
  for (size_t i = 0; i < h->nslots; i++) smp_slot_close(&h->slots[i]);
  h->nslots = 0;
  h->interp_head = 0;
  h->pthread_tid_off = -1;
  smp_ns_reset(h);
  h->pid = pid;
  h->readv = pvm_readv;
  h->readv_ud = (void *)(intptr_t)pid;
  h->attached = 0;
}

/* The executable of process pid. OUT: exe (len bytes), " (deleted)" removed. */
static int read_exe(bf_smp *h, int pid, char *exe, size_t len) {
  char exe_link[64];
  snprintf(exe_link, sizeof exe_link, "/proc/%d/exe", pid);
  ssize_t n = readlink(exe_link, exe, len - 1);
  if (n < 0) {
    if (errno == ENOENT) {
      char st[64], buf[512];
      snprintf(st, sizeof st, "/proc/%d/stat", pid);
      FILE *f = fopen(st, "re");
      size_t got = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
      if (f) fclose(f);
      buf[got] = 0;
      const char *rp = strrchr(buf, ')');
      if (rp && rp[1] == ' ' && rp[2] == 'Z')
        return smp_seterr(h, -ESRCH,
                          "process %d has exited (a zombie its parent has not reaped): there is nothing to "
                          "sample; profile a running process",
                          pid);
      return smp_seterr(h, -ESRCH, "no process with pid %d", pid);
    }
    if (errno == EACCES || errno == EPERM) return explain_eperm(h, pid);
    return smp_seterr(h, -errno, "cannot read %s: %s", exe_link, strerror(errno));
  }
  exe[n] = 0;
  if (strstr(exe, " (deleted)")) *strstr(exe, " (deleted)") = 0;
  return 0;
}

/* Load the ELF file that holds the interpreter: libpython, else the
 * executable itself. OUT: *elf, *start (its load address), *obj_name (its
 * path: m->path or exe). */
static int load_python_elf(bf_smp *h, int pid, const char *exe, mapping *m, smp_elf *elf,
                           const char **obj_name) {
  int rc = find_mapping(pid, "libpython3.", NULL, m);
  if (rc < 0) {
    if (rc == -EACCES || rc == -EPERM) return explain_eperm(h, pid);
    return smp_seterr(h, rc == -ENOENT ? -ESRCH : rc, "cannot read /proc/%d/maps: %s", pid, strerror(-rc));
  }
  char file[600];
  if (m->found) {
    snprintf(file, sizeof file, "/proc/%d/root%s", pid, m->path);
    *obj_name = m->path;
  } else {
    rc = find_mapping(pid, NULL, exe, m);
    if (rc < 0 || !m->found) return smp_seterr(h, -ENOEXEC, "process %d (%s) is not a Python process", pid, exe);
    snprintf(file, sizeof file, "/proc/%d/exe", pid);
    *obj_name = exe;
  }
  rc = smp_elf_load(file, elf);
  if (rc < 0) {
    if (rc == -EACCES || rc == -EPERM) return explain_eperm(h, pid);
    return smp_seterr(h, -ENOEXEC, "process %d (%s) is not a Python process (%s unreadable)", pid, exe,
                      *obj_name);
  }
  return 0;
}

/* No _PyRuntime symbol: an unsupported Python, or not Python at all. Frees elf. */
static int no_runtime(bf_smp *h, int pid, smp_elf *elf, const char *exe, const char *obj_name) {
  uint64_t val, sz;
  int old = smp_elf_symbol(elf, "Py_Initialize", &val, &sz) == 0; /* a Python before 3.7 */
  smp_elf_free(elf);
  int mj = 0, mn = 0; /* libpythonX.Y.so or pythonX.Y names the version */
  for (int k = 0; k < 2 && !mj; k++) {
    const char *b = strrchr(k ? exe : obj_name, '/');
    b = strstr(b ? b : k ? exe : obj_name, "python");
    if (!b || sscanf(b + 6, "%d.%d", &mj, &mn) != 2 || mj > 3 || (mj == 3 && mn > 6)) mj = 0;
  }
  if (mj)
    return smp_seterr(h, -ENOTSUP, "process %d runs unsupported Python version %d.%d; bifocal supports 3.8–3.15",
                      pid, mj, mn);
  if (old)
    return smp_seterr(h, -ENOTSUP,
                      "process %d runs an unsupported Python (older than 3.7); bifocal supports 3.8–3.15", pid);
  return smp_seterr(h, -ENOEXEC, "process %d (%s) is not a Python process (no _PyRuntime symbol)", pid, exe);
}

static int covers(void *ud, const bf_procmap *m) {
  uint64_t a = *(const uint64_t *)ud;
  return a >= m->lo && a < m->hi;
}

/* A read of addr in process pid failed with rc: -EAGAIN when nothing is
 * mapped there yet (an exec that has set the new executable but is still
 * mapping its segments: a statically linked interpreter's _PyRuntime in
 * .data/.bss), else rc (-EIO: a mapped address that cannot be read). */
static int unmapped_yet(int pid, uint64_t addr, int rc) {
  if (rc != -EIO) return rc;
  return bf_procmaps_foreach(pid, covers, &addr) == 1 ? rc : -EAGAIN;
}

/* The Python version: Py_Version (3.11+) in memory, else the object's name
 * and .rodata. Sets h->version. OUT: *minor. Frees elf on failure. */
static int read_version(bf_smp *h, int pid, smp_elf *elf, uint64_t bias, const char *base, const char *exe,
                        int *minor) {
  uint64_t val, sz;
  const char *vp = strstr(base, "python3.");
  *minor = vp ? atoi(vp + 8) : -1;
  uint32_t vhex = 0;
  if (smp_elf_symbol(elf, "Py_Version", &val, &sz) == 0) {
    int rc = smp_read(h, bias + val, &vhex, 4);
    if (rc == -EPERM) {
      smp_elf_free(elf);
      return explain_eperm(h, pid);
    }
    if (rc < 0) {
      smp_elf_free(elf);
      rc = unmapped_yet(pid, bias + val, rc == -ESRCH ? -ESRCH : -EIO);
      return smp_seterr(h, rc, "cannot read process %d's memory%s", pid,
                        rc == -EAGAIN ? " (still being loaded)" : "");
    }
    if ((vhex >> 24) == 3) *minor = (int)((vhex >> 16) & 0xff);
  }
  if (*minor < 0) {
    smp_elf_free(elf);
    return smp_seterr(h, -ENOTSUP, "process %d (%s): cannot tell the Python version", pid, exe);
  }
  if (vhex) {
    unsigned lvl = (vhex >> 4) & 0xf, ser = vhex & 0xf;
    snprintf(h->version, sizeof h->version, "3.%u.%u%s", (vhex >> 16) & 0xff, (vhex >> 8) & 0xff,
             lvl == 0xa ? "a" : lvl == 0xb ? "b" : lvl == 0xc ? "rc" : "");
    if (lvl != 0xf && ser) snprintf(h->version + strlen(h->version), 4, "%u", ser);
  } else {
    char pre[16];
    snprintf(pre, sizeof pre, "3.%d.", *minor);
    if (smp_elf_find_version(elf, pre, h->version, sizeof h->version) < 0)
      snprintf(h->version, sizeof h->version, "3.%d", *minor);
  }
  return 0;
}

/* The layout to walk Python 3.minor with: built in up to 3.12, else read
 * from _PyRuntime's debug offsets (rt_size: its symbol's size). debug, ft:
 * the build as the ELF file tells it. */
static int choose_layout(bf_smp *h, int pid, int minor, int debug, int ft, uint64_t rt_size) {
  if (minor < 8)
    return smp_seterr(h, -ENOTSUP, "process %d runs unsupported Python version %s; bifocal supports 3.8–3.15", pid,
                      h->version);
  if (minor <= 12) {
    if (debug)
      return smp_seterr(h, -ENOTSUP, "Python %s debug builds are not supported (release builds only)", h->version);
    smp_layout_builtin(minor, &h->lay);
    return 0;
  }
  unsigned char blob[1024];
  size_t want = rt_size && rt_size < sizeof blob ? (size_t)rt_size : sizeof blob;
  int rc = smp_read(h, h->runtime_addr, blob, want);
  if (rc == -EPERM) return explain_eperm(h, pid);
  if (rc < 0) {
    rc = unmapped_yet(pid, h->runtime_addr, rc);
    return smp_seterr(h, rc, "cannot read _PyRuntime of process %d%s", pid,
                      rc == -EAGAIN ? " (still being loaded)" : "");
  }
  int free_threaded = 0;
  const char *msg;
  rc = smp_layout_from_debug_offsets(blob, want, &h->lay, &free_threaded, &msg);
  if (free_threaded || ft) h->build = debug ? "free-threaded-debug" : "free-threaded";
  /* no cookie yet: the loader may not have mapped libpython's data yet */
  if (rc == -EINVAL && memcmp(blob, "xdebugpy", 8) != 0)
    return smp_seterr(h, -EAGAIN, "Python %s runtime of process %d not initialised yet (%s)", h->version, pid,
                      msg);
  if (rc < 0) return smp_seterr(h, -ENOTSUP, "Python %s (%s): %s", h->version, h->build, msg);
  return 0;
}

/* The runtime must be initialised: an interpreter with a thread. On
 * 3.8-3.10, find the main thread (tid == pid) among the thread states. */
static int check_runtime(bf_smp *h, int pid) {
  uint64_t interp = 0, ts = 0;
  int rc = smp_read(h, h->runtime_addr + h->lay.rt_interp_head, &interp, 8);
  if (rc == -EPERM) return explain_eperm(h, pid);
  if (rc < 0) {
    rc = unmapped_yet(pid, h->runtime_addr, rc == -ESRCH ? -ESRCH : -EIO);
    return smp_seterr(h, rc, "cannot read process %d's memory%s", pid,
                      rc == -EAGAIN ? " (still being loaded)" : "");
  }
  if (!interp) return smp_seterr(h, -EAGAIN, "Python runtime of process %d not initialised yet", pid);
  if (smp_read(h, interp + h->lay.is_tstate_head, &ts, 8) < 0 || !ts)
    return smp_seterr(h, -EAGAIN, "Python runtime of process %d not initialised yet", pid);
  for (int i = 0; h->lay.frames_are_objects && ts && i < 256 && h->pthread_tid_off < 0; i++) {
    uint64_t tid = 0;
    if (smp_read(h, ts + h->lay.ts_thread_id, &tid, 8) == 0) calibrate_pthread(h, tid);
    if (smp_read(h, ts + h->lay.ts_next, &ts, 8) < 0) break;
  }
  return 0;
}

int bf_smp_attach(bf_smp *h, int pid) {
  smp_elf elf = {0};
  char exe[512];
  mapping m;
  const char *obj_name = exe;
  int rc, minor;
  attach_reset(h, pid);
  if (pid <= 0) return smp_seterr(h, -ESRCH, "invalid pid %d", pid);
  if (kill(pid, 0) < 0 && errno == ESRCH) return smp_seterr(h, -ESRCH, "no process with pid %d", pid);
  if (smp_pin(h, pid) < 0)
    return smp_seterr(h, -ESRCH, "process %d ended; its pid now names another process", pid);
  if ((rc = read_exe(h, pid, exe, sizeof exe)) < 0) return rc;
  if ((rc = load_python_elf(h, pid, exe, &m, &elf, &obj_name)) < 0) return rc;
  uint64_t bias = m.start - elf.load_vaddr;
  uint64_t rt, rt_size, val, sz;
  if (smp_elf_symbol(&elf, "_PyRuntime", &rt, &rt_size) < 0) return no_runtime(h, pid, &elf, exe, obj_name);
  h->runtime_addr = bias + rt;
  h->code_type_addr = smp_elf_symbol(&elf, "PyCode_Type", &val, &sz) == 0 ? bias + val : 0;
  h->dict_type_addr = smp_elf_symbol(&elf, "PyDict_Type", &val, &sz) == 0 ? bias + val : 0;
  h->none_addr = smp_elf_symbol(&elf, "_Py_NoneStruct", &val, &sz) == 0 ? bias + val : 0;
  h->long_type_addr = smp_elf_symbol(&elf, "PyLong_Type", &val, &sz) == 0 ? bias + val : 0;
  h->module_type_addr = smp_elf_symbol(&elf, "PyModule_Type", &val, &sz) == 0 ? bias + val : 0;
  const char *base = strrchr(obj_name, '/') ? strrchr(obj_name, '/') + 1 : obj_name;
  if ((rc = read_version(h, pid, &elf, bias, base, exe, &minor)) < 0) return rc;
  /* 3.8-3.11: pymalloc's state is in statics of obmalloc.c, found (by name and
   * size) only in the symbol table of an unstripped build (pyalloc.c) */
  uint64_t oa, om, on, sa, sm, sn;
  h->obm_arenas = h->obm_maxarenas = h->obm_narenas = 0;
  if (minor <= 11 && smp_elf_symbol(&elf, "arenas", &oa, &sa) == 0 && sa == 8 &&
      smp_elf_symbol(&elf, "maxarenas", &om, &sm) == 0 && sm == 4 &&
      smp_elf_symbol(&elf, "narenas_currently_allocated", &on, &sn) == 0 && sn == 8) {
    h->obm_arenas = bias + oa;
    h->obm_maxarenas = bias + om;
    h->obm_narenas = bias + on;
  }
  int debug = smp_elf_symbol(&elf, "_Py_RefTotal", &val, &sz) == 0 ||
              smp_elf_symbol(&elf, "_Py_GetGlobalRefTotal", &val, &sz) == 0;
  const char *vp = strstr(base, "python3.");
  int ft = vp && strchr(vp + 8, 't') && strstr(base, "t.so") != NULL;
  smp_elf_free(&elf);
  h->build = debug ? "debug" : "release";
  if ((rc = choose_layout(h, pid, minor, debug, ft, rt_size)) < 0) return rc;
  if ((rc = check_runtime(h, pid)) < 0) return rc;
  smp_prefetch_reset(h);
  h->attached = 1;
  smp_pynames_attach(h); /* thread names: read once now, then only when needed */
  snprintf(h->err, sizeof h->err, "ok");
  return 0;
}
