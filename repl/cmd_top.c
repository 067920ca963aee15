/* cmd_top.c — `bifocal top PID [--duration S] [--rate HZ]`: sample a process
 * for a while and print one table of its hottest functions (self and total
 * share, with sample counts). The aggregation here is shared with `live`.
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "audit.h"
#include "cli.h"
#include "opts.h"
#include "sampler.h"
#include "look.h"
#include "text.h"
#include "top.h"
#include "util.h"


/* ---- aggregation shared with cmd_live.c (top.h) ------------------------ */

static bf_top_fn *fn_get(bf_top *t, const bf_smp_code *c) {
  /* linear probe over a power-of-two table keyed by the code pointer */
  if (t->nfn * 2 >= t->cap) {
    size_t nc = t->cap ? t->cap * 2 : 1024;
    bf_top_fn *nf = calloc(nc, sizeof *nf);
    if (!nf) return NULL;
    for (size_t i = 0; i < t->cap; i++) {
      if (!t->fn[i].code) continue;
      size_t k = ((uintptr_t)t->fn[i].code >> 4) & (nc - 1);
      while (nf[k].code) k = (k + 1) & (nc - 1);
      nf[k] = t->fn[i];
    }
    free(t->fn);
    t->fn = nf;
    t->cap = nc;
  }
  size_t k = ((uintptr_t)c >> 4) & (t->cap - 1);
  while (t->fn[k].code && t->fn[k].code != c) k = (k + 1) & (t->cap - 1);
  if (!t->fn[k].code) {
    t->fn[k].code = c;
    t->nfn++;
  }
  return &t->fn[k];
}

void bf_top_reset(bf_top *t) {
  int with_idle = t->with_idle;
  free(t->fn);
  free(t->th);
  memset(t, 0, sizeof *t);
  t->with_idle = with_idle;
}

void bf_top_tick(bf_top *t) { t->ticks++; }

void bf_top_free(bf_top *t) { bf_top_reset(t); }

int bf_top_add_pid(bf_top *t, int pid, const bf_smp_thread *th, size_t n) {
  for (size_t i = 0; i < n; i++) {
    bf_top_thread *tt = NULL;
    for (size_t k = 0; k < t->nth; k++)
      if (t->th[k].tid == th[i].native_tid) tt = &t->th[k];
    if (!tt) {
      if (t->nth == t->cap_th) {
        size_t nc = t->cap_th ? t->cap_th * 2 : 8;
        bf_top_thread *nt = realloc(t->th, nc * sizeof *nt);
        if (!nt) return -ENOMEM;
        t->th = nt;
        t->cap_th = nc;
      }
      tt = &t->th[t->nth++];
      memset(tt, 0, sizeof *tt);
      tt->tid = th[i].native_tid;
      tt->pid = pid;
      snprintf(tt->name, sizeof tt->name, "%s", th[i].name ? th[i].name : "?");
    }
    /* the Python name once the sampler has read it (it may come later) */
    if (th[i].py_name && !tt->py_named) {
      snprintf(tt->name, sizeof tt->name, "%s", th[i].py_name);
      size_t k = strlen(tt->name); /* a cut name must not end inside a character */
      if (k == sizeof tt->name - 1) {
        size_t c = k;
        while (c && ((unsigned char)tt->name[c - 1] & 0xc0) == 0x80) c--;
        if (c && ((unsigned char)tt->name[c - 1] & 0xc0) == 0xc0) tt->name[c - 1] = 0;
      }
      tt->py_named = 1;
    }
    tt->samples++;
    tt->on_cpu += !!(th[i].flags & BF_SMP_ON_CPU);
    tt->idle += !!(th[i].flags & BF_SMP_IDLE);
    tt->gil += !!(th[i].flags & BF_SMP_GIL);
    tt->last_top = th[i].nframes ? th[i].frames[0].code : NULL;
    /* the table shows work, not waiting, unless --idle */
    if ((th[i].flags & BF_SMP_IDLE) && !t->with_idle) continue;
    if (!th[i].nframes) continue;
    t->samples++;
    t->stamp++;
    for (size_t k = 0; k < th[i].nframes; k++) {
      bf_top_fn *f = fn_get(t, th[i].frames[k].code);
      if (!f) return -ENOMEM;
      if (k == 0) f->self++;
      if (f->stamp != t->stamp) {
        f->total++;
        f->stamp = t->stamp;
      }
    }
  }
  return 0;
}

/* Cut s to at most width bytes, never inside a UTF-8 character. */
static void cut(char *s, int width) {
  if (width <= 0 || (int)strlen(s) <= width) return;
  int k = width;
  while (k > 0 && ((unsigned char)s[k] & 0xc0) == 0x80) k--;
  s[k] = 0;
}

