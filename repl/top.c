/* top.c — the aggregation behind `top` and `live` (top.h): per function
 * self/total sample counts and per thread status shares, and their tables.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "inspect.h"
#include "text.h"
#include "top.h"
#include "vec.h"

static bf_top_fn *fn_get(bf_top *t, const bf_smp_code *c) {
  if (!t->fns.slot_size) t->fns = (bf_pmap)BF_PMAP_INIT(bf_top_fn);
  bf_top_fn *f = bf_pmap_put(&t->fns, (uintptr_t)c, NULL);
  if (f) f->code = c;
  return f;
}

void bf_top_reset(bf_top *t) {
  int with_idle = t->with_idle;
  bf_pmap_free(&t->fns);
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
      if (bf_vec_grow((void **)&t->th, &t->cap_th, t->nth + 1, sizeof *t->th, 8)) return -ENOMEM;
      tt = &t->th[t->nth++];
      memset(tt, 0, sizeof *tt);
      tt->tid = th[i].native_tid;
      tt->pid = pid;
      snprintf(tt->name, sizeof tt->name, "%s", th[i].name ? th[i].name : "?");
    }
    /* the Python name once the sampler has read it (it may come later),
     * and the new one after a rename */
    if (th[i].py_name) {
      char nm[sizeof tt->name];
      snprintf(nm, sizeof nm, "%s", th[i].py_name);
      size_t k = strlen(nm); /* a cut name must not end inside a character */
      if (k == sizeof nm - 1) {
        size_t c = k;
        while (c && ((unsigned char)nm[c - 1] & 0xc0) == 0x80) c--;
        if (c && ((unsigned char)nm[c - 1] & 0xc0) == 0xc0) nm[c - 1] = 0;
      }
      if (!tt->py_named || strcmp(nm, tt->name) != 0) memcpy(tt->name, nm, sizeof nm);
      tt->py_named = 1;
    }
    tt->samples++;
    tt->on_cpu += !!(th[i].flags & BF_SMP_ON_CPU);
    tt->idle += !!(th[i].flags & BF_SMP_IDLE);
    tt->gil += !!(th[i].flags & BF_SMP_GIL);
    tt->last_top = th[i].nframes ? th[i].frames[0].code : NULL;
    const char *wait = bf_inspect_wait(&th[i]);
    if (th[i].kclass) {
      int64_t now = bf_mono_ns();
      /* runnable, and waiting for a CPU most of the time since the last look */
      int runq = th[i].kclass == BF_SMP_K_CPU && tt->ts_last && now > tt->ts_last &&
                 2 * (th[i].run_delay_ns - tt->rd_last) > now - tt->ts_last;
      if (!tt->ts_first) {
        tt->ts_first = now;
        tt->rd_first = th[i].run_delay_ns;
      }
      tt->ts_last = now;
      tt->rd_last = th[i].run_delay_ns;
      snprintf(tt->wait, sizeof tt->wait, "%s", runq ? "waiting for CPU" : wait ? wait : "");
    }
    /* the table shows work, not waiting, unless --idle */
    if ((th[i].flags & BF_SMP_IDLE) && !t->with_idle) continue;
    if (!th[i].nframes) continue;
    t->samples++;
    t->stamp++;
    for (size_t k = 0; k < th[i].nframes; k++) {
      if (!th[i].frames[k].code) continue; /* no code object: nothing to name */
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
  bf_top_fn **rows = malloc((t->fns.len ? t->fns.len : 1) * sizeof *rows);
  if (!rows) return;
  size_t n = 0, it = 0;
  for (bf_top_fn *fn; (fn = bf_pmap_next(&t->fns, &it));) rows[n++] = fn;
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
  int n = snprintf(line, sizeof line, "%s%9s %-22s %9s %7s %7s %7s %7s  %-24s %s", with_pid ? "      pid " : "", "tid",
                   "name", "samples", "cpu%", "gil%", "idle%", "runq%", "now in", "waits on");
  if (n > 0) cut(line, width);
  fprintf(f, "%s%s", line, eol);
  for (size_t i = 0; i < t->nth; i++) {
    bf_top_thread *x = &t->th[i];
    double s = x->samples ? (double)x->samples : 1;
    char pidcol[16] = "", nb[128], qb[256], wb[256]; /* names from the target: shown inert */
    char runq[16] = "      -";
    if (x->ts_last > x->ts_first)
      snprintf(runq, sizeof runq, "%6.1f%%",
               100.0 * (double)(x->rd_last - x->rd_first) / (double)(x->ts_last - x->ts_first));
    if (with_pid) snprintf(pidcol, sizeof pidcol, "%9d ", x->pid);
    n = snprintf(line, sizeof line, "%s%9lld %-22s %9lld %6.1f%% %6.1f%% %6.1f%% %s  %-24s %s", pidcol,
                 (long long)x->tid, bf_inert(x->name, nb, sizeof nb), (long long)x->samples,
                 100.0 * (double)x->on_cpu / s, 100.0 * (double)x->gil / s, 100.0 * (double)x->idle / s, runq,
                 x->last_top ? bf_inert(x->last_top->qualname, qb, sizeof qb) : "-",
                 x->wait[0] ? bf_inert(x->wait, wb, sizeof wb) : "");
    if (n > 0) cut(line, width);
    fprintf(f, "%s%s", line, eol);
  }
}

int bf_top_inspect_add(void *ud, bf_smp *h, int pid, const char *version, const char *build, const bf_smp_thread *th,
                    size_t n) {
  (void)h;
  (void)version;
  (void)build;
  return bf_top_add_pid(ud, pid, th, n);
}
