/* memsample.c — record --memory: at each tick read the target's resident and
 * anonymous resident size from /proc/PID/statm (one pread of a kept-open fd,
 * no lock of the target's), and charge a change since the last tick to the
 * stack that ran in between: the GIL holder's, else (no thread holds it at
 * the tick) the last GIL holder's seen; a running thread's only where the
 * GIL is not read. A change between two ticks that saw different functions,
 * each with intervals of its own, is split by their own rates of change (a
 * grower's last partial interval stays its own). A change charged to a stack
 * seen at an earlier tick joins that observation's row (same signs only:
 * growth and shrink stay apart).
 * Rows and a bounded-rate timeline are buffered and written about once a
 * second. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "clock.h"
#include "jsonw.h"
#include "map.h"
#include "memsample.h"
#include "pyalloc.h"
#include "store.h"
#include "vec.h"

#define MEM_MAX_ROWS 65536          /* held while the database is locked; the excess is counted */
#define MEM_FLUSH_NS 1000000000LL   /* write buffered rows this often */
#define MEM_POINT_NS 50000000LL     /* timeline: a point at most every 50 ms */
#define MEM_QUIET_TICKS 8           /* faults read until statm stood still this many ticks */

struct rec_memory {
  int fd;             /* /proc/PID/statm, -1 when it could not be opened */
  int open_errno;
  int stat_fd;        /* /proc/PID/stat (page faults), -1 when it could not be opened */
  int64_t flt, cur_flt; /* minor + major faults of the process at the last read / this one; -1 unknown */
  int64_t unnetted;   /* intervals whose growth and shrink the faults told apart */
  int64_t fault_reads; /* reads of /proc/PID/stat */
  int quiet;          /* ticks in a row whose statm did not move */
  long page;          /* bytes per page */
  int64_t rss, anon;  /* bytes at the last read; -1 before the first */
  int64_t last_thread, last_stack; /* seen running last: charged when none runs */
  int64_t last_point_ns, next_flush_ns;
  bf_memory_sample *rows;
  size_t nrows, cap_rows;
  bf_memory_point *pts;
  size_t npts, cap_pts;
  int64_t rows_total, dropped, reads, read_fail;
  int64_t growth, shrink; /* resident bytes charged, for the session's summary */
  int64_t cur_rss, cur_anon; /* read by rec_memory_read, not charged yet */
  int fresh;                 /* cur_* hold a reading */
  int gil_seen;              /* some tick saw a GIL holder */
  long obs_row[2];           /* buffered rows of the last stack seen (growth, shrink), -1 when none */
  /* the split of an interval whose two ticks saw different functions */
  int prev_seen;             /* the last tick saw a GIL holder */
  int64_t prev_fid;          /* its innermost function (store id; 0 = none) */
  bf_map3 pure;              /* (fid, kind, 0): intervals both of whose ticks saw fid
                              * (kind 0), their growth (1) and shrink (2) in bytes */
  int64_t split;             /* changes split between two functions */
  int64_t merged;            /* changes added to the row of the stack seen before */
  smp_pyalloc py;            /* pymalloc's totals, read at the timeline's points */
  int64_t py_peak;           /* the most pool bytes read */
};

/* Resident and anonymous resident bytes. 0, or -1 when the read failed. */
static int read_statm(rec_memory *m, int64_t *rss, int64_t *anon) {
  char buf[256];
  ssize_t k = pread(m->fd, buf, sizeof buf - 1, 0);
  if (k <= 0) return -1;
  buf[k] = 0;
  unsigned long long size, res, shared;
  if (sscanf(buf, "%llu %llu %llu", &size, &res, &shared) != 3 || shared > res) return -1;
  *rss = (int64_t)res * m->page;
  *anon = (int64_t)(res - shared) * m->page; /* shared = file-backed + shmem resident */
  return 0;
}

/* Minor + major page faults of the whole process (/proc/PID/stat fields 10
 * and 12, counted after the ')' that ends the command name). -1 on failure. */
static int64_t read_faults(int fd) {
  char buf[1024];
  ssize_t k = fd >= 0 ? pread(fd, buf, sizeof buf - 1, 0) : -1;
  if (k <= 0) return -1;
  buf[k] = 0;
  char *p = strrchr(buf, ')');
  unsigned long long minflt, majflt;
  if (!p || sscanf(p + 1, " %*c %*d %*d %*d %*d %*d %*u %llu %*u %llu", &minflt, &majflt) != 2) return -1;
  return (int64_t)(minflt + majflt);
}