static int by_self(const void *a, const void *b) {
  const bf_top_fn *x = *(bf_top_fn *const *)a, *y = *(bf_top_fn *const *)b;
  return (y->self > x->self) - (y->self < x->self);
}
static int by_total(const void *a, const void *b) {
  const bf_top_fn *x = *(bf_top_fn *const *)a, *y = *(bf_top_fn *const *)b;
  return (y->total > x->total) - (y->total < x->total);
}

void bf_top_print(bf_top *t, FILE *f, int sort_total, int max_rows, int width, const char *eol) {
  fprintf(f, "%7s %7s %9s %9s  %s%s", "self%", "total%", "self", "total", "function (file:line)",
          eol);
  if (!t->samples) {
    fprintf(f, "  (no Python code observed running yet)%s", eol);
    return;
  }
  bf_top_fn **rows = malloc((t->nfn ? t->nfn : 1) * sizeof *rows);
  if (!rows) return;
  size_t n = 0;
  for (size_t i = 0; i < t->cap; i++)
    if (t->fn[i].code) rows[n++] = &t->fn[i];
  qsort(rows, n, sizeof *rows, sort_total ? by_total : by_self);
  for (size_t i = 0; i < n && (int)i < max_rows; i++) {
    const bf_smp_code *c = rows[i]->code;
    const char *file = strrchr(c->filename, '/') ? strrchr(c->filename, '/') + 1 : c->filename;
    char fn[512], qb[256], fb[256]; /* names from the target: shown inert */
    snprintf(fn, sizeof fn, "%s (%s:%lld)", bf_inert(c->qualname, qb, sizeof qb), bf_inert(file, fb, sizeof fb),
             (long long)c->firstlineno);
    if (width > 40) cut(fn, width - 38);
    fprintf(f, "%6.1f%% %6.1f%% %9lld %9lld  %s%s", 100.0 * (double)rows[i]->self / (double)t->samples,
            100.0 * (double)rows[i]->total / (double)t->samples, (long long)rows[i]->self,
            (long long)rows[i]->total, fn, eol);
  }
  free(rows);
}

void bf_top_print_threads(bf_top *t, FILE *f, int with_pid, int width, const char *eol) {
  char line[1024];
  int n = snprintf(line, sizeof line, "%s%9s %-22s %9s %7s %7s %7s  %s", with_pid ? "      pid " : "", "tid",
                   "name", "samples", "cpu%", "gil%", "idle%", "now in");
  if (n > 0) cut(line, width);
  fprintf(f, "%s%s", line, eol);
  for (size_t i = 0; i < t->nth; i++) {
    bf_top_thread *x = &t->th[i];
    double s = x->samples ? (double)x->samples : 1;
    char pidcol[16] = "", nb[128], qb[256]; /* names from the target: shown inert */
    if (with_pid) snprintf(pidcol, sizeof pidcol, "%9d ", x->pid);
    n = snprintf(line, sizeof line, "%s%9lld %-22s %9lld %6.1f%% %6.1f%% %6.1f%%  %s", pidcol,
                 (long long)x->tid, bf_inert(x->name, nb, sizeof nb), (long long)x->samples,
                 100.0 * (double)x->on_cpu / s, 100.0 * (double)x->gil / s, 100.0 * (double)x->idle / s,
                 x->last_top ? bf_inert(x->last_top->qualname, qb, sizeof qb) : "-");
    if (n > 0) cut(line, width);
    fprintf(f, "%s%s", line, eol);
  }
}

/* ---- the command -------------------------------------------------------- */

static void sleep_ns(int64_t ns) {
  struct timespec ts = {ns / 1000000000, ns % 1000000000};
  nanosleep(&ts, NULL);
}

