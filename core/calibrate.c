/* calibrate.c — run one reproduction traced and sampled at once, and measure
 * the sampled estimates against the exact traced shares (see calibrate.h).
 *
 * The trace runs with --no-builtins, so time in C functions stays in the
 * calling Python function on both sides (the sampler sees Python frames only),
 * and both sides are normalised over the functions the trace knows, so the
 * runner's bootstrap frames (sampled, never traced) do not dilute estimates.
 */
#include "calibrate.h"

#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "memory_join.h"
#include "profile.h"
#include "query.h"
#include "store_int.h"
#include "vec.h"

/* ---- the run ------------------------------------------------------------- */

/* Start the trace (no builtins, the "-traced" label) through the caller. */
static int start_trace(const bf_cal_opts *o, pid_t *pid, int *rfd, bf_err *err) {
  char tlabel[256];
  snprintf(tlabel, sizeof tlabel, "%s-traced", o->label ? o->label : "calibrate");
  bf_cal_trace_req req = {.argv = o->argv, .clock = o->clock, .label = tlabel, .builtins = 0, .memory = o->memory};
  int p = 0, fd = -1;
  int rc = o->start(o->start_ud, &req, &p, &fd, err);
  if (rc < 0) {
    if (!err->msg[0]) bf_err_set(err, rc, "cannot start the trace: %s", strerror(-rc));
    return rc;
  }
  *pid = p;
  *rfd = fd;
  return 0;
}

/* Find the traced Python process and sample it once its runtime is up.
 * *tp becomes 0 when the trace ended first. */
static void sample_traced(const bf_cal_opts *o, pid_t *tp, bf_cal_run_result *out) {
  int py = 0, rc = -EAGAIN;
  int64_t give_up = bf_mono_ns() + 20 * 1000000000LL;
  while (!*o->stop && bf_mono_ns() < give_up) {
    if (waitpid(*tp, NULL, WNOHANG) == *tp) {
      *tp = 0;
      break;
    }
    if (!py) py = o->target(o->start_ud, *tp);
    if (py && (rc = o->sample(o->sample_ud, py, &out->sampled_id, &out->err)) != -EAGAIN) break;
    struct timespec ts = {0, 200000};
    nanosleep(&ts, NULL);
  }
  if (rc == -EAGAIN && !*o->stop)
    bf_err_set(&out->err, -ETIMEDOUT, "the traced program ended or never started a Python runtime in time");
}

/* Read the trace's stdout to the end; its last line is the traced session id,
 * the rest is the program's own output. */
static void collect_output(int rfd, bf_cal_run_result *out) {
  size_t cap = 4096, len = 0;
  char *buf = malloc(cap);
  ssize_t n;
  while (buf && (n = read(rfd, buf + len, cap - len - 1)) > 0) {
    len += (size_t)n;
    if (cap - len < 1024 && bf_vec_grow((void **)&buf, &cap, cap + 1, 1, 0)) break;
  }
  close(rfd);
  if (!buf) return;
  buf[len] = 0;
  while (len && buf[len - 1] == '\n') buf[--len] = 0;
  char *last = strrchr(buf, '\n'), *end;
  char *idline = last ? last + 1 : buf;
  out->traced_id = strtoll(idline, &end, 10);
  if (*end) out->traced_id = 0;
  if (last) *last = 0;
  else if (out->traced_id) buf[0] = 0;
  out->output = buf;
}

int bf_cal_run(const bf_cal_opts *o, bf_cal_run_result *out) {
  memset(out, 0, sizeof *out);
  out->exit_status = 1;
  pid_t tp;
  int rfd;
  if (start_trace(o, &tp, &rfd, &out->err) < 0) return -EIO;
  *o->child = tp;
  if (*o->stop) kill(tp, SIGTERM); /* stopped before the trace existed: it ends at once */
  sample_traced(o, &tp, out);
  collect_output(rfd, out);
  int tstatus = 0;
  if (tp > 0)
    while (waitpid(tp, &tstatus, 0) < 0 && errno == EINTR) {
    }
  *o->child = 0;
  out->exit_status = WIFEXITED(tstatus) ? WEXITSTATUS(tstatus) : 1;
  if (!out->sampled_id || !out->traced_id) {
    if (!out->err.msg[0])
      bf_err_set(&out->err, -EIO, "%s",
                 !out->traced_id ? "the trace did not produce a session" : "the sampler did not produce a session");
    return -EIO;
  }
  return 0;
}