rec_memory *rec_memory_new(int pid) {
  rec_memory *m = calloc(1, sizeof *m);
  if (!m) return NULL;
  char path[64];
  snprintf(path, sizeof path, "/proc/%d/statm", pid);
  m->fd = open(path, O_RDONLY | O_CLOEXEC);
  if (m->fd < 0) m->open_errno = errno;
  m->page = sysconf(_SC_PAGESIZE);
  if (m->page <= 0) m->page = 4096;
  m->rss = m->anon = -1;
  m->last_point_ns = -MEM_POINT_NS;
  m->obs_row[0] = m->obs_row[1] = -1;
  snprintf(path, sizeof path, "/proc/%d/stat", pid);
  m->stat_fd = m->fd >= 0 ? open(path, O_RDONLY | O_CLOEXEC) : -1;
  m->flt = m->cur_flt = -1;
  if (m->fd >= 0 && read_statm(m, &m->rss, &m->anon) < 0) m->rss = m->anon = -1;
  if (m->rss >= 0) m->flt = read_faults(m->stat_fd);
  return m;
}

void rec_memory_free(rec_memory *m) {
  if (!m) return;
  if (m->fd >= 0) close(m->fd);
  if (m->stat_fd >= 0) close(m->stat_fd);
  free(m->rows);
  free(m->pts);
  bf_map3_free(&m->pure);
  free(m);
}

/* The thread to charge among th[0..n): the GIL holder; where no GIL holder
 * was ever seen (the GIL is not read), one on a CPU. A thread on a CPU
 * without the GIL in a GIL build is mostly one waiting for it (or for a CPU)
 * after a sleep: it ran no Python since, so it is not charged. -1 when none
 * is. */
static long pick_thread(rec_memory *m, const bf_smp_thread *th, size_t n) {
  long on_cpu = -1;
  for (size_t i = 0; i < n; i++) {
    if (th[i].flags & BF_SMP_GIL) {
      m->gil_seen = 1;
      return (long)i;
    }
    if (on_cpu < 0 && (th[i].flags & BF_SMP_ON_CPU)) on_cpu = (long)i;
  }
  return m->gil_seen ? -1 : on_cpu;
}

/* Store thread and stack ids of th (interned as the time samples are).
 * -EBUSY: locked, charge the last thread instead. */
static int charge_ids(bf_store *st, target *t, const bf_smp_thread *th, int64_t *thread_id, int64_t *stack_id) {
  int64_t tid = th->native_tid ? th->native_tid : (int64_t)th->thread_id;
  rec_thread *r = rec_thread_get(t, tid);
  if (!r) return -ENOMEM;
  int rc;
  if (!r->store_thread_id) {
    const char *name = th->py_name ? th->py_name : th->name;
    if ((rc = bf_store_intern_thread(st, t->session_id, tid, name, &r->store_thread_id)) < 0) return rc;
    r->named = name != NULL;
  }
  if ((rc = rec_intern_stack(st, r, th, stack_id)) < 0) return rc;
  *thread_id = r->store_thread_id;
  return 0;
}

/* Both changes grow, or both shrink, or both are nil. */
static int same_sign(int64_t a, int64_t b) { return (a > 0) == (b > 0) && (a < 0) == (b < 0); }

static int write_buffered(bf_store *st, target *t) {
  rec_memory *m = t->mem;
  int rc = bf_store_memory_samples_add(st, t->session_id, m->rows, m->nrows);
  if (rc == 0) {
    m->nrows = 0;
    m->obs_row[0] = m->obs_row[1] = -1;
    rc = bf_store_memory_points_add(st, t->session_id, m->pts, m->npts);
    if (rc == 0) m->npts = 0;
  }
  return rc;
}

