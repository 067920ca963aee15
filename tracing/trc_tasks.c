/* trc_tasks.c — exact hits per asyncio await site: a table of (coroutine
 * code, instruction offset) -> suspensions, filled from the collector's yield
 * events, turned into (function identity, line, hits) rows for the session;
 * and the wall time of every task, from the first step of its outermost
 * coroutine (one not started by another coroutine) to that coroutine's end,
 * per outermost coroutine function. The tables hold a reference to each code
 * object they key on.
 */
#include "trc_tasks.h"

#include <stdint.h>
#include <stdlib.h>

#include "clock.h"
#include "trc_module.h"
#if PY_VERSION_HEX < 0x030C0000
#include <opcode.h>
#endif

#define TK_SLOTS (1u << 16) /* await sites kept (open addressing; full: not counted) */

typedef struct tk_site {
  PyCodeObject *co; /* strong reference; NULL = free */
  int offset;       /* bytes into co_code */
  int64_t hits;
} tk_site;

static tk_site *tk_sites;
static size_t tk_used;

/* Live outermost coroutines: coroutine object address -> start (open
 * addressing; a finished one leaves a tombstone; rebuilt when half full). */
#define TK_LIVE (1u << 16)
#define TK_GONE ((uintptr_t)1)
typedef struct tk_live {
  uintptr_t coro;
  PyCodeObject *co; /* borrowed: the coroutine keeps it alive while it runs */
  int64_t start_ns;
} tk_live;
static tk_live *tk_lives;
static size_t tk_nlive; /* slots taken, tombstones included */

/* Finished tasks per outermost coroutine function (code: strong reference). */
#define TK_FUNCS 4096
typedef struct tk_life {
  PyCodeObject *co;
  int64_t n, total_ns, max_ns;
} tk_life;
static tk_life *tk_lifes;
static size_t tk_nlifes;

static size_t tk_live_slot(uintptr_t coro) { return (size_t)((coro >> 4) * 0x9E3779B97F4A7C15ull >> 40) & (TK_LIVE - 1); }

static void tk_live_put(uintptr_t coro, PyCodeObject *co, int64_t start) {
  if (!tk_lives && !(tk_lives = calloc(TK_LIVE, sizeof *tk_lives))) return;
  if (tk_nlive >= TK_LIVE / 2) { /* drop the tombstones */
    tk_live *old = tk_lives;
    if (!(tk_lives = calloc(TK_LIVE, sizeof *tk_lives))) {
      tk_lives = old;
      return;
    }
    tk_nlive = 0;
    for (size_t i = 0; i < TK_LIVE; i++)
      if (old[i].coro > TK_GONE) {
        size_t j = tk_live_slot(old[i].coro);
        while (tk_lives[j].coro) j = (j + 1) & (TK_LIVE - 1);
        tk_lives[j] = old[i];
        tk_nlive++;
      }
    free(old);
    if (tk_nlive >= TK_LIVE / 2) return; /* that many live tasks: the newest go uncounted */
  }
  size_t j = tk_live_slot(coro);
  while (tk_lives[j].coro > TK_GONE && tk_lives[j].coro != coro) j = (j + 1) & (TK_LIVE - 1);
  if (!tk_lives[j].coro) tk_nlive++;
  tk_lives[j] = (tk_live){coro, co, start};
}

/* The coroutine frame is the outermost of a task (its caller is no
 * coroutine): note when it starts. */
static void tk_start(uintptr_t coro, PyCodeObject *co, PyCodeObject *caller) {
  if (!coro || (caller && (caller->co_flags & CO_COROUTINE))) return;
  tk_live_put(coro, co, bf_mono_ns());
}

static void tk_end(uintptr_t coro) {
  if (!tk_lives || !coro) return;
  for (size_t j = tk_live_slot(coro), n = 0; tk_lives[j].coro && n < TK_LIVE; j = (j + 1) & (TK_LIVE - 1), n++) {
    if (tk_lives[j].coro != coro) continue;
    int64_t d = bf_mono_ns() - tk_lives[j].start_ns;
    PyCodeObject *co = tk_lives[j].co;
    tk_lives[j].coro = TK_GONE;
    size_t k = 0;
    while (k < tk_nlifes && tk_lifes[k].co != co) k++;
    if (k == tk_nlifes) {
      if (tk_nlifes == TK_FUNCS || (!tk_lifes && !(tk_lifes = calloc(TK_FUNCS, sizeof *tk_lifes)))) return;
      Py_INCREF(co);
      tk_lifes[tk_nlifes++] = (tk_life){co, 0, 0, 0};
    }
    tk_lifes[k].n++;
    tk_lifes[k].total_ns += d;
    if (d > tk_lifes[k].max_ns) tk_lifes[k].max_ns = d;
    return;
  }
}

#if PY_VERSION_HEX >= 0x030B0000
static PyCodeObject *tk_frame_code(PyFrameObject *f) {
  PyCodeObject *co = PyFrame_GetCode(f);
  Py_DECREF(co); /* the frame keeps it alive */
  return co;
}
static uintptr_t tk_frame_coro(PyFrameObject *f) {
  PyObject *g = PyFrame_GetGenerator(f);
  Py_XDECREF(g); /* the frame belongs to it: alive for this event */
  return (uintptr_t)g;
}
static PyCodeObject *tk_caller_code(PyFrameObject *f) {
  PyFrameObject *b = PyFrame_GetBack(f);
  if (!b) return NULL;
  PyCodeObject *co = tk_frame_code(b);
  Py_DECREF(b); /* its code stays alive: the caller is still running */
  return co;
}
#else
static uintptr_t tk_frame_coro(PyFrameObject *f) { return (uintptr_t)f->f_gen; }
static PyCodeObject *tk_caller_code(PyFrameObject *f) { return f->f_back ? f->f_back->f_code : NULL; }
#endif