static int64_t mono(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* Options shared by top and live: py-spy's letters. Returns -1 to go on, else
 * the exit status. OUT: *pid, *o, *rate, *dur (top only, NULL for live),
 * *with_idle, *limit. */
int bf_top_cli_opts(const char *cmd, int argc, char **argv, int *pid, bf_look_opts *o, double *rate,
                    int64_t *dur, int *with_idle, int *limit) {
  static const struct option opts[] = {{"pid", required_argument, NULL, 'p'},
                                       {"duration", required_argument, NULL, 'd'},
                                       {"rate", required_argument, NULL, 'r'},
                                       {"limit", required_argument, NULL, 'L'},
                                       {"gil", no_argument, NULL, 'g'},
                                       {"idle", no_argument, NULL, 'i'},
                                       {"native", no_argument, NULL, 'n'},
                                       {"native-threads", required_argument, NULL, 'N'},
                                       {"subprocesses", no_argument, NULL, 's'},
                                       {"nonblocking", no_argument, NULL, 'B'},
                                       {"help", no_argument, NULL, 'h'},
                                       {NULL, 0, NULL, 0}};
  int c, nonblocking = 0;
  char *end;
  *pid = 0;
  while ((c = getopt_long(argc, argv, dur ? "p:d:r:ginsh" : "p:r:ginsh", opts, NULL)) != -1) {
    switch (c) {
      case 'p':
        if (bf_opt_pid(optarg, pid)) return 2;
        break;
      case 'd':
        if (!dur) {
          bf_cli_error("%s runs until q or Ctrl-C and takes no --duration (use `bifocal top -d S`)", cmd);
          return 2;
        }
        if (bf_parse_duration_ns(optarg, dur) < 0 || *dur <= 0) {
          bf_cli_error("bad --duration '%s' (use e.g. 5, 5s, 1m; the database option is --db)", optarg);
          return 2;
        }
        break;
      case 'r':
        errno = 0;
        *rate = strtod(optarg, &end);
        if (errno || *end || !(*rate >= 1 && *rate <= 100000)) {
          bf_cli_error("bad --rate '%s' (1 to 100000 Hz)", optarg);
          return 2;
        }
        break;
      case 'L': {
        errno = 0;
        long v = strtol(optarg, &end, 10);
        if (errno || *end || v <= 0 || v > 100000) {
          bf_cli_error("bad --limit '%s' (a number of rows, 1 or more)", optarg);
          return 2;
        }
        *limit = (int)v;
        break;
      }
      case 'g': o->gil_only = 1; break;
      case 'i': *with_idle = 1; break;
      case 'n': o->native = 1; break;
      case 'N':
        if (optarg[strspn(optarg, ", ")] == 0) {
          bf_cli_error("bad --native-threads '%s' (a comma list of thread ids or name globs)", optarg);
          return 2;
        }
        o->native = 1;
        o->native_threads = optarg;
        break;
      case 's': o->subprocesses = 1; break;
      case 'B': nonblocking = 1; break;
      case 'h': bf_cli_usage(bf_cli_find(cmd), stdout); return 0;
      default: return 2;
    }
  }
  if (nonblocking && o->native) {
    bf_cli_error("--native stops each thread to unwind its C stack: drop --nonblocking or --native");
    return 2;
  }
  if (bf_opt_pid_once(cmd, argc, argv, optind, pid)) return 2;
  return -1;
}

static int top_add(void *ud, bf_smp *h, int pid, const char *version, const char *build, const bf_smp_thread *th,
                   size_t n) {
  (void)h;
  (void)version;
  (void)build;
  return bf_top_add_pid(ud, pid, th, n);
}

int bf_cmd_top(bf_cli *cli, int argc, char **argv) {
  int64_t dur = 2000000000;
  double rate = 200;
  int limit = 20, pid, with_idle = 0, c;
  bf_look_opts lo = {0};
  if ((c = bf_top_cli_opts("top", argc, argv, &pid, &lo, &rate, &dur, &with_idle, &limit)) >= 0) return c;
  if (lo.native && rate > 100) rate = 100; /* every sample stops the threads: gentler */
  bf_audit *au = NULL; /* audited before the target is touched */
  if ((c = bf_audit_begin_look(cli, "top", pid, &au))) return c;
  bf_look *l = NULL;
  if ((c = bf_look_open(pid, &lo, &l))) {
    bf_audit_end(au, "attach failed", 0);
    return c;
  }
  bf_top t = {0};
  t.with_idle = with_idle;
  int64_t start = mono(), interval = (int64_t)(1e9 / rate), next = start;
  int gone = 0, failed = 0;
  while (mono() - start < dur) {
    int torn = 0;
    int rc = bf_look_sample(l, 1, top_add, &t, &torn);
    t.invalid += torn;
    if (rc == 0) bf_top_tick(&t);
    if (rc == -ESRCH) {
      gone = 1;
      break;
    }
    if (rc < 0 && rc != -EIO) {
      bf_cli_error("%s", rc == -ENOMEM ? "out of memory" : bf_look_errmsg(l));
      failed = 1;
      break;
    }
    next += interval;
    int64_t now = mono();
    if (next > now) sleep_ns(next - now);
  }
  size_t nproc = bf_look_count(l);
  char procs[64] = "";
  if (lo.subprocesses) snprintf(procs, sizeof procs, " and %zu subprocess%s", nproc - 1, nproc == 2 ? "" : "es");
  printf("Process %d%s: Python %s, %.1fs, %lld ticks, %lld %sthread-samples, %lld invalid%s%s%s\n\n", pid,
         procs, bf_look_python_version(l), (double)(mono() - start) / 1e9, (long long)t.ticks,
         (long long)t.samples, with_idle ? "" : "busy ", (long long)t.invalid, gone ? " (process exited)" : "",
         lo.gil_only ? ", GIL holder only" : "", lo.native ? ", with native frames" : "");
  bf_top_print(&t, stdout, 0, limit, 0, "\n");
  printf("\n");
  bf_top_print_threads(&t, stdout, lo.subprocesses, 0, "\n");
  bf_top_free(&t);
  bf_audit_end(au, failed ? bf_look_errmsg(l) : NULL, 0);
  bf_look_free(l);
  return failed;
}