static int keep_point(rec_memory *m, bf_smp *h, int64_t ts, int force) {
  if (!force && ts - m->last_point_ns < MEM_POINT_NS) return 0;
  if (m->npts >= MEM_MAX_ROWS) return 0;
  if (bf_vec_grow((void **)&m->pts, &m->cap_pts, m->npts + 1, sizeof *m->pts, 256)) return -ENOMEM;
  /* pymalloc's pools in use, at the points only (two reads of the target:
   * its management state and its arenas vector) */
  int64_t py = -1;
  if (h && m->py.state >= 0) {
    int rc = smp_pyalloc_read(h, &m->py);
    if (rc == -ENOMEM) return rc;
    if (rc == 0) py = m->py.pool_bytes;
    if (py > m->py_peak) m->py_peak = py;
  }
  m->pts[m->npts++] = (bf_memory_point){ts, m->rss, m->anon, py};
  m->last_point_ns = ts;
  return 0;
}

void rec_memory_read(rec_memory *m) {
  if (!m || m->fd < 0) return;
  m->reads++;
  m->fresh = read_statm(m, &m->cur_rss, &m->cur_anon) == 0;
  if (!m->fresh) m->read_fail++;
  else {
    /* the faults (a read 3-4 times statm's price: /proc/PID/stat sums every
     * thread) while statm moves, and for MEM_QUIET_TICKS ticks after: a
     * quiet process costs one read a tick, and the interval after a longer
     * quiet keeps its net */
    m->quiet = m->cur_rss != m->rss || m->cur_anon != m->anon ? 0 : m->quiet + 1;
    m->cur_flt = m->quiet < MEM_QUIET_TICKS ? read_faults(m->stat_fd) : -1;
    if (m->quiet < MEM_QUIET_TICKS) m->fault_reads++;
  }
}

/* The innermost function of th with a store id (after charge_ids), 0 if none. */
static int64_t leaf_fid(const bf_smp_thread *th) {
  for (size_t i = 0; i < th->nframes; i++)
    if (th->frames[i].code) return th->frames[i].code->user_id;
  return 0;
}

static int pure_add(bf_map3 *mp, int64_t fid, int kind, int64_t v) {
  int64_t *x = bf_map3_get(mp, fid, kind, 0);
  if (x) {
    *x += v;
    return 0;
  }
  return bf_map3_put(mp, fid, kind, 0, v);
}

#define MEM_PURE_MIN 8 /* pure intervals of a function before its rate is used */

/* Bytes per interval of fid's own changes of sign sgn (> 0 growth, < 0
 * shrink), from the intervals whose two ticks both saw it; -1 while fewer
 * than MEM_PURE_MIN were seen. */
static double pure_rate(const bf_map3 *mp, int64_t fid, int sgn) {
  const int64_t *n = bf_map3_get(mp, fid, 0, 0), *v = bf_map3_get(mp, fid, sgn > 0 ? 1 : 2, 0);
  if (!n || *n < MEM_PURE_MIN) return -1;
  return v ? (double)*v / (double)*n : 0;
}

/* Append one row (or add it to the observation's row of the same sign).
 * obs: the row charged is the observation of this tick. */
static int add_row(rec_memory *m, int64_t thread_id, int64_t stack_id, int64_t ts, int64_t dr, int64_t da, int obs) {
  int sg = dr < 0 || (!dr && da < 0); /* 0 growth, 1 shrink */
  long o = m->obs_row[sg];
  bf_memory_sample *prev = o >= 0 && (size_t)o < m->nrows ? &m->rows[o] : NULL;
  if (prev && prev->thread_id == thread_id && prev->stack_id == stack_id && same_sign(prev->rss_delta, dr) &&
      same_sign(prev->anon_delta, da)) {
    /* charged to the stack one tick saw, as the change before: one
     * observation, one row (the intervals count observations) */
    prev->rss_delta += dr;
    prev->anon_delta += da;
    prev->ts_ns = ts;
    m->merged++;
  } else if (m->nrows >= MEM_MAX_ROWS) {
    m->dropped++;
    return 0;
  } else {
    if (bf_vec_grow((void **)&m->rows, &m->cap_rows, m->nrows + 1, sizeof *m->rows, 256)) return -ENOMEM;
    m->rows[m->nrows++] = (bf_memory_sample){thread_id, stack_id, ts, dr, da, 0};
    m->rows_total++;
    if (obs) m->obs_row[sg] = (long)m->nrows - 1;
  }
  if (dr > 0) m->growth += dr; /* what the rows hold */
  else m->shrink -= dr;
  return 0;
}

