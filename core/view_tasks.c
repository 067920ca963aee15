/* view_tasks.c — asyncio tasks of a session recorded with `record --async`:
 * per task (synthetic "task:NAME" threads) the shares of samples running,
 * ready and waiting, and the await points that hold it; per event-loop
 * thread the split of its time into running task code, loop overhead and
 * waiting for I/O. Shares are of samples, with 95% Wilson intervals. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "jsonw.h"
#include "query.h"
#include "session_json.h"
#include "store_int.h"
#include "views.h"
#include "views_int.h"

/* Sample flags the sampler sets on task threads (sampling/tasks.h). */
#define TASK_RUNNING 0x100
#define TASK_READY 0x200
#define TASK_WAITING 0x400

typedef struct apoint {
  int64_t fid, line;
  double n; /* wall ns */
} apoint;

typedef struct tstat {
  int64_t thread_id, native_tid;
  const char *name;  /* borrowed from the thread refs */
  int is_task;
  int64_t samples, loop_samples;        /* counts: for the intervals */
  double n, running, ready, waiting;    /* task threads: wall ns */
  apoint *ap;
  size_t nap, cap;
  double loop_n, loop_run, loop_io, loop_other; /* loop threads: wall ns */
} tstat;

/* What matters of one stack, computed once per stack id. */
typedef struct sinfo {
  int64_t await_fid, await_line; /* task: innermost frame outside asyncio/ */
  int64_t root_child;            /* task: the task's outermost coroutine */
  int in_loop, in_select, in_callback;
  int64_t *fids;                 /* loop threads: every function on the stack */
  size_t nf;
} sinfo;

typedef struct tv {
  bf_store *s;
  tstat *t;
  size_t nt;
  tstat *last;
  bf_map3 stacks; /* stack id -> index in si */
  sinfo *si;
  size_t nsi, capsi;
  bf_map3 roots;  /* function ids of tasks' outermost coroutines */
  int pass;
  int by_weight;
  int any_task;
} tv;

const char *bf_task_name(const char *name, int64_t native_tid) {
  return name && native_tid < 0 && strncmp(name, "task:", 5) == 0 ? name + 5 : NULL;
}

static int ends_with(const char *s, const char *suf) {
  size_t n = s ? strlen(s) : 0, m = strlen(suf);
  return n >= m && strcmp(s + n - m, suf) == 0;
}

static int stack_info(tv *v, int64_t stack_id, int is_task, const sinfo **out) {
  int64_t *hit = bf_map3_get(&v->stacks, stack_id, is_task, 0);
  if (hit) {
    *out = &v->si[*hit];
    return 0;
  }
  if (v->nsi == v->capsi) {
    size_t nc = v->capsi ? v->capsi * 2 : 64;
    sinfo *n = realloc(v->si, nc * sizeof *n);
    if (!n) return -ENOMEM;
    v->si = n;
    v->capsi = nc;
  }
  sinfo *si = &v->si[v->nsi];
  memset(si, 0, sizeof *si);
  int64_t *frames = NULL;
  size_t n = 0;
  int rc = stack_id > 0 ? bf_store_stack_frames(v->s, stack_id, &frames, &n) : 0;
  if (rc) return rc;
  si->fids = calloc(n ? n : 1, sizeof *si->fids);
  if (!si->fids) {
    free(frames);
    return -ENOMEM;
  }
  for (size_t k = 0; k < n; k++) { /* outermost first */
    int64_t fid, line;
    bf_function_ref f;
    if ((rc = bf_store_frame_get(v->s, frames[k], &fid, &line)) ||
        (rc = bf_store_function_get(v->s, fid, &f))) {
      free(frames);
      free(si->fids);
      return rc;
    }
    si->fids[si->nf++] = fid;
    int asyncio = f.file && strstr(f.file, "asyncio/") != NULL;
    if (is_task) {
      if (k == 1) si->root_child = fid;
      if (k >= 1 && (!asyncio || !si->await_fid)) {
        si->await_fid = fid;
        si->await_line = line;
      }
      continue;
    }
    if (asyncio && ends_with(f.qualname, "run_forever")) si->in_loop = 1;
    if (asyncio && ends_with(f.qualname, "_run") && ends_with(f.file, "events.py")) si->in_callback = 1;
    if (k + 1 == n) si->in_select = ends_with(f.qualname, "select") && ends_with(f.file, "selectors.py");
  }
  free(frames);
  if (bf_map3_put(&v->stacks, stack_id, is_task, 0, (int64_t)v->nsi)) return -ENOMEM;
  *out = &v->si[v->nsi++];
  return 0;
}

