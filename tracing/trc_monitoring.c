/* trc_monitoring.c — the collector's 3.12+ backend: sys.monitoring.
 *
 * C callables registered for PY_START/RESUME/RETURN/YIELD/UNWIND/THROW (and
 * CALL/C_RETURN/C_RAISE for builtins) feed the shadow stacks. CALL sites that
 * can only call a non-builtin are DISABLEd, guarded by a dict watcher; focus
 * mode uses a second tool that is switched on only inside focus subtrees.
 */
#include "trc_module.h"
#include "trc_tasks.h"

#if BF_TRC_MONITORING
#include <opcode.h>

#include <stdarg.h>
#include <string.h>


/* Everything here keeps its state in the collector's trc_mon_state
 * (trc_module.h): p->st->mon, or the pointer a function is handed. */

static int trc_opcodes_init(trc_opcodes *o);

static int trc_mon_init(trc_mon_state *m) {
  if (m->mon) return 0;
  PyObject *sys = PyImport_ImportModule("sys");
  if (!sys) return -1;
  PyObject *mon = PyObject_GetAttrString(sys, "monitoring");
  Py_DECREF(sys);
  if (!mon) return -1;
  PyObject *events = PyObject_GetAttrString(mon, "events");
  if (!events) {
    Py_DECREF(mon);
    return -1;
  }
  struct {
    const char *name;
    int *dst;
  } ev[] = {{"PY_START", &m->ev_py_start},   {"PY_RESUME", &m->ev_py_resume},
            {"PY_RETURN", &m->ev_py_return}, {"PY_YIELD", &m->ev_py_yield},
            {"PY_UNWIND", &m->ev_py_unwind}, {"PY_THROW", &m->ev_py_throw},
            {"CALL", &m->ev_call},           {"C_RETURN", &m->ev_c_return},
            {"C_RAISE", &m->ev_c_raise}};
  for (size_t i = 0; i < sizeof ev / sizeof ev[0]; i++) {
    PyObject *v = PyObject_GetAttrString(events, ev[i].name);
    if (!v) {
      Py_DECREF(events);
      Py_DECREF(mon);
      return -1;
    }
    *ev[i].dst = (int)PyLong_AsLong(v);
    Py_DECREF(v);
  }
  Py_DECREF(events);
  m->disable = PyObject_GetAttrString(mon, "DISABLE");
  if (!m->disable) {
    Py_DECREF(mon);
    return -1;
  }
  m->mon = mon;
  if (m->sites_off < 0) {
    const char *all = getenv("BIFOCAL_TRACE_ALL_CALLS");
    m->sites_off = (all && *all && strcmp(all, "0")) || trc_opcodes_init(&m->op) < 0;
  }
  return 0;
}

/* ---- CALL sites with one known callable ---------------------------------------
 *
 * CALL fires at every call site for every callable, but the collector needs it
 * only for builtins (the C frame it pushes; Python frames come from PY_START).
 * At a site `name(args)` whose callable comes straight from LOAD_GLOBAL (the
 * compiler's NULL + name form, only plain loads between it and the CALL), the
 * callable is whatever the frame's globals, else builtins, bind to name. When
 * that is not a builtin (a Python function, a class, str...), the site is
 * DISABLEd for this tool, so neither CALL nor C_RETURN fires there again. A
 * dict watcher on those globals and builtins calls restart_events() as soon as
 * such a name is bound, rebound or deleted, and the next call there decides
 * again. Counts, edges and times stay exact. BIFOCAL_TRACE_ALL_CALLS=1 keeps
 * every site (for comparison). */
#define TRC_SITE_NO 1u   /* not such a site, or not decidable */
#define TRC_SITE_NAME 2u /* 2 + index into co_names */
#define TRC_SITE_MAX_RESTARTS 64 /* names rebound this often: stop disabling */

/* Opcode numbers from the headers this extension is built against (fixed
 * within a minor version). Not from the opcode module: importing it at enable
 * would fill import caches the traced program would otherwise fill itself. */