void bf_cal_run_clear(bf_cal_run_result *r) {
  if (!r) return;
  free(r->output);
  r->output = NULL;
}

/* ---- the report ---------------------------------------------------------- */

#define CAL_BLOCKS 20
#define CAL_MIN_SAMPLES 100 /* fewer samples in traced functions: Wilson only */

/* Two-sided 97.5% Student t quantiles, df 1..19 (df >= 20 uses 19's). */
static double t975(int df) {
  static const double t[] = {12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
                             2.201,  2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093};
  if (df < 1) return INFINITY;
  return t[df > 19 ? 18 : df - 1];
}

typedef struct fid_row {
  int64_t fid;
  int64_t row; /* index in report rows, -1 when not traced */
} fid_row;

typedef struct bm_walk {
  bf_store *s;
  bf_cal_report *r;
  bf_q_frames *frames;
  fid_row *map; /* sorted by fid */
  size_t nmap, capmap;
  int by_weight;
  int64_t tmax;   /* pass 1 result; pass 2 cuts [0, tmax] into blocks */
  int pass;
  double *y;      /* [block * n + row]: weight of samples whose leaf is row */
  double *x;      /* [block]: weight of samples in traced functions */
} bm_walk;

/* Row of function fid (-1 when the trace never saw it), cached. */
static int row_of(bm_walk *w, int64_t fid, int64_t *row) {
  size_t lo = 0, hi = w->nmap;
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    if (w->map[mid].fid == fid) {
      *row = w->map[mid].row;
      return 0;
    }
    if (w->map[mid].fid < fid) lo = mid + 1;
    else hi = mid;
  }
  bf_function_ref ref;
  int rc = bf_store_function_get(w->s, fid, &ref);
  if (rc) return rc;
  *row = -1;
  for (size_t i = 0; i < w->r->n; i++) {
    const bf_join_row *j = w->r->rows[i].j;
    if (j->firstlineno == ref.firstlineno && !strcmp(j->qualname, ref.qualname) && !strcmp(j->file, ref.file)) {
      *row = (int64_t)i;
      break;
    }
  }
  if (bf_vec_grow((void **)&w->map, &w->capmap, w->nmap + 1, sizeof *w->map, 64)) return -ENOMEM;
  memmove(w->map + lo + 1, w->map + lo, (w->nmap - lo) * sizeof *w->map);
  w->map[lo] = (fid_row){fid, *row};
  w->nmap++;
  return 0;
}

static int bm_sample(void *ud, const bf_sample *smp) {
  bm_walk *w = ud;
  if (w->pass == 1) {
    if (smp->ts_ns > w->tmax) w->tmax = smp->ts_ns;
    return 0;
  }
  if (smp->stack_id <= 0) return 0;
  const int64_t *fids, *lines;
  size_t nf;
  int64_t row;
  int rc;
  if ((rc = bf_q_frames_get(w->s, &w->frames, smp->stack_id, &fids, &lines, &nf))) return rc;
  if (!nf) return 0;
  if ((rc = row_of(w, fids[nf - 1], &row))) return rc;
  if (row < 0) return 0;
  int64_t ts = smp->ts_ns < 0 ? 0 : smp->ts_ns;
  size_t b = (size_t)((double)ts / ((double)w->tmax + 1.0) * CAL_BLOCKS);
  if (b >= CAL_BLOCKS) b = CAL_BLOCKS - 1;
  double v = w->by_weight ? (double)smp->weight : (double)smp->count;
  w->y[b * w->r->n + (size_t)row] += v;
  w->x[b] += v;
  return 0;
}

