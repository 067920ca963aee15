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
#include "sampler.h"
#include "text.h"
#include "util.h"

int bf_smp_cli_pid(const char *arg, int *pid);

/* ---- aggregation shared with cmd_live.c --------------------------------- */

typedef struct bf_top_fn {
  const bf_smp_code *code;
  int64_t self, total;
  int64_t stamp;
} bf_top_fn;

typedef struct bf_top_thread {
  int64_t tid;
  char name[32];
  int py_named; /* name is the Python thread name */
  int64_t samples, on_cpu, gil, idle;
  const bf_smp_code *last_top;
} bf_top_thread;

typedef struct bf_top {
  bf_top_fn *fn;
  size_t nfn, cap;
  bf_top_thread *th;
  size_t nth, cap_th;
  int64_t samples, ticks, invalid, stamp;
} bf_top;

void bf_top_reset(bf_top *t);
int bf_top_add(bf_top *t, const bf_smp_thread *th, size_t n);
void bf_top_print(bf_top *t, FILE *f, int by_total, int max_rows, int width, const char *eol);
void bf_top_print_threads(bf_top *t, FILE *f, const char *eol);
void bf_top_free(bf_top *t);

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
  free(t->fn);
  free(t->th);
  memset(t, 0, sizeof *t);
}

void bf_top_free(bf_top *t) { bf_top_reset(t); }

int bf_top_add(bf_top *t, const bf_smp_thread *th, size_t n) {
  t->ticks++;
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
    if (th[i].flags & BF_SMP_IDLE) continue; /* the table shows work, not waiting */
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
    if (width > 40 && (int)strlen(fn) > width - 38) fn[width - 38] = 0;
    fprintf(f, "%6.1f%% %6.1f%% %9lld %9lld  %s%s", 100.0 * (double)rows[i]->self / (double)t->samples,
            100.0 * (double)rows[i]->total / (double)t->samples, (long long)rows[i]->self,
            (long long)rows[i]->total, fn, eol);
  }
  free(rows);
}

void bf_top_print_threads(bf_top *t, FILE *f, const char *eol) {
  fprintf(f, "%9s %-22s %9s %7s %7s %7s  %s%s", "tid", "name", "samples", "cpu%", "gil%", "idle%",
          "now in", eol);
  for (size_t i = 0; i < t->nth; i++) {
    bf_top_thread *x = &t->th[i];
    double s = x->samples ? (double)x->samples : 1;
    char nb[128], qb[256];
    fprintf(f, "%9lld %-22s %9lld %6.1f%% %6.1f%% %6.1f%%  %s%s", (long long)x->tid, bf_inert(x->name, nb, sizeof nb),
            (long long)x->samples, 100.0 * (double)x->on_cpu / s, 100.0 * (double)x->gil / s,
            100.0 * (double)x->idle / s, x->last_top ? bf_inert(x->last_top->qualname, qb, sizeof qb) : "-", eol);
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

int bf_cmd_top(bf_cli *cli, int argc, char **argv) {
  static const struct option opts[] = {{"duration", required_argument, NULL, 'D'},
                                       {"rate", required_argument, NULL, 'r'},
                                       {"limit", required_argument, NULL, 'n'},
                                       {"help", no_argument, NULL, 'h'},
                                       {NULL, 0, NULL, 0}};
  int64_t dur = 2000000000;
  double rate = 200;
  int limit = 20, c;
  char *end;
  while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
    switch (c) {
      case 'D':
        if (bf_parse_duration_ns(optarg, &dur) < 0 || dur <= 0) {
          bf_cli_error("bad --duration '%s' (use e.g. 5, 5s, 1m)", optarg);
          return 2;
        }
        break;
      case 'r':
        rate = strtod(optarg, &end);
        if (*end || !(rate >= 1 && rate <= 100000)) {
          bf_cli_error("bad --rate '%s' (1 to 100000 Hz)", optarg);
          return 2;
        }
        break;
      case 'n':
        limit = atoi(optarg);
        if (limit <= 0) limit = 20;
        break;
      case 'h': printf("usage: bifocal top PID [--duration S] [--rate HZ] [--limit N]\n"); return 0;
      default: return 2;
    }
  }
  if (optind + 1 != argc) {
    bf_cli_error("top needs exactly one PID (usage: bifocal top PID [--duration S])");
    return 2;
  }
  int pid;
  if (bf_smp_cli_pid(argv[optind], &pid)) return 2;
  bf_audit *au = NULL; /* audited before the target is touched */
  if ((c = bf_audit_begin(cli, NULL, "top", pid, &au))) return c;
  bf_smp *h = bf_smp_new();
  if (!h || bf_smp_attach(h, pid) < 0) {
    bf_cli_error("%s", h ? bf_smp_errmsg(h) : "out of memory");
    bf_audit_end(au, h ? bf_smp_errmsg(h) : "out of memory", 0);
    bf_smp_free(h);
    return 1;
  }
  bf_top t = {0};
  int64_t start = mono(), interval = (int64_t)(1e9 / rate), next = start;
  int gone = 0;
  while (mono() - start < dur) {
    const bf_smp_thread *th;
    size_t n;
    int rc = bf_smp_sample(h, BF_SMP_WANT_STATE, &th, &n);
    if (rc == -ESRCH) {
      gone = 1;
      break;
    }
    if (rc < 0) {
      if (rc != -EIO) {
        bf_cli_error("%s", bf_smp_errmsg(h));
        break;
      }
      t.invalid++;
    } else if (bf_top_add(&t, th, n) < 0) {
      break;
    }
    next += interval;
    int64_t now = mono();
    if (next > now) sleep_ns(next - now);
  }
  printf("Process %d: Python %s, %.1fs, %lld ticks, %lld busy thread-samples, %lld invalid%s\n\n",
         pid, bf_smp_python_version(h), (double)(mono() - start) / 1e9, (long long)t.ticks,
         (long long)t.samples, (long long)t.invalid, gone ? " (process exited)" : "");
  bf_top_print(&t, stdout, 0, limit, 0, "\n");
  printf("\n");
  bf_top_print_threads(&t, stdout, "\n");
  bf_top_free(&t);
  bf_audit_end(au, NULL, 0);
  bf_smp_free(h);
  return 0;
}
