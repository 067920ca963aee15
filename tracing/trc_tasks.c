/* trc_tasks.c — exact hits per asyncio await site: a table of (coroutine
 * code, instruction offset) -> suspensions, filled from the collector's yield
 * events, turned into (function identity, line, hits) rows for the session.
 * The table holds a reference to each code object it keys on.
 */
#include "trc_tasks.h"

#include <stdint.h>
#include <stdlib.h>

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

void trc_tasks_frame_return(PyFrameObject *frame) {
#if PY_VERSION_HEX < 0x030C0000
#if PY_VERSION_HEX >= 0x030B0000
  PyCodeObject *co = PyFrame_GetCode(frame);
  Py_DECREF(co); /* the frame keeps it alive */
#else
  PyCodeObject *co = frame->f_code;
#endif
  if (!(co->co_flags & CO_COROUTINE)) return;
  int off;
#if PY_VERSION_HEX >= 0x030B0000
  /* 3.11: every await suspends on a YIELD_VALUE (never specialized) */
  off = PyFrame_GetLasti(frame);
  if (off < 0 || off >= (int)Py_SIZE(co) * 2 || (unsigned char)co->co_code_adaptive[off] != YIELD_VALUE) return;
#elif PY_VERSION_HEX >= 0x030A0000
  if (frame->f_state != FRAME_SUSPENDED) return; /* a return, not a yield */
  off = frame->f_lasti * 2;                      /* 3.10 counts code units */
#else
  if (!frame->f_stacktop) return; /* only a suspended frame keeps its value stack */
  off = frame->f_lasti;
#endif
  tk_hit(co, off);
#else
  (void)frame;
#endif
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