/* Widen each row's interval to the batch-means one where that is wider:
 * var(p) = B/(B-1) · Σ_b (y_b - p·x_b)² / X² over the B non-empty blocks. */
static int batch_means(bf_store *s, const bf_session_info *si, bf_cal_report *r) {
  if (r->n_in_traced < CAL_MIN_SAMPLES || !r->n) return 0;
  bm_walk w = {.s = s, .r = r, .by_weight = bf_q_by_weight(si)};
  int rc = -ENOMEM;
  w.y = calloc((size_t)CAL_BLOCKS * r->n, sizeof *w.y);
  w.x = calloc(CAL_BLOCKS, sizeof *w.x);
  if (!w.y || !w.x) goto out;
  w.pass = 1;
  if ((rc = bf_q_timeline_foreach(s, r->join->sampled_id, NULL, bm_sample, &w))) goto out;
  w.pass = 2;
  if ((rc = bf_q_timeline_foreach(s, r->join->sampled_id, NULL, bm_sample, &w))) goto out;
  double X = 0;
  int B = 0;
  for (int b = 0; b < CAL_BLOCKS; b++) {
    X += w.x[b];
    B += w.x[b] > 0;
  }
  if (B < 5 || X <= 0) goto out; /* rc is 0 here */
  r->blocks = B;
  for (size_t i = 0; i < r->n; i++) {
    bf_cal_row *x = &r->rows[i];
    double ss = 0;
    for (int b = 0; b < CAL_BLOCKS; b++) {
      double d = w.y[(size_t)b * r->n + i] - x->estimate * w.x[b];
      ss += d * d;
    }
    double half = t975(B - 1) * sqrt((double)B / (B - 1) * ss) / X;
    if (x->estimate - half < x->lo) x->lo = x->estimate - half > 0 ? x->estimate - half : 0;
    if (x->estimate + half > x->hi) x->hi = x->estimate + half < 1 ? x->estimate + half : 1;
  }
out:
  bf_q_frames_free(w.frames);
  free(w.map);
  free(w.y);
  free(w.x);
  return rc == -ENOMEM ? bf_store_fail(s, -ENOMEM, "out of memory") : rc;
}

static int by_exact(const void *a, const void *b) {
  const bf_cal_row *x = a, *y = b;
  if (x->exact != y->exact) return x->exact < y->exact ? 1 : -1;
  return strcmp(x->j->qualname, y->j->qualname);
}

static int by_calls(const void *a, const void *b) {
  const bf_cal_row *x = *(bf_cal_row *const *)a, *y = *(bf_cal_row *const *)b;
  if (x->j->calls != y->j->calls) return x->j->calls < y->j->calls ? 1 : -1;
  return strcmp(x->j->qualname, y->j->qualname);
}

/* Estimates, exact shares and Wilson intervals, normalised over the functions
 * the trace knows. */
static int fill_rows(bf_cal_report *r) {
  const bf_join *j = r->join;
  double sum_self_samples = 0, sum_self_ns = 0;
  size_t nt = 0;
  for (size_t i = 0; i < j->n; i++) {
    const bf_join_row *jr = &j->rows[i];
    if (!jr->traced) continue;
    nt++;
    if (jr->observed) sum_self_samples += jr->self_share;
    sum_self_ns += jr->self_ns > 0 ? (double)jr->self_ns : 0;
  }
  double n_eff = 0;
  for (size_t i = 0; i < j->n; i++)
    if (j->rows[i].traced && j->rows[i].observed && j->sampled_samples > 0) n_eff += j->rows[i].self_share;
  n_eff *= (double)j->sampled_samples;
  r->n_in_traced = n_eff;
  r->rows = calloc(nt ? nt : 1, sizeof *r->rows);
  r->never = calloc(nt ? nt : 1, sizeof *r->never);
  if (!r->rows || !r->never) return -ENOMEM;
  for (size_t i = 0; i < j->n; i++) {
    const bf_join_row *jr = &j->rows[i];
    if (!jr->traced) continue;
    bf_cal_row *x = &r->rows[r->n++];
    x->j = jr;
    x->exact = sum_self_ns > 0 ? (double)jr->self_ns / sum_self_ns : 0;
    x->estimate = (jr->observed && sum_self_samples > 0) ? jr->self_share / sum_self_samples : 0;
    bf_wilson(x->estimate * n_eff, n_eff, &x->lo, &x->hi);
    x->wilson_lo = x->lo;
    x->wilson_hi = x->hi;
  }
  qsort(r->rows, r->n, sizeof *r->rows, by_exact);
  return 0;
}