static int on_sample(void *ud, const bf_sample *smp) {
  tv *v = ud;
  tstat *t = v->last;
  if (!t || t->thread_id != smp->thread_id) {
    t = NULL;
    for (size_t i = 0; i < v->nt && !t; i++)
      if (v->t[i].thread_id == smp->thread_id) t = &v->t[i];
    if (!t) return 0;
    v->last = t;
  }
  if ((v->pass == 0) != t->is_task) return 0;
  /* wall clock: shares of samples, as the other views (the time since the
   * previous tick follows the sampler's own delays, which follow the
   * target's load, and measured worse against self-timed workloads); cpu
   * clock: shares of CPU time */
  int64_t cnt = smp->count ? smp->count : 1;
  double c = v->by_weight && smp->weight > 0 ? (double)smp->weight : (double)cnt;
  const sinfo *si;
  int rc = stack_info(v, smp->stack_id, t->is_task, &si);
  if (rc) return rc;
  if (t->is_task) {
    v->any_task = 1;
    t->n += c;
    t->samples += cnt;
    if (si->root_child && !bf_map3_get(&v->roots, si->root_child, 0, 0) &&
        bf_map3_put(&v->roots, si->root_child, 0, 0, 1))
      return -ENOMEM;
    if (smp->flags & TASK_RUNNING) t->running += c;
    if (smp->flags & TASK_READY) t->ready += c;
    if (!(smp->flags & TASK_WAITING)) return 0;
    t->waiting += c;
    for (size_t i = 0; i < t->nap; i++)
      if (t->ap[i].fid == si->await_fid && t->ap[i].line == si->await_line) {
        t->ap[i].n += c;
        return 0;
      }
    if (t->nap == t->cap) {
      size_t nc = t->cap ? t->cap * 2 : 4;
      apoint *n = realloc(t->ap, nc * sizeof *n);
      if (!n) return -ENOMEM;
      t->ap = n;
      t->cap = nc;
    }
    t->ap[t->nap++] = (apoint){si->await_fid, si->await_line, c};
    return 0;
  }
  if (!si->in_loop) return 0;
  t->loop_n += c;
  t->loop_samples += cnt;
  int running = 0;
  if (v->any_task) {
    for (size_t k = 0; k < si->nf && !running; k++) running = bf_map3_get(&v->roots, si->fids[k], 0, 0) != NULL;
  } else {
    running = si->in_callback; /* without task data: every callback counts */
  }
  if (si->in_select)
    t->loop_io += c;
  else if (running)
    t->loop_run += c;
  else
    t->loop_other += c;
  return 0;
}

static int cmp_task(const void *a, const void *b) {
  const tstat *x = a, *y = b;
  if (x->is_task != y->is_task) return y->is_task - x->is_task;
  return x->n < y->n ? 1 : x->n > y->n ? -1 : (x->thread_id > y->thread_id) - (x->thread_id < y->thread_id);
}

static int cmp_ap(const void *a, const void *b) {
  const apoint *x = a, *y = b;
  return x->n < y->n ? 1 : x->n > y->n ? -1 : (x->fid > y->fid) - (x->fid < y->fid);
}

/* share k/n of wall time; the interval treats it as a share of the
 * samples behind n */