static int trc_opcodes_init(trc_opcodes *o) {
  /* -1: no such opcode in this version */
  o->call_kw = o->kw_names = o->load_fast2 = o->load_fast_borrow2 = o->binary_subscr = -1;
  o->cache = CACHE;
  o->ext = EXTENDED_ARG;
  o->call = CALL;
  o->load_global = LOAD_GLOBAL;
  o->load_attr = LOAD_ATTR;
  o->binary_op = BINARY_OP;
  o->compare_op = COMPARE_OP;
  o->build_tuple = BUILD_TUPLE;
  o->build_list = BUILD_LIST;
  const int push1[] = {LOAD_FAST, LOAD_FAST_CHECK, LOAD_CONST, LOAD_DEREF,
#ifdef LOAD_FAST_BORROW /* 3.14+ */
                       LOAD_FAST_BORROW,
#endif
#ifdef LOAD_SMALL_INT
                       LOAD_SMALL_INT,
#endif
#ifdef LOAD_COMMON_CONSTANT
                       LOAD_COMMON_CONSTANT,
#endif
  };
  memset(o->push1, 0, sizeof o->push1);
  for (size_t i = 0; i < sizeof push1 / sizeof push1[0]; i++)
    if (push1[i] > 0 && push1[i] < 256 && push1[i] != o->cache) o->push1[push1[i]] = 1;
#ifdef BINARY_SUBSCR /* 3.14 folded it into BINARY_OP (NB_SUBSCR) */
  o->binary_subscr = BINARY_SUBSCR;
#endif
#ifdef CALL_KW
  o->call_kw = CALL_KW;
#endif
#ifdef KW_NAMES
  o->kw_names = KW_NAMES;
#endif
#ifdef LOAD_FAST_LOAD_FAST
  o->load_fast2 = LOAD_FAST_LOAD_FAST;
#endif
#ifdef LOAD_FAST_BORROW_LOAD_FAST_BORROW
  o->load_fast_borrow2 = LOAD_FAST_BORROW_LOAD_FAST_BORROW;
#endif
  /* without these the walk below cannot be trusted */
  return o->cache == 0 && o->ext > 0 && o->call > 0 && o->load_global > 0 ? 0 : -1;
}

/* The instruction that ends just before unit i of deoptimised bytecode c
 * (CACHE units skipped, EXTENDED_ARG folded in): its start, or -1. */
static Py_ssize_t trc_prev_instr(const trc_opcodes *o, const uint8_t *c, Py_ssize_t i, int *op, int *arg) {
  Py_ssize_t j = i - 1;
  while (j >= 0 && c[2 * j] == o->cache) j--;
  if (j < 0) return -1;
  *op = c[2 * j];
  int a = c[2 * j + 1], shift = 8;
  Py_ssize_t k = j - 1;
  for (; k >= 0 && c[2 * k] == o->ext && shift <= 24; k--, shift += 8) a |= c[2 * k + 1] << shift;
  *arg = a;
  return k + 1;
}

/* Site kind of the CALL at byte offset off of co (see TRC_SITE_*). */
static uint32_t trc_site_analyse(const trc_opcodes *o, PyCodeObject *co, Py_ssize_t off) {
  PyObject *bytes = PyCode_GetCode(co);
  if (!bytes) {
    PyErr_Clear();
    return TRC_SITE_NO;
  }
  const uint8_t *c = (const uint8_t *)PyBytes_AS_STRING(bytes);
  Py_ssize_t n = PyBytes_GET_SIZE(bytes) / 2, u = off / 2;
  uint32_t out = TRC_SITE_NO;
  if (off % 2 || u >= n) goto done;
  int op = c[2 * u], arg = c[2 * u + 1];
  Py_ssize_t i = u;
  for (int shift = 8; i > 0 && c[2 * (i - 1)] == o->ext && shift <= 24; i--, shift += 8)
    arg |= c[2 * (i - 1) + 1] << shift;
  long need; /* stack items still to account for above the callable */
  if (op == o->call) need = arg;
  else if (op == o->call_kw) need = (long)arg + 1; /* 3.13: kwnames on top */
  else goto done;
  for (int steps = 0; steps < 64; steps++) {
    Py_ssize_t start = trc_prev_instr(o, c, i, &op, &arg);
    if (start < 0) goto done;
    if (need == 0) {
      if (op == o->load_global && (arg & 1)) out = TRC_SITE_NAME + (uint32_t)(arg >> 1);
      goto done;
    }
    long pop, push;
    if (o->push1[op & 0xff]) pop = 0, push = 1;
    else if (op == o->load_fast2 || op == o->load_fast_borrow2) pop = 0, push = 2;
    else if (op == o->load_global) pop = 0, push = 1 + (arg & 1);
    else if (op == o->load_attr) pop = 1, push = 1 + (arg & 1);
    else if (op == o->kw_names) pop = 0, push = 0;
    else if (op == o->binary_op || op == o->binary_subscr || op == o->compare_op) pop = 2, push = 1;
    else if (op == o->build_tuple || op == o->build_list) pop = arg, push = 1;
    else if (op == o->call) pop = (long)arg + 2, push = 1;
    else if (op == o->call_kw) pop = (long)arg + 3, push = 1;
    else goto done;
    need -= push;
    if (need < 0) goto done; /* the callable's slot is written by something else */
    need += pop;
    i = start;
  }
done:
  Py_DECREF(bytes);
  return out;
}