void trc_tasks_coro_start(PyCodeObject *co, PyFrameObject *frame) {
  if (!(co->co_flags & CO_COROUTINE)) return;
  if (!frame) frame = PyEval_GetFrame(); /* 3.12+: the coroutine's own frame, at its PY_START */
  if (frame) tk_start(tk_frame_coro(frame), co, tk_caller_code(frame));
}

void trc_tasks_coro_end(PyCodeObject *co) {
  if (!(co->co_flags & CO_COROUTINE) || !tk_nlive) return;
  PyFrameObject *frame = PyEval_GetFrame();
  if (frame) tk_end(tk_frame_coro(frame));
}

static void tk_hit(PyCodeObject *co, int offset) {
  if (!tk_sites && !(tk_sites = calloc(TK_SLOTS, sizeof *tk_sites))) return;
  uintptr_t h = ((uintptr_t)co >> 4) * 0x9E3779B97F4A7C15ull ^ (uintptr_t)offset * 0x85EBCA6Bu;
  for (size_t i = (h >> 16) & (TK_SLOTS - 1), n = 0; n < TK_SLOTS; n++, i = (i + 1) & (TK_SLOTS - 1)) {
    tk_site *s = &tk_sites[i];
    if (s->co == co && s->offset == offset) {
      s->hits++;
      return;
    }
    if (s->co) continue;
    if (tk_used >= TK_SLOTS / 2) return;
    Py_INCREF(co);
    *s = (tk_site){co, offset, 1};
    tk_used++;
    return;
  }
}

void trc_tasks_yield(PyCodeObject *co, PyObject *offset) {
  if (!(co->co_flags & CO_COROUTINE)) return; /* generators' yields are no awaits */
  long off = PyLong_AsLong(offset);
  if (off < 0) {
    PyErr_Clear();
    return;
  }
  tk_hit(co, (int)off);
}

void trc_tasks_frame_return(PyCodeObject *co, PyFrameObject *frame, int has_value) {
#if PY_VERSION_HEX < 0x030C0000
  if (!(co->co_flags & CO_COROUTINE)) return;
  /* a suspension always passes a value up; an exception never does */
#if PY_VERSION_HEX >= 0x030B0000
  int off = PyFrame_GetLasti(frame); /* 3.11: every await suspends on a YIELD_VALUE (never specialized) */
  int suspended = off >= 0 && off < (int)Py_SIZE(co) * 2 && (unsigned char)co->co_code_adaptive[off] == YIELD_VALUE;
#elif PY_VERSION_HEX >= 0x030A0000
  int off = frame->f_lasti * 2; /* 3.10 counts code units */
  int suspended = frame->f_state == FRAME_SUSPENDED;
#else
  int off = frame->f_lasti;
  int suspended = frame->f_stacktop != NULL; /* only a suspended frame keeps its value stack */
#endif
  if (has_value && suspended) {
    tk_hit(co, off);
  } else if (tk_nlive) { /* its end (a return, or an exception): a task's, if it is one */
    tk_end(tk_frame_coro(frame));
  }
#else
  (void)co;
  (void)frame;
  (void)has_value;
#endif
}

PyObject *trc_tasks_lifetimes(PyObject *self, PyObject *noargs) {
  (void)self;
  (void)noargs;
  PyObject *out = PyList_New(0);
  for (size_t k = 0; out && k < tk_nlifes; k++) {
    const tk_life *l = &tk_lifes[k];
    PyObject *row = Py_BuildValue("(OsiLLL)", l->co->co_filename, trc_code_qualname(l->co), l->co->co_firstlineno,
                                  (long long)l->n, (long long)l->total_ns, (long long)l->max_ns);
    if (!row || PyList_Append(out, row) < 0) {
      Py_XDECREF(row);
      Py_CLEAR(out);
    }
    Py_XDECREF(row);
  }
  return out;
}

static int cmp_site(const void *a, const void *b) {
  const tk_site *x = a, *y = b;
  if (x->co != y->co) return (uintptr_t)x->co < (uintptr_t)y->co ? -1 : 1;
  return (x->offset > y->offset) - (x->offset < y->offset);
}

PyObject *trc_tasks_await_sites(PyObject *self, PyObject *noargs) {
  (void)self;
  (void)noargs;
  PyObject *out = PyList_New(0);
  if (!out || !tk_used) return out;
  tk_site *v = malloc(tk_used * sizeof *v);
  if (!v) {
    Py_DECREF(out);
    return PyErr_NoMemory();
  }
  size_t n = 0;
  for (size_t i = 0; i < TK_SLOTS; i++)
    if (tk_sites[i].co) v[n++] = tk_sites[i];
  qsort(v, n, sizeof *v, cmp_site);
  /* one row per (code, line): a line may hold several suspension points */
  for (size_t i = 0; i < n;) {
    int line = PyCode_Addr2Line(v[i].co, v[i].offset);
    int64_t hits = 0;
    size_t j = i;
    while (j < n && v[j].co == v[i].co && PyCode_Addr2Line(v[j].co, v[j].offset) == line) hits += v[j++].hits;
    PyObject *row = Py_BuildValue("(OsiiL)", v[i].co->co_filename, trc_code_qualname(v[i].co),
                                  v[i].co->co_firstlineno, line, (long long)hits);
    if (!row || PyList_Append(out, row) < 0) {
      Py_XDECREF(row);
      Py_DECREF(out);
      free(v);
      return NULL;
    }
    Py_DECREF(row);
    i = j;
  }
  free(v);
  return out;
}