/* Coverage, never-sampled rows and the rate that would give every function
 * with >= 1% exact share an expected 100 samples (interval half-width about a
 * fifth of its share). */
static void summarise(bf_cal_report *r, const bf_session_info *si, double rate_hz) {
  for (size_t i = 0; i < r->n; i++) {
    bf_cal_row *x = &r->rows[i];
    x->covered = x->exact >= x->lo && x->exact <= x->hi;
    if (x->exact >= 0.005 || x->estimate >= 0.005) {
      r->judged++;
      r->covered += x->covered;
    }
    if (!x->j->observed && x->j->calls > 0) r->never[r->n_never++] = x;
  }
  qsort(r->never, r->n_never, sizeof *r->never, by_calls);
  double duration_s = si ? (double)si->duration_ns / 1e9 : 0;
  r->achieved_rate_hz = si ? si->achieved_rate_hz : 0;
  double per_hz = (duration_s > 0 && rate_hz > 0) ? r->n_in_traced / rate_hz : 0; /* samples per Hz */
  double rec = rate_hz;
  for (size_t i = 0; i < r->n; i++) {
    if (r->rows[i].exact < 0.01 || per_hz <= 0) continue;
    double need = 100.0 / r->rows[i].exact / per_hz;
    if (need > rec) rec = need;
  }
  if (rec > 100000) rec = 100000;
  r->recommended_rate_hz = ceil(rec / 100) * 100;
  r->coverage = r->judged ? (double)r->covered / (double)r->judged : NAN;
}

int bf_cal_report_build(bf_store *s, int64_t sampled_id, int64_t traced_id, double rate_hz, bf_cal_report **out) {
  *out = NULL;
  bf_cal_report *r = calloc(1, sizeof *r);
  if (!r) return bf_store_fail(s, -ENOMEM, "out of memory");
  bf_session_info *si = NULL;
  int rc = bf_join_sessions(s, sampled_id, traced_id, &r->join);
  if (rc < 0) goto fail;
  bf_store_session_get(s, sampled_id, &si);
  if (fill_rows(r)) {
    rc = bf_store_fail(s, -ENOMEM, "out of memory");
    goto fail;
  }
  if (si && (rc = batch_means(s, si, r)) < 0) goto fail;
  summarise(r, si, rate_hz);
  bf_session_info_free(si);
  *out = r;
  return 0;
fail:
  bf_session_info_free(si);
  bf_cal_report_free(r);
  return rc;
}

void bf_cal_report_free(bf_cal_report *r) {
  if (!r) return;
  bf_join_free(r->join);
  free(r->rows);
  free(r->never);
  free(r);
}

/* ---- calibrate --memory ---------------------------------------------------- */

static int by_exact_mem(const void *a, const void *b) {
  const bf_cal_mem_row *x = a, *y = b;
  if (x->exact != y->exact) return x->exact < y->exact ? 1 : -1;
  if (x->estimate != y->estimate) return x->estimate < y->estimate ? 1 : -1;
  return (x->function_id > y->function_id) - (x->function_id < y->function_id);
}