static void trc_restart_sites(trc_mon_state *m) {
  PyObject *exc_type, *exc_val, *exc_tb;
  PyErr_Fetch(&exc_type, &exc_val, &exc_tb);
  if (m->watched_names) PySet_Clear(m->watched_names);
  m->site_restarts++;
  PyObject *r = PyObject_CallMethod(m->mon, "restart_events", NULL);
  Py_XDECREF(r);
  PyErr_Clear();
  PyErr_Restore(exc_type, exc_val, exc_tb);
}

/* A watched globals/builtins dict is about to change. */
static int trc_dict_watch_cb(PyDict_WatchEvent ev, PyObject *d, PyObject *key, PyObject *nv) {
  (void)d;
  (void)nv;
  trc_state *st = trc_state_root(); /* CPython passes no context */
  trc_mon_state *m = &st->mon;
  if (!st->active || !m->watched_names || PySet_GET_SIZE(m->watched_names) == 0) return 0;
  if (ev == PyDict_EVENT_DEALLOCATED) return 0;
  if (key) {
    if (!PyUnicode_Check(key)) return 0;
    int r = PySet_Contains(m->watched_names, key);
    if (r < 0) PyErr_Clear();
    if (r <= 0) return 0;
  } else if (ev != PyDict_EVENT_CLEARED && ev != PyDict_EVENT_CLONED) {
    return 0;
  }
  trc_restart_sites(m);
  return 0;
}

static int trc_watch(trc_mon_state *m, PyObject *g, PyObject *b, PyObject *name) {
  if (m->watcher_id == -2) return -1;
  if (m->watcher_id < 0) {
    m->watcher_id = PyDict_AddWatcher(trc_dict_watch_cb);
    if (m->watcher_id < 0) {
      m->watcher_id = -2;
      PyErr_Clear();
      return -1;
    }
  }
  if (!m->watched_names && !(m->watched_names = PySet_New(NULL))) {
    PyErr_Clear();
    return -1;
  }
  if (PyDict_Watch(m->watcher_id, g) < 0 || PyDict_Watch(m->watcher_id, b) < 0 ||
      PySet_Add(m->watched_names, name) < 0) {
    PyErr_Clear();
    return -1;
  }
  return 0;
}

/* Code fi runs under more than one globals: re-arm every site, decide none
 * of its sites again. */
static void trc_sites_mixed(ProfileObject *p, PyCodeObject *co, uint32_t fi) {
  if (p->site_globals[fi] == Py_None) return;
  Py_XDECREF(p->site_globals[fi]);
  Py_INCREF(Py_None);
  p->site_globals[fi] = Py_None;
  trc_code_remember(p, co, fi);
  trc_restart_sites(&p->st->mon);
}

/* A start or resume of code fi whose sites were DISABLEd: under their globals? */
static uint32_t trc_sites_globals_check(ProfileObject *p, PyCodeObject *co, uint32_t fi) {
  if (fi < p->nsite_globals && p->site_globals[fi] != Py_None &&
      PyEval_GetGlobals() != p->site_globals[fi])
    trc_sites_mixed(p, co, fi);
  return fi;
}