/* The growth and the shrink of one interval, apart. statm gives only their
 * net (dr resident, da anonymous); the process's page faults (flt_bytes =
 * faults x page, -1 when not read) count the pages it made resident, each
 * once, whatever was freed meanwhile, so the growth is at least that and the
 * shrink what it takes to come to the net. A fault that maps no new page (a
 * read of an untouched page maps the zero page; a later write faults again)
 * counts too: a page read before it is written shows as one growth and one
 * shrink. Anonymous growth is the resident growth less the file-backed pages
 * that came in (one fault maps up to 16 of those). g[0], s[0] resident,
 * g[1], s[1] anonymous, all >= 0; 1 when both growth and shrink are set. */
static int apart(int64_t dr, int64_t da, int64_t flt_bytes, int64_t g[2], int64_t s[2]) {
  int64_t dfile = dr - da;
  g[0] = dr > 0 ? dr : 0;
  if (flt_bytes > g[0]) g[0] = flt_bytes;
  g[1] = da > 0 ? da : 0;
  if (g[0] - (dfile > 0 ? dfile : 0) > g[1]) g[1] = g[0] - (dfile > 0 ? dfile : 0);
  s[0] = g[0] - dr;
  s[1] = g[1] - da;
  return (g[0] && s[0]) || (g[1] && s[1]);
}

int rec_memory_tick(bf_store *st, target *t, const bf_smp_thread *th, size_t n, int64_t ts) {
  rec_memory *m = t->mem;
  if (!m || !m->fresh) return 0;
  m->fresh = 0;
  int64_t rss = m->cur_rss, anon = m->cur_anon, flt = m->cur_flt;
  int rc;
  /* a tick where no thread runs Python (all asleep or in C without the GIL)
   * cannot have a stack that grew memory: the change since the last tick was
   * made by what ran last, so that stack is kept at every tick */
  long k = pick_thread(m, th, n);
  int64_t prev_thread = m->last_thread, prev_stack = m->last_stack, fid = 0;
  if (k >= 0 && (rc = charge_ids(st, t, &th[k], &m->last_thread, &m->last_stack)) < 0 && rc != -EBUSY) return rc;
  if (k >= 0) fid = leaf_fid(&th[k]);
  int64_t dr = m->rss >= 0 ? rss - m->rss : 0, da = m->rss >= 0 ? anon - m->anon : 0;
  /* both ticks saw one function: an interval of its own (its rates below) */
  int both = k >= 0 && m->prev_seen && m->rss >= 0;
  /* two functions with rates of their own: the growth and the shrink are told
   * apart by the faults, then each is split by the rates of its sign (the end
   * of a builder and the start of a releaser in one interval). Elsewhere the
   * net stays: a function's own interval nets its own changes, as its calls
   * do, and a page read before it is written (two faults, one page) must not
   * make a growth and a shrink of nothing. */
  int64_t g[2], s[2], fb = -1;
  if (both && fid != m->prev_fid && flt >= 0 && m->flt >= 0 && flt >= m->flt && pure_rate(&m->pure, fid, 1) >= 0 &&
      pure_rate(&m->pure, m->prev_fid, 1) >= 0)
    fb = (flt - m->flt) * m->page;
  if (apart(dr, da, fb, g, s)) m->unnetted++;
  if (both && fid && fid == m->prev_fid &&
      ((rc = pure_add(&m->pure, fid, 0, 1)) < 0 || (g[0] && (rc = pure_add(&m->pure, fid, 1, g[0])) < 0) ||
       (s[0] && (rc = pure_add(&m->pure, fid, 2, s[0])) < 0)))
    return rc;
  /* the growth, then the shrink, each charged on its own. When the two ticks
   * saw different functions, the change was made by either, in proportion to
   * what each changes (of that sign) in intervals of its own: a grower's last
   * partial interval is its own, not its successor's, and a function that
   * only frees takes the shrink. */
  int64_t own[2][2] = {{0, 0}, {0, 0}}; /* [sign][rss, anon] charged to this tick's stack */
  for (int sg = 0; sg < 2; sg++) {
    int64_t r = sg ? -s[0] : g[0], a = sg ? -s[1] : g[1];
    if (!r && !a) continue;
    double ra = -1, rb = -1;
    if (both && fid != m->prev_fid && r) {
      ra = pure_rate(&m->pure, m->prev_fid, sg ? -1 : 1);
      rb = pure_rate(&m->pure, fid, sg ? -1 : 1);
    }
    if (ra >= 0 && rb >= 0 && ra + rb > 0) {
      int64_t pa = (int64_t)((double)r * ra / (ra + rb)), qa = (int64_t)((double)a * ra / (ra + rb));
      pa -= pa % m->page;
      qa -= qa % m->page;
      if ((pa || qa) && (rc = add_row(m, prev_thread, prev_stack, ts, pa, qa, 0)) < 0) return rc;
      m->split++;
      r -= pa;
      a -= qa;
    }
    own[sg][0] = r;
    own[sg][1] = a;
  }
  if (k >= 0) m->obs_row[0] = m->obs_row[1] = -1; /* this tick's look is a new observation */
  for (int sg = 0; sg < 2; sg++)
    if ((own[sg][0] || own[sg][1]) &&
        (rc = add_row(m, m->last_thread, m->last_stack, ts, own[sg][0], own[sg][1], 1)) < 0)
      return rc;
  if (k >= 0) m->prev_fid = fid;
  m->prev_seen = k >= 0;
  int first = m->rss < 0;
  m->rss = rss;
  m->anon = anon;
  m->flt = flt;
  if ((rc = keep_point(m, t->h, ts, first)) < 0) return rc;
  int64_t now = bf_mono_ns();
  if (now < m->next_flush_ns) return 0;
  m->next_flush_ns = now + MEM_FLUSH_NS;
  rc = write_buffered(st, t);
  return rc == -EBUSY ? 0 : rc;
}