static void json_share(bf_jw *w, const char *key, double k, double n, int64_t samples) {
  double lo, hi, sh = n > 0 ? k / n : 0;
  bf_wilson(sh * (double)samples, (double)samples, &lo, &hi);
  bf_jw_key(w, key);
  bf_jw_obj(w);
  bf_jw_kint(w, "samples", llrint(sh * (double)samples)); /* as printf's %.0f: to nearest, ties to even */
  bf_jw_knum(w, "share", sh);
  bf_jw_knum(w, "lo", lo);
  bf_jw_knum(w, "hi", hi);
  bf_jw_end(w);
}

static double pc(double k, double n) { return n > 0 ? 100.0 * k / n : 0; }

static void ci(char *buf, size_t len, double k, double n, int64_t samples) {
  double lo, hi, sh = n > 0 ? k / n : 0;
  bf_wilson(sh * (double)samples, (double)samples, &lo, &hi);
  snprintf(buf, len, "[%.1f-%.1f]", lo * 100, hi * 100);
}

static size_t tasks_limit(const bf_view_opts *o) {
  return o->limit > 0 ? (size_t)o->limit : o->limit < 0 ? (size_t)-1 : 25;
}

/* One task's await points as JSON. */
static int task_awaits_json(const tv *v, const tstat *t, bf_jw *w) {
  int rc;
  bf_jw_key(w, "await_points");
  bf_jw_arr(w);
  for (size_t k = 0; k < t->nap; k++) {
    bf_function_ref f = {0, "", "(await point not read)", 0};
    if (t->ap[k].fid && (rc = bf_store_function_get(v->s, t->ap[k].fid, &f))) return rc;
    bf_jw_obj(w);
    bf_jw_kstr(w, "qualname", f.qualname);
    bf_jw_kstr(w, "file", f.file);
    bf_jw_kint(w, "firstlineno", f.firstlineno);
    bf_jw_kint(w, "line", t->ap[k].line);
    json_share(w, "wall", t->ap[k].n, t->n, t->samples);
    bf_jw_end(w);
  }
  bf_jw_end(w);
  return 0;
}

static int tasks_json(const tv *v, const bf_session_info *info, const bf_view_opts *o, size_t ntask, FILE *out) {
  int rc;
  size_t limit = tasks_limit(o);
  bf_jw w;
  bf_jw_init(&w, out);
  bf_jw_obj(&w);
  bf_jw_key(&w, "session");
  bf_session_json_jw(&w, info);
  bf_jw_kint(&w, "task_count", (long long)ntask);
  bf_jw_key(&w, "tasks");
  bf_jw_arr(&w);
  size_t shown = 0;
  for (size_t i = 0; i < v->nt && shown < limit; i++) {
    const tstat *t = &v->t[i];
    if (!t->is_task || !t->samples) continue;
    shown++;
    bf_jw_obj(&w);
    bf_jw_kstr(&w, "name", t->name + 5);
    bf_jw_kint(&w, "id", t->native_tid);
    bf_jw_kint(&w, "samples", t->samples);
    json_share(&w, "running", t->running, t->n, t->samples);
    json_share(&w, "ready", t->ready, t->n, t->samples);
    json_share(&w, "waiting", t->waiting, t->n, t->samples);
    if ((rc = task_awaits_json(v, t, &w))) return rc;
    bf_jw_end(&w);
  }
  bf_jw_end(&w);
  bf_jw_key(&w, "loops");
  bf_jw_arr(&w);
  for (size_t i = 0; i < v->nt; i++) {
    const tstat *t = &v->t[i];
    if (t->is_task || !t->loop_samples) continue;
    bf_jw_obj(&w);
    bf_jw_kstr(&w, "thread", t->name);
    bf_jw_kint(&w, "native_tid", t->native_tid);
    bf_jw_kint(&w, "samples", t->loop_samples);
    json_share(&w, "running_task_code", t->loop_run, t->loop_n, t->loop_samples);
    json_share(&w, "loop_overhead", t->loop_other, t->loop_n, t->loop_samples);
    json_share(&w, "waiting_for_io", t->loop_io, t->loop_n, t->loop_samples);
    bf_jw_end(&w);
  }
  bf_jw_end(&w);
  bf_jw_end(&w);
  fputc('\n', out);
  return 0;
}