/* CALL of a non-builtin: DISABLE the site when it can only call this callable. */
static PyObject *trc_site_call(ProfileObject *p, PyObject *const *args) {
  trc_mon_state *m = &p->st->mon;
  PyCodeObject *co = (PyCodeObject *)args[0];
  PyLongObject *lo = (PyLongObject *)args[1];
  if (!PyLong_CheckExact(lo) || !PyUnstable_Long_IsCompact(lo)) Py_RETURN_NONE;
  Py_ssize_t off = PyUnstable_Long_CompactValue(lo);
  if (off < 0 || off >= (1 << 16) || !PyCode_Check(args[0])) Py_RETURN_NONE;
  uint64_t key = (uint64_t)(uintptr_t)co ^ ((uint64_t)off << 48);
  if (key == p->site_no_last) Py_RETURN_NONE; /* a loop calling through one site */
  uint32_t kind = trc_map_get(&p->site_map, key);
  if (kind == TRC_SITE_NO) {
    p->site_no_last = key;
    Py_RETURN_NONE;
  }
  if (!kind) {
    /* only code the profile holds a reference to: its address is not reused */
    if (!trc_func_find(&p->acct, co)) Py_RETURN_NONE;
    kind = trc_site_analyse(&m->op, co, off);
    if (trc_map_put(&p->site_map, key, kind) < 0 || kind == TRC_SITE_NO) Py_RETURN_NONE;
  }
  if (m->site_restarts >= TRC_SITE_MAX_RESTARTS) Py_RETURN_NONE;
  Py_ssize_t ni = (Py_ssize_t)(kind - TRC_SITE_NAME);
  if (!PyTuple_Check(co->co_names) || ni >= PyTuple_GET_SIZE(co->co_names)) Py_RETURN_NONE;
  PyObject *name = PyTuple_GET_ITEM(co->co_names, ni);
  PyObject *g = PyEval_GetGlobals(), *b = PyEval_GetBuiltins();
  if (!g || !b || !PyDict_CheckExact(g) || !PyDict_CheckExact(b) || !PyUnicode_CheckExact(name))
    Py_RETURN_NONE;
  PyObject *v = PyDict_GetItemWithError(g, name);
  if (!v && !PyErr_Occurred()) v = PyDict_GetItemWithError(b, name);
  if (v != args[2]) {
    PyErr_Clear();
    Py_RETURN_NONE;
  }
  /* one code object can run under several globals (functions made from it
   * with FunctionType or exec): decide its sites for one globals only */
  uint32_t fi = trc_code_lookup(p, co) & ~TRC_FI_SITES;
  if (!fi) fi = trc_func_find(&p->acct, co);
  if (!fi) Py_RETURN_NONE;
  if (fi >= p->nsite_globals) {
    size_t n = p->nsite_globals ? p->nsite_globals : 256;
    while (n <= fi) n *= 2;
    PyObject **ng = realloc(p->site_globals, n * sizeof *ng);
    if (!ng) Py_RETURN_NONE;
    memset(ng + p->nsite_globals, 0, (n - p->nsite_globals) * sizeof *ng);
    p->site_globals = ng;
    p->nsite_globals = n;
  }
  if (p->site_globals[fi] == NULL) {
    Py_INCREF(g);
    p->site_globals[fi] = g;
  } else if (p->site_globals[fi] != g) {
    trc_sites_mixed(p, co, fi);
    Py_RETURN_NONE;
  }
  if (trc_watch(m, g, b, name) < 0) Py_RETURN_NONE;
  trc_code_remember(p, co, fi | TRC_FI_SITES);
  p->sites_disabled = 1;
  Py_INCREF(m->disable);
  return m->disable;
}

#define TRC_CB_PROLOGUE()                                         \
  ProfileObject *p = (ProfileObject *)self;                       \
  if (!p->running) Py_RETURN_NONE;                                \
  trc_thread *t = trc_thread_get(p);                              \
  if (!t) Py_RETURN_NONE;                                         \
  if (t->paused) Py_RETURN_NONE