/* The row of function fid in r (added if new); NULL when out of memory. */
static bf_cal_mem_row *mem_row(bf_cal_mem_report *r, size_t *cap, const bf_mem_row *m) {
  for (size_t i = 0; i < r->n; i++)
    if (r->rows[i].function_id == m->function_id) return &r->rows[i];
  if (bf_vec_grow((void **)&r->rows, cap, r->n + 1, sizeof *r->rows, 64)) return NULL;
  bf_cal_mem_row *x = &r->rows[r->n++];
  memset(x, 0, sizeof *x);
  x->function_id = m->function_id;
  x->file = m->file;
  x->qualname = m->qualname;
  x->firstlineno = m->firstlineno;
  return x;
}

static void mem_summarise(bf_cal_mem_report *r) {
  for (size_t i = 0; i < r->n; i++) {
    bf_cal_mem_row *x = &r->rows[i];
    x->covered = x->exact >= x->lo - 1e-12 && x->exact <= x->hi + 1e-12;
    if (x->exact < 0.01 && x->estimate < 0.01) continue;
    r->judged++;
    r->covered += (size_t)x->covered;
    double e = fabs(x->estimate - x->exact);
    if (e > r->max_error) r->max_error = e;
  }
  r->coverage = r->judged ? (double)r->covered / (double)r->judged : NAN;
  qsort(r->rows, r->n, sizeof *r->rows, by_exact_mem);
}

int bf_cal_mem_report_build(bf_store *s, int64_t sampled_id, int64_t traced_id, bf_cal_mem_report **out) {
  *out = NULL;
  bf_mem_table *st = NULL, *tt = NULL;
  int rc = bf_mem_table_load(s, sampled_id, NULL, &st);
  if (!rc) rc = bf_mem_table_load(s, traced_id, NULL, &tt);
  if (!rc && (st->traced || !tt->traced))
    rc = bf_store_fail(s, -EINVAL, "calibrate --memory: session %lld must be sampled and %lld traced",
                       (long long)sampled_id, (long long)traced_id);
  bf_cal_mem_report *r = rc ? NULL : calloc(1, sizeof *r);
  if (!rc && !r) rc = bf_store_fail(s, -ENOMEM, "out of memory");
  size_t cap = 0;
  for (size_t i = 0; !rc && i < st->n; i++) { /* functions both lenses know by id: one database */
    const bf_mem_row *m = &st->rows[i];
    bf_cal_mem_row *x = m->function_id ? mem_row(r, &cap, m) : NULL;
    if (m->function_id && !x) rc = bf_store_fail(s, -ENOMEM, "out of memory");
    if (!x) continue;
    x->estimate = m->growth_share;
    x->lo = m->growth_lo;
    x->hi = m->growth_hi;
    x->growth_bytes = m->growth_bytes;
    x->shrink_bytes = m->shrink_bytes;
  }
  for (size_t i = 0; !rc && i < tt->n; i++) {
    const bf_mem_row *m = &tt->rows[i];
    bf_cal_mem_row *x = m->function_id ? mem_row(r, &cap, m) : NULL;
    if (m->function_id && !x) rc = bf_store_fail(s, -ENOMEM, "out of memory");
    if (!x) continue;
    x->exact = m->live_share;
    x->exact_alloc = m->alloc_share;
    x->live_bytes = m->live_bytes;
    x->alloc_bytes = m->alloc_bytes;
    x->calls = m->calls;
  }
  if (!rc) {
    r->sampled_id = sampled_id;
    r->traced_id = traced_id;
    r->growth_bytes = st->growth_bytes;
    r->shrink_bytes = st->shrink_bytes;
    r->live_bytes = tt->live_bytes;
    r->alloc_bytes = tt->alloc_bytes;
    mem_summarise(r);
    *out = r;
  } else {
    bf_cal_mem_report_free(r);
  }
  bf_mem_table_free(st);
  bf_mem_table_free(tt);
  return rc;
}

void bf_cal_mem_report_free(bf_cal_mem_report *r) {
  if (!r) return;
  free(r->rows);
  free(r);
}