int rec_memory_flush(bf_store *st, target *t) {
  rec_memory *m = t->mem;
  if (!m) return 0;
  if (m->rss >= 0 && m->npts && m->pts[m->npts - 1].ts_ns != m->last_point_ns) keep_point(m, NULL, m->last_point_ns, 1);
  return write_buffered(st, t);
}

void rec_memory_json(const target *t, bf_jw *w) {
  const rec_memory *m = t->mem;
  if (!m) return;
  bf_jw_key(w, "memory");
  bf_jw_obj(w);
  bf_jw_kstr(w, "source", "statm");
  if (m->fd < 0) {
    char why[160];
    snprintf(why, sizeof why, "cannot open /proc/%d/statm: %s", t->pid, strerror(m->open_errno));
    bf_jw_kstr(w, "error", why);
  } else {
    bf_jw_kint(w, "page_bytes", m->page);
    bf_jw_kint(w, "reads", (long long)m->reads);
    bf_jw_kint(w, "read_failed", (long long)m->read_fail);
    bf_jw_kint(w, "rows", (long long)m->rows_total);
    bf_jw_kint(w, "changes_merged", (long long)m->merged);
    bf_jw_kint(w, "changes_split", (long long)m->split);
    /* growth and shrink of one interval told apart by the page faults */
    bf_jw_kstr(w, "faults", m->stat_fd >= 0 ? "stat" : "not read");
    bf_jw_kint(w, "fault_reads", (long long)m->fault_reads);
    bf_jw_kint(w, "intervals_apart", (long long)m->unnetted);
    bf_jw_kint(w, "rows_dropped", (long long)m->dropped);
    bf_jw_kint(w, "rss_growth_bytes", (long long)m->growth);
    bf_jw_kint(w, "rss_shrink_bytes", (long long)m->shrink);
    /* pymalloc's pools in use (pyalloc.c; docs/memory.md) */
    if (m->py.state > 0) {
      bf_jw_kstr(w, "python_allocator", "pymalloc pools in use (main interpreter)");
      bf_jw_kint(w, "python_reads", (long long)m->py.reads);
      bf_jw_kint(w, "python_read_failed", (long long)m->py.failed);
      bf_jw_kint(w, "python_pool_bytes", (long long)m->py.pool_bytes);
      bf_jw_kint(w, "python_pool_bytes_peak", (long long)m->py_peak);
      bf_jw_kint(w, "python_arena_bytes", (long long)m->py.arena_bytes);
    } else {
      bf_jw_kstr(w, "python_allocator", m->py.state < 0 ? m->py.why : "not read");
    }
  }
  bf_jw_end(w);
}