/* Full-trace callbacks (also the focus tool's, gated by focus_depth). */
static PyObject *cb_start(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
  (void)nargs;
  TRC_CB_PROLOGUE();
  if (p->focus_glob && t->focus_depth == 0) Py_RETURN_NONE; /* entry tool's job */
  int64_t now = trc_now(p);
  PyCodeObject *co = (PyCodeObject *)args[0];
  uint32_t fi = trc_code_lookup(p, co);
  if (fi & TRC_FI_SITES) fi = trc_sites_globals_check(p, co, fi & ~TRC_FI_SITES);
  if (!fi) fi = trc_code_func(p, co, PyEval_GetGlobals());
  trc_push(&p->acct, t, fi, co, 0, now);
  if (co->co_flags & CO_COROUTINE) trc_tasks_coro_start(&p->st->tasks, co, NULL); /* a task's start? (trc_tasks.c) */
  Py_RETURN_NONE;
}

static PyObject *cb_resume(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
  (void)nargs;
  TRC_CB_PROLOGUE();
  if (p->focus_glob && t->focus_depth == 0) Py_RETURN_NONE;
  int64_t now = trc_now(p);
  PyCodeObject *co = (PyCodeObject *)args[0];
  uint32_t fi = trc_code_lookup(p, co);
  if (fi & TRC_FI_SITES) fi = trc_sites_globals_check(p, co, fi & ~TRC_FI_SITES);
  if (!fi) fi = trc_code_func(p, co, PyEval_GetGlobals());
  trc_push(&p->acct, t, fi, co, TRC_FR_RESUME, now);
  Py_RETURN_NONE;
}

static PyObject *cb_return(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
  (void)nargs;
  TRC_CB_PROLOGUE();
  if (((PyCodeObject *)args[0])->co_flags & CO_COROUTINE) trc_tasks_coro_end(&p->st->tasks, (PyCodeObject *)args[0]);
  if (t->depth == 0) Py_RETURN_NONE;
  trc_leave(&p->acct, t, args[0], trc_now(p));
  Py_RETURN_NONE;
}

static PyObject *cb_call(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
  (void)nargs;
  ProfileObject *p = (ProfileObject *)self;
  if (!p->running) Py_RETURN_NONE;
  PyMethodDef *def = trc_builtin_def(args[2]);
  if (!def) { /* no frame to push; whether the site can be DISABLEd is per-thread free */
    if (p->site_calls) return trc_site_call(p, args);
    Py_RETURN_NONE;
  }
  trc_thread *t = trc_thread_get(p);
  if (!t || t->paused) Py_RETURN_NONE;
  if (p->focus_glob && t->focus_depth == 0) Py_RETURN_NONE;
  trc_push_c(p, t, args[2], def, trc_now(p));
  Py_RETURN_NONE;
}

static PyObject *cb_c_return(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
  (void)nargs;
  TRC_CB_PROLOGUE();
  if (t->depth == 0) Py_RETURN_NONE;
  const trc_frame *top = &t->stack[t->depth - 1];
  if ((top->flags & TRC_FR_C) && top->callable == args[2]) { /* the usual case */
    trc_pop(&p->acct, t, trc_now(p));
    Py_RETURN_NONE;
  }
  PyMethodDef *def = trc_builtin_def(args[2]);
  if (!def) Py_RETURN_NONE;
  trc_leave(&p->acct, t, def, trc_now(p));
  Py_RETURN_NONE;
}

static PyObject *cb_yield(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
  (void)nargs;
  TRC_CB_PROLOGUE();
  if (t->depth) trc_leave(&p->acct, t, args[0], trc_now(p));
  trc_tasks_yield(&p->st->tasks, (PyCodeObject *)args[0], args[1]); /* an await's hit (trc_tasks.c) */
  Py_RETURN_NONE;
}

/* Focus entry tool: PY_START everywhere, DISABLEd on every code that does not
 * match, so unfocused code runs uninstrumented after its first call. */
