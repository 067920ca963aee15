/* trc_tasks.c — exact hits per asyncio await site: a table of (coroutine
 * code, instruction offset) -> suspensions, filled from the collector's yield
 * events, turned into (function identity, line, hits) rows for the session;
 * and the wall time of every task, from the first step of its outermost
 * coroutine (one not started by another coroutine) to that coroutine's end,
 * per outermost coroutine function. The tables (trc_tasks.h) are bf_pmaps;
 * the code table holds a reference to each code object the others key on.
 */
#include "trc_tasks.h"

#include <stdint.h>
#include <stdlib.h>

#include "clock.h"
#include "trc_module.h"
#if PY_VERSION_HEX < 0x030C0000
#include <opcode.h>
#endif

#define TK_SITES (1u << 15) /* await sites kept (more: not counted) */
#define TK_LIVE (1u << 15)  /* live outermost coroutines kept (more: the newest go uncounted) */
#define TK_FUNCS 4096       /* outermost coroutine functions kept */

typedef struct tk_code {
  uint64_t key;  /* PyCodeObject * (strong reference) */
  uint32_t id;   /* 1, 2, ...: the high half of its sites' keys */
  uint32_t life; /* 1 + index into lifes, 0 = none yet */
} tk_code;

typedef struct tk_site {
  uint64_t key;     /* code id << 32 | offset */
  PyCodeObject *co; /* the code table's reference */
  int32_t offset;   /* bytes into co_code */
  int32_t unused;
  int64_t hits;
} tk_site;

typedef struct tk_live {
  uint64_t key;     /* the coroutine object's address */
  PyCodeObject *co; /* borrowed: the coroutine keeps it alive while it runs */
  int64_t start_ns;
} tk_live;

void trc_tasks_init(trc_tasks *tk) {
  *tk = (trc_tasks){.codes = BF_PMAP_INIT(tk_code), .sites = BF_PMAP_INIT(tk_site), .lives = BF_PMAP_INIT(tk_live)};
}

/* co's row in the code table, added (with a new reference) when absent; NULL
 * when out of memory. */
static tk_code *tk_code_row(trc_tasks *tk, PyCodeObject *co) {
  int added;
  tk_code *c = bf_pmap_put(&tk->codes, (uint64_t)(uintptr_t)co, &added);
  if (c && added) {
    Py_INCREF(co);
    c->id = ++tk->ncodes;
  }
  return c;
}

/* The coroutine frame is the outermost of a task (its caller is no
 * coroutine): note when it starts. */
static void tk_start(trc_tasks *tk, uintptr_t coro, PyCodeObject *co, PyCodeObject *caller) {
  if (!coro || (caller && (caller->co_flags & CO_COROUTINE))) return;
  tk_live *l = bf_pmap_get(&tk->lives, (uint64_t)coro);
  if (!l && (tk->lives.len >= TK_LIVE || !(l = bf_pmap_put(&tk->lives, (uint64_t)coro, NULL)))) return;
  l->co = co;
  l->start_ns = bf_mono_ns();
}

static void tk_end(trc_tasks *tk, uintptr_t coro) {
  tk_live *l = coro ? bf_pmap_get(&tk->lives, (uint64_t)coro) : NULL;
  if (!l) return;
  int64_t d = bf_mono_ns() - l->start_ns;
  PyCodeObject *co = l->co;
  bf_pmap_del(&tk->lives, (uint64_t)coro);
  tk_code *c = bf_pmap_get(&tk->codes, (uint64_t)(uintptr_t)co);
  if (!c || !c->life) {
    if (tk->nlifes == TK_FUNCS || (!tk->lifes && !(tk->lifes = calloc(TK_FUNCS, sizeof *tk->lifes)))) return;
    if (!(c = tk_code_row(tk, co))) return;
    tk->lifes[tk->nlifes] = (trc_task_life){co, 0, 0, 0};
    c->life = (uint32_t)++tk->nlifes;
  }
  trc_task_life *f = &tk->lifes[c->life - 1];
  f->n++;
  f->total_ns += d;
  if (d > f->max_ns) f->max_ns = d;
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

void trc_tasks_coro_start(trc_tasks *tk, PyCodeObject *co, PyFrameObject *frame) {
  if (!(co->co_flags & CO_COROUTINE)) return;
  if (!frame) frame = PyEval_GetFrame(); /* 3.12+: the coroutine's own frame, at its PY_START */
  if (frame) tk_start(tk, tk_frame_coro(frame), co, tk_caller_code(frame));
}

void trc_tasks_coro_end(trc_tasks *tk, PyCodeObject *co) {
  if (!(co->co_flags & CO_COROUTINE) || !tk->lives.len) return;
  PyFrameObject *frame = PyEval_GetFrame();
  if (frame) tk_end(tk, tk_frame_coro(frame));
}

static void tk_hit(trc_tasks *tk, PyCodeObject *co, int offset) {
  tk_code *c = bf_pmap_get(&tk->codes, (uint64_t)(uintptr_t)co);
  tk_site *s = c ? bf_pmap_get(&tk->sites, (uint64_t)c->id << 32 | (uint32_t)offset) : NULL;
  if (s) {
    s->hits++;
    return;
  }
  if (tk->sites.len >= TK_SITES || (!c && !(c = tk_code_row(tk, co)))) return;
  if (!(s = bf_pmap_put(&tk->sites, (uint64_t)c->id << 32 | (uint32_t)offset, NULL))) return;
  s->co = co;
  s->offset = offset;
  s->hits = 1;
}

void trc_tasks_yield(trc_tasks *tk, PyCodeObject *co, PyObject *offset) {
  if (!(co->co_flags & CO_COROUTINE)) return; /* generators' yields are no awaits */
  long off = PyLong_AsLong(offset);
  if (off < 0 || off > INT32_MAX) {
    PyErr_Clear();
    return;
  }
  tk_hit(tk, co, (int)off);
}

void trc_tasks_frame_return(trc_tasks *tk, PyCodeObject *co, PyFrameObject *frame, int has_value) {
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
    tk_hit(tk, co, off);
  } else if (tk->lives.len) { /* its end (a return, or an exception): a task's, if it is one */
    tk_end(tk, tk_frame_coro(frame));
  }
#else
  (void)tk;
  (void)co;
  (void)frame;
  (void)has_value;
#endif
}

PyObject *trc_tasks_lifetimes(const trc_tasks *tk) {
  PyObject *out = PyList_New(0);
  for (size_t k = 0; out && k < tk->nlifes; k++) {
    const trc_task_life *l = &tk->lifes[k];
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

PyObject *trc_tasks_await_sites(const trc_tasks *tk) {
  PyObject *out = PyList_New(0);
  if (!out || !tk->sites.len) return out;
  tk_site *v = malloc(tk->sites.len * sizeof *v);
  if (!v) {
    Py_DECREF(out);
    return PyErr_NoMemory();
  }
  size_t n = 0, it = 0;
  for (const tk_site *s; n < tk->sites.len && (s = bf_pmap_next(&tk->sites, &it));) v[n++] = *s;
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