/* The tasks as text: each task's states and its top three await points. */
static int tasks_text_tasks(const tv *v, const bf_view_opts *o, size_t ntask, FILE *out) {
  const char *b = o->color ? "\033[1m" : "", *dim = o->color ? "\033[2m" : "", *rst = o->color ? "\033[0m" : "";
  size_t limit = tasks_limit(o), shown = 0;
  int width = o->width > 40 ? o->width : 80, rc;
  char c1[32];
  for (size_t i = 0; i < v->nt && shown < limit; i++) {
    const tstat *t = &v->t[i];
    if (!t->is_task || !t->samples) continue;
    shown++;
    char lb[160];
    snprintf(lb, sizeof lb, "%s (%lld)", t->name + 5, (long long)t->native_tid);
    fputs(b, out);
    bf_put_fit(out, lb, width);
    fprintf(out, "%s\n  %lld samples · running %.1f%% · ready %.1f%% · waiting %.1f%%\n", rst, (long long)t->samples,
            pc(t->running, t->n), pc(t->ready, t->n), pc(t->waiting, t->n));
    for (size_t k = 0; k < t->nap && k < 3; k++) {
      bf_function_ref f = {0, "", "(await point not read)", 0};
      if (t->ap[k].fid && (rc = bf_store_function_get(v->s, t->ap[k].fid, &f))) return rc;
      char loc[1024];
      bf_fit_func(loc, sizeof loc, f.qualname, f.file, t->ap[k].line, width - 36);
      ci(c1, sizeof c1, t->ap[k].n, t->n, t->samples);
      fprintf(out, "  %-7s%5.1f%% %-13s  %s\n", k ? "" : "awaits", pc(t->ap[k].n, t->n), c1, loc);
    }
  }
  if (ntask > shown) {
    char how[64] = ""; /* the option is the caller's */
    if (o->limit_option) snprintf(how, sizeof how, " (%s N shows more)", o->limit_option);
    fprintf(out, "%s… %zu more tasks%s%s\n", dim, ntask - shown, how, rst);
  }
  return 0;
}

/* The event loops as text: task code / loop overhead / I/O wait. */
static void tasks_text_loops(const tv *v, const bf_view_opts *o, FILE *out) {
  const char *b = o->color ? "\033[1m" : "", *dim = o->color ? "\033[2m" : "", *rst = o->color ? "\033[0m" : "";
  char c1[32], c2[32], c3[32];
  int any_loop = 0;
  for (size_t i = 0; i < v->nt; i++) {
    const tstat *t = &v->t[i];
    if (t->is_task || !t->loop_samples) continue;
    if (!any_loop++)
      fprintf(out, "\n%sEvent loops%s (shares of the loop thread's samples inside run_forever)\n", b, rst);
    bf_wthread lt = {t->thread_id, t->native_tid, (char *)t->name, 0, 0, 0, 0};
    char lb[256];
    bf_wthread_label(&lt, lb, sizeof lb);
    ci(c1, sizeof c1, t->loop_run, t->loop_n, t->loop_samples);
    ci(c2, sizeof c2, t->loop_other, t->loop_n, t->loop_samples);
    ci(c3, sizeof c3, t->loop_io, t->loop_n, t->loop_samples);
    fprintf(out, "%s · %lld samples\n  running task code %5.1f%% %-13s\n  loop overhead     %5.1f%% %-13s\n"
                 "  waiting for I/O   %5.1f%% %-13s\n",
            lb, (long long)t->loop_samples, pc(t->loop_run, t->loop_n), c1, pc(t->loop_other, t->loop_n), c2,
            pc(t->loop_io, t->loop_n), c3);
  }
  if (any_loop && !v->any_task) /* the option is the caller's */
    fprintf(out, "%s(no task data: every callback counted as task code%s%s%s)%s\n", dim,
            o->async_option ? "; " : "", o->async_option ? o->async_option : "",
            o->async_option ? " to tell them apart" : "", rst);
  if (!any_loop && v->any_task)
    fprintf(out, "\n%sNo asyncio event loop seen on a thread (no BaseEventLoop.run_forever frame): a loop "
                 "written in C, such as uvloop, shows its tasks but no split of task code, loop overhead "
                 "and I/O wait%s\n",
            dim, rst);
}