static PyObject *cb_focus_start(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
  (void)nargs;
  ProfileObject *p = (ProfileObject *)self;
  if (!p->running) Py_RETURN_NONE;
  trc_mon_state *m = &p->st->mon;
  PyCodeObject *co = (PyCodeObject *)args[0];
  uint32_t fi = trc_func_find(&p->acct, co);
  if (!fi) {
    PyObject *g = PyEval_GetGlobals();
    if (!trc_focus_match(p, g, trc_code_qualname(co), PyUnicode_AsUTF8(co->co_filename))) {
      PyErr_Clear();
      Py_INCREF(m->disable);
      return m->disable;
    }
    fi = trc_code_func(p, co, g);
    if (fi && (co->co_flags & (CO_GENERATOR | CO_COROUTINE | CO_ASYNC_GENERATOR))) {
      PyObject *r = PyObject_CallMethod(m->mon, "set_local_events", "iOi", p->tool_id,
                                        (PyObject *)co, m->ev_py_start | m->ev_py_resume);
      Py_XDECREF(r);
      PyErr_Clear();
    }
  }
  if (!fi || !p->acct.funcs[fi].focus) {
    Py_INCREF(m->disable);
    return m->disable;
  }
  trc_thread *t = trc_thread_get(p);
  if (!t || t->paused || t->focus_depth > 0) Py_RETURN_NONE; /* the subtree tool sees it */
  trc_push(&p->acct, t, fi, co, 0, trc_now(p));
  Py_RETURN_NONE;
}

static PyObject *cb_focus_resume(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
  (void)nargs;
  ProfileObject *p = (ProfileObject *)self;
  if (!p->running) Py_RETURN_NONE;
  PyCodeObject *co = (PyCodeObject *)args[0];
  uint32_t fi = trc_func_find(&p->acct, co);
  if (!fi || !p->acct.funcs[fi].focus) Py_RETURN_NONE;
  trc_thread *t = trc_thread_get(p);
  if (!t || t->paused || t->focus_depth > 0) Py_RETURN_NONE;
  trc_push(&p->acct, t, fi, co, TRC_FR_RESUME, trc_now(p));
  Py_RETURN_NONE;
}

/* sys.monitoring calls a callback through vectorcall. A minimal callable type
 * lands in the C function directly; a builtin-function object would add its
 * own dispatch and recursion check to every event. */
typedef struct {
  PyObject_HEAD
  vectorcallfunc vectorcall;
  PyObject *self; /* the Profile (strong) */
} trc_cb_obj;

#define TRC_VC(name, fn)                                                                   \
  static PyObject *name(PyObject *c, PyObject *const *args, size_t nargsf, PyObject *kw) { \
    (void)kw;                                                                              \
    return fn(((trc_cb_obj *)c)->self, args, PyVectorcall_NARGS(nargsf));                  \
  }
TRC_VC(vc_start, cb_start)
TRC_VC(vc_resume, cb_resume)
TRC_VC(vc_return, cb_return)
TRC_VC(vc_call, cb_call)
TRC_VC(vc_c_return, cb_c_return)
TRC_VC(vc_focus_start, cb_focus_start)
TRC_VC(vc_focus_resume, cb_focus_resume)
TRC_VC(vc_yield, cb_yield)
static const vectorcallfunc cb_vcs[] = {vc_start,    vc_resume,      vc_return,       vc_call,
                                        vc_c_return, vc_focus_start, vc_focus_resume, vc_yield};

static void trc_cb_dealloc(PyObject *o) {
  Py_XDECREF(((trc_cb_obj *)o)->self);
  PyObject_Free(o);
}

static PyTypeObject trc_cb_type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "_bifocal_trace.callback",
    .tp_basicsize = sizeof(trc_cb_obj),
    .tp_dealloc = trc_cb_dealloc,
    .tp_vectorcall_offset = offsetof(trc_cb_obj, vectorcall),
    .tp_call = PyVectorcall_Call,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_doc = "a bifocal tracer callback",
};

static PyObject *trc_mon_call(const trc_mon_state *m, const char *meth, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  PyObject *args = Py_VaBuildValue(fmt, ap);
  va_end(ap);
  if (!args) return NULL;
  PyObject *f = PyObject_GetAttrString(m->mon, meth);
  PyObject *r = f ? PyObject_Call(f, args, NULL) : NULL;
  Py_XDECREF(f);
  Py_DECREF(args);
  return r;
}

static int trc_register(ProfileObject *p, int tool, int event, int def) {
  const trc_mon_state *m = &p->st->mon;
  if (!(trc_cb_type.tp_flags & Py_TPFLAGS_READY) && PyType_Ready(&trc_cb_type) < 0) return -1;
  trc_cb_obj *o = PyObject_New(trc_cb_obj, &trc_cb_type);
  if (!o) return -1;
  o->vectorcall = cb_vcs[def];
  Py_INCREF(p);
  o->self = (PyObject *)p;
  PyObject *cb = (PyObject *)o;
  if (PyList_Append(p->callbacks, cb) < 0) {
    Py_DECREF(cb);
    return -1;
  }
  PyObject *r = trc_mon_call(m, "register_callback", "(iiO)", tool, event, cb);
  Py_DECREF(cb);
  Py_XDECREF(r);
  return r ? 0 : -1;
}

/* Claim tool id; error names the current holder, never evicts it. */
static int trc_claim_tool(const trc_mon_state *m, int tool) {
  PyObject *holder = trc_mon_call(m, "get_tool", "(i)", tool);
  if (!holder) return -1;
  if (holder != Py_None) {
    PyErr_Format(PyExc_RuntimeError,
                 "sys.monitoring tool id %d is already in use by %R; pick another free id, 0-5 "
                 "(tool_id=N)", /* the runner (bifocal_trace.py) names its option instead */
                 tool, holder);
    Py_DECREF(holder);
    return -1;
  }
  Py_DECREF(holder);
  PyObject *r = trc_mon_call(m, "use_tool_id", "(is)", tool, "bifocal");
  Py_XDECREF(r);
  return r ? 0 : -1;
}

static void trc_release_tool(const trc_mon_state *m, int tool) {
  PyObject *exc_type, *exc_val, *exc_tb;
  PyErr_Fetch(&exc_type, &exc_val, &exc_tb);
  PyObject *r = trc_mon_call(m, "set_events", "(ii)", tool, 0);
  Py_XDECREF(r);
  int evs[] = {m->ev_py_start, m->ev_py_resume, m->ev_py_return, m->ev_py_yield,
               m->ev_py_unwind, m->ev_py_throw, m->ev_call, m->ev_c_return,
               m->ev_c_raise};
  for (size_t i = 0; i < sizeof evs / sizeof evs[0]; i++) {
    r = trc_mon_call(m, "register_callback", "(iiO)", tool, evs[i], Py_None);
    Py_XDECREF(r);
  }
  r = trc_mon_call(m, "free_tool_id", "(i)", tool);
  Py_XDECREF(r);
  PyErr_Clear();
  PyErr_Restore(exc_type, exc_val, exc_tb);
}

static int trc_full_events(ProfileObject *p) {
  const trc_mon_state *m = &p->st->mon;
  int ev = m->ev_py_start | m->ev_py_resume | m->ev_py_return | m->ev_py_yield |
           m->ev_py_unwind | m->ev_py_throw;
  if (p->builtins) ev |= m->ev_call | m->ev_c_return | m->ev_c_raise;
  return ev;
}

/* Register the full callback set on tool. */
static int trc_register_full(ProfileObject *p, int tool) {
  const trc_mon_state *m = &p->st->mon;
  if (trc_register(p, tool, m->ev_py_start, 0) < 0 ||
      trc_register(p, tool, m->ev_py_resume, 1) < 0 ||
      trc_register(p, tool, m->ev_py_throw, 1) < 0 ||
      trc_register(p, tool, m->ev_py_return, 2) < 0 ||
      trc_register(p, tool, m->ev_py_yield, 7) < 0 ||
      trc_register(p, tool, m->ev_py_unwind, 2) < 0)
    return -1;
  if (p->builtins &&
      (trc_register(p, tool, m->ev_call, 3) < 0 || trc_register(p, tool, m->ev_c_return, 4) < 0 ||
       trc_register(p, tool, m->ev_c_raise, 4) < 0))
    return -1;
  return 0;
}