static int tasks_text(const tv *v, const bf_session_info *info, const bf_view_opts *o, size_t ntask, FILE *out) {
  const char *b = o->color ? "\033[1m" : "", *dim = o->color ? "\033[2m" : "", *rst = o->color ? "\033[0m" : "";
  char sub[1024], head[1100];
  bf_session_line(info, 0, sub, sizeof sub);
  snprintf(head, sizeof head, "tasks · %s", sub);
  fputs(b, out);
  bf_put_fit(out, head, o->width > 40 ? o->width : 80);
  fputs(rst, out);
  fputc('\n', out);
  if (!ntask)
    fprintf(out, "no asyncio tasks observed (%s%s%sC and pure-Python Tasks of\n"
                 "the main interpreter on CPython 3.8-3.15 are read)\n",
            o->async_option ? "record with `bifocal " : "", o->async_option ? o->async_option : "",
            o->async_option ? "`; " : "");
  else
    fprintf(out, "%s%zu tasks · shares of each task's samples · 95%% intervals%s\n", dim, ntask, rst);
  int rc = tasks_text_tasks(v, o, ntask, out);
  if (!rc) tasks_text_loops(v, o, out);
  return rc;
}

int bf_view_tasks(bf_store *s, int64_t session_id, const bf_view_opts *o, FILE *out) {
  bf_view_opts def = {0};
  if (!o) o = &def;
  bf_session_info *info = NULL;
  int rc = bf_store_session_get(s, session_id, &info);
  if (rc) return rc;
  tv v = {.s = s};
  bf_thread_ref *th = NULL;
  size_t nth = 0;
  if (bf_q_kind_of(info) != BF_Q_SAMPLED) {
    rc = bf_store_fail(s, -ENODATA,
                       "session %lld is %s: the tasks view needs a sampled session", /* remedy: repl/cli_hints.c */
                       (long long)session_id, info->kind);
    goto out;
  }
  if ((rc = bf_store_threads(s, session_id, &th, &nth))) goto out;
  v.t = calloc(nth ? nth : 1, sizeof *v.t);
  if (!v.t) {
    rc = -ENOMEM;
    goto out;
  }
  for (size_t i = 0; i < nth; i++) {
    v.t[i].thread_id = th[i].id;
    v.t[i].native_tid = th[i].native_tid;
    v.t[i].name = th[i].name;
    v.t[i].is_task = th[i].native_tid < 0 && th[i].name && strncmp(th[i].name, "task:", 5) == 0;
  }
  v.nt = nth;
  v.by_weight = bf_q_by_weight(info);
  for (v.pass = 0; v.pass < 2; v.pass++) {
    v.last = NULL;
    if ((rc = bf_q_timeline_foreach(s, session_id, &o->filter, on_sample, &v))) goto out;
  }
  qsort(v.t, v.nt, sizeof *v.t, cmp_task);
  size_t ntask = 0;
  for (size_t i = 0; i < v.nt; i++) {
    ntask += v.t[i].is_task && v.t[i].samples > 0;
    if (v.t[i].nap) qsort(v.t[i].ap, v.t[i].nap, sizeof *v.t[i].ap, cmp_ap);
  }
  if (o->json)
    rc = tasks_json(&v, info, o, ntask, out);
  else
    rc = tasks_text(&v, info, o, ntask, out);
out:
  if (rc == -ENOMEM) bf_store_fail(s, rc, "out of memory");
  for (size_t i = 0; i < v.nt; i++) free(v.t[i].ap);
  for (size_t i = 0; i < v.nsi; i++) free(v.si[i].fids);
  free(v.si);
  free(v.t);
  bf_map3_free(&v.stacks);
  bf_map3_free(&v.roots);
  bf_thread_refs_free(th, nth);
  bf_session_info_free(info);
  return rc;
}