/* The first thread entered a focus subtree (on) or the last one left it. */
void trc_backend_on_focus(void *ctx, int on) {
  ProfileObject *p = ctx;
  if (p->focus_tool_id < 0 || p->focus_tool_on == on) return;
  const trc_mon_state *m = &p->st->mon;
  PyObject *exc_type, *exc_val, *exc_tb;
  PyErr_Fetch(&exc_type, &exc_val, &exc_tb);
  PyObject *r = trc_mon_call(m, "set_events", "(ii)", p->focus_tool_id, on ? trc_full_events(p) : 0);
  if (r) p->focus_tool_on = on;
  else p->acct.error = 1;
  Py_XDECREF(r);
  PyErr_Clear();
  PyErr_Restore(exc_type, exc_val, exc_tb);
}

int trc_backend_start(ProfileObject *p) {
  trc_mon_state *m = &p->st->mon;
  if (trc_mon_init(m) < 0) return -1;
  m->site_restarts = 0;
  p->site_calls = !p->focus_glob && !m->sites_off; /* read by every CALL of a non-builtin */
  int tool = p->req_tool_id >= 0 ? p->req_tool_id : 2; /* sys.monitoring.PROFILER_ID */
  if (trc_claim_tool(m, tool) < 0) return -1;
  p->tool_id = tool;
  p->callbacks = PyList_New(0);
  if (!p->callbacks) goto fail;
  if (!p->focus_glob) {
    if (trc_register_full(p, tool) < 0) goto fail;
    PyObject *r = trc_mon_call(m, "set_events", "(ii)", tool, trc_full_events(p));
    if (!r) goto fail;
    Py_DECREF(r);
    return 0;
  }
  /* focus: a second, free tool id sees the subtrees while one is active */
  for (int cand = 3; cand < 3 + 6 && p->focus_tool_id < 0; cand++) {
    int id = cand % 6;
    if (id == tool) continue;
    PyObject *holder = trc_mon_call(m, "get_tool", "(i)", id);
    if (!holder) goto fail;
    int free_id = holder == Py_None;
    Py_DECREF(holder);
    if (free_id && trc_claim_tool(m, id) == 0) p->focus_tool_id = id;
    PyErr_Clear();
  }
  if (p->focus_tool_id < 0) {
    PyErr_SetString(PyExc_RuntimeError,
                    "focus mode needs a second free sys.monitoring tool id and none is free");
    goto fail;
  }
  if (trc_register_full(p, p->focus_tool_id) < 0 ||
      trc_register(p, tool, m->ev_py_start, 5) < 0 ||
      trc_register(p, tool, m->ev_py_resume, 6) < 0)
    goto fail;
  PyObject *r = trc_mon_call(m, "set_events", "(ii)", tool, m->ev_py_start);
  if (!r) goto fail;
  Py_DECREF(r);
  return 0;
fail:
  if (p->focus_tool_id >= 0) trc_release_tool(m, p->focus_tool_id);
  p->focus_tool_id = -1;
  trc_release_tool(m, tool);
  p->tool_id = -1;
  Py_CLEAR(p->callbacks);
  return -1;
}

void trc_backend_stop(ProfileObject *p) {
  trc_mon_state *m = &p->st->mon;
  if (p->tool_id >= 0) trc_release_tool(m, p->tool_id);
  if (p->focus_tool_id >= 0) trc_release_tool(m, p->focus_tool_id);
  p->tool_id = p->focus_tool_id = -1;
  p->focus_tool_on = 0;
  if (p->focus_glob || p->sites_disabled) {
    /* focus mode DISABLEd PY_START on unfocused code, full trace DISABLEd
     * single-callable CALL sites; those locations would stay disabled for
     * the next user of the tool id */
    if (m->watched_names) PySet_Clear(m->watched_names);
    p->sites_disabled = 0;
    PyObject *exc_type, *exc_val, *exc_tb;
    PyErr_Fetch(&exc_type, &exc_val, &exc_tb);
    PyObject *r = trc_mon_call(m, "restart_events", "()");
    Py_XDECREF(r);
    PyErr_Clear();
    PyErr_Restore(exc_type, exc_val, exc_tb);
  }
  Py_CLEAR(p->callbacks);
}


void trc_backend_reset(ProfileObject *p) {
  trc_map_free(&p->site_map);
  p->site_no_last = 0;
  for (size_t i = 0; i < p->nsite_globals; i++) Py_XDECREF(p->site_globals[i]);
  free(p->site_globals);
  p->site_globals = NULL;
  p->nsite_globals = 0;
}

#endif
