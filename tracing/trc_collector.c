/* trc_collector.c — the `_bifocal_trace` extension: exact call accounting.
 *
 * 3.12+: sys.monitoring with C callables; 3.8–3.11: PyEval_SetProfile on every
 * thread. Per-thread shadow stacks feed per-function and per-edge totals and,
 * in focus mode, a bounded ring of per-call durations. Built once per Python.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <frameobject.h>
#include <structmember.h>
#if PY_VERSION_HEX >= 0x030C0000
#include <opcode.h>
#endif

#include <errno.h>
#include <fnmatch.h>
#include <stdint.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
#if defined(__x86_64__)
#include <x86intrin.h>
#define TRC_HAVE_TSC 1
#else
#define TRC_HAVE_TSC 0
#endif

#include "json.h"
#include "store.h"
#include "trc_int.h"

#if PY_VERSION_HEX >= 0x030C0000
#define BF_TRC_MONITORING 1
#else
#define BF_TRC_MONITORING 0
#endif

#ifndef Py_IS_TYPE
#define Py_IS_TYPE(ob, type) (Py_TYPE(ob) == (type))
#endif

#ifdef Py_GIL_DISABLED
#error "bifocal's tracer needs the GIL (free-threaded builds are not supported)"
#endif

/* ---- small open-addressing map: nonzero uint64 key -> uint32 value ---- */

typedef struct trc_map {
  uint64_t *keys;
  uint32_t *vals;
  size_t cap, n; /* cap is a power of two */
} trc_map;

static inline uint64_t trc_mix(uint64_t k) {
  k ^= k >> 33;
  k *= 0xff51afd7ed558ccdULL;
  k ^= k >> 33;
  return k;
}

static inline uint32_t trc_map_get(const trc_map *m, uint64_t key) {
  if (!m->cap) return 0;
  size_t mask = m->cap - 1, i = (size_t)trc_mix(key) & mask;
  for (;;) {
    uint64_t k = m->keys[i];
    if (k == key) return m->vals[i];
    if (k == 0) return 0;
    i = (i + 1) & mask;
  }
}

static int trc_map_put(trc_map *m, uint64_t key, uint32_t val) {
  if ((m->n + 1) * 2 > m->cap) {
    size_t ncap = m->cap ? m->cap * 2 : 1024;
    uint64_t *nk = calloc(ncap, sizeof *nk);
    uint32_t *nv = calloc(ncap, sizeof *nv);
    if (!nk || !nv) {
      free(nk);
      free(nv);
      return -ENOMEM;
    }
    for (size_t j = 0; j < m->cap; j++) {
      if (!m->keys[j]) continue;
      size_t i = (size_t)trc_mix(m->keys[j]) & (ncap - 1);
      while (nk[i]) i = (i + 1) & (ncap - 1);
      nk[i] = m->keys[j];
      nv[i] = m->vals[j];
    }
    free(m->keys);
    free(m->vals);
    m->keys = nk;
    m->vals = nv;
    m->cap = ncap;
  }
  size_t mask = m->cap - 1, i = (size_t)trc_mix(key) & mask;
  while (m->keys[i] && m->keys[i] != key) i = (i + 1) & mask;
  if (!m->keys[i]) m->n++;
  m->keys[i] = key;
  m->vals[i] = val;
  return 0;
}

static void trc_map_free(trc_map *m) {
  free(m->keys);
  free(m->vals);
  memset(m, 0, sizeof *m);
}

/* ---- state --------------------------------------------------------------- */

#define TRC_FR_C 0x1          /* C function frame */
#define TRC_FR_FOCUS_ROOT 0x2 /* outermost focused activation on this thread */
#define TRC_FR_RESUME 0x4     /* generator/coroutine resume, not a call */
#define TRC_FR_FOCUS_NESTED 0x8 /* focused function called inside a focus subtree: recorded too */

typedef struct trc_frame {
  const void *key;
  uint32_t func, edge;
  uint32_t flags;
  uint32_t last_callee, last_edge; /* the edge to the last function called from here */
  const void *callable;            /* C frames: the callable object CALL saw */
  int64_t t0, child_ns;
  int64_t start_raw; /* focus roots: start for the record (see trc_push) */
} trc_frame;

typedef struct trc_thread {
  struct trc_thread *next;
  uint32_t index;
  trc_frame *stack;
  size_t depth, cap;
  uint32_t *func_active;
  size_t nfunc_active;
  uint32_t *edge_active;
  size_t nedge_active;
  int64_t native_tid;
  char *name;
  int paused;
  uint32_t focus_depth;
  uint32_t root_last_callee, root_last_edge; /* edge cache of the thread root */
} trc_thread;

typedef struct ProfileObject {
  PyObject_HEAD
  int running;
  uint64_t gen;
  clockid_t clock_id;
  int clock_cpu;
  int builtins;
  int tool_id;       /* 3.12+: the tool id in use (-1 when not registered) */
  int req_tool_id;
  int focus_tool_id; /* 3.12+ focus: the tool that sees focus subtrees */
  int focus_tool_on;
  uint32_t focus_threads; /* threads currently inside a focus subtree */
  char *focus_glob;  /* NULL = trace everything */
  bf_trc_func *funcs;
  size_t nfuncs, capfuncs;
  trc_map func_map;
  bf_trc_edge *edges;
  size_t nedges, capedges;
  trc_map edge_map;
  trc_thread *threads;
  uint32_t nthreads;
  bf_trc_rec *recs;
  size_t rec_cap, rec_head, rec_count;
  int64_t mismatches;
  int64_t start_wall_ns, start_mono_ns, start_raw, elapsed_ns;
  int use_tsc;              /* wall clock read from the invariant TSC, scaled at output */
  int64_t iv_tsc0, iv_mono0; /* current enabled interval's start */
  int64_t tsc_ticks, tsc_ns; /* TSC ticks and CLOCK_MONOTONIC ns over enabled intervals */
  int64_t cpu_start_ns, cpu_total_ns;
  int error;         /* an allocation failed during tracing: results partial */
  PyObject *callbacks; /* 3.12+: list of callback objects (kept alive) */
  trc_map site_map;    /* 3.12+: (code, CALL offset) -> site kind (see cb_call) */
  PyObject **site_globals; /* by function index: the globals its sites were DISABLEd
                            * under (strong), Py_None = run under several: never */
  size_t nsite_globals;
  int sites_disabled;  /* 3.12+: some CALL sites were DISABLEd (restart at stop) */
  uint64_t site_no_last; /* 3.12+: the last site_map key found TRC_SITE_NO */
  char *db_path;       /* write here on disable/exit (NULL = keep in memory) */
  char *label;
  long long session_id; /* last session written, 0 = none */
} ProfileObject;

static PyTypeObject ProfileType;
static ProfileObject *trc_active; /* at most one enabled profiler per process */
static uint64_t trc_next_gen = 1;

/* initial-exec: one TLS read per event instead of a __tls_get_addr call */
static _Thread_local __attribute__((tls_model("initial-exec"))) struct {
  trc_thread *t;
  uint64_t gen;
} trc_tls;

/* The wall clock is CLOCK_MONOTONIC; where the CPU has an invariant TSC
 * (constant_tsc + nonstop_tsc) it is read with rdtsc (about a third of the
 * cost of clock_gettime here) and scaled to ns against CLOCK_MONOTONIC over
 * the enabled intervals. BIFOCAL_TRACE_NO_TSC=1 forces clock_gettime. */
static int trc_tsc_usable = -1;

static int trc_detect_tsc(void) {
#if TRC_HAVE_TSC
  const char *no = getenv("BIFOCAL_TRACE_NO_TSC");
  if (no && *no && strcmp(no, "0")) return 0;
  FILE *f = fopen("/proc/cpuinfo", "r");
  if (!f) return 0;
  char line[4096];
  int ok = 0;
  while (fgets(line, sizeof line, f)) {
    if (strncmp(line, "flags", 5)) continue;
    ok = strstr(line, " constant_tsc") && strstr(line, " nonstop_tsc");
    break;
  }
  fclose(f);
  return ok;
#else
  return 0;
#endif
}

static inline int64_t trc_clock(clockid_t id) {
  struct timespec ts;
  clock_gettime(id, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

struct ProfileObject;
/* The session clock in raw units (TSC ticks or ns). */
#define trc_now(p) ((p)->use_tsc ? trc_rdtsc() : trc_clock((p)->clock_id))
static inline int64_t trc_rdtsc(void) {
#if TRC_HAVE_TSC
  return (int64_t)__rdtsc();
#else
  return 0;
#endif
}

static char *trc_strdup(const char *s) {
  if (!s) return NULL;
  size_t n = strlen(s) + 1;
  char *d = malloc(n);
  if (d) memcpy(d, s, n);
  return d;
}

/* Thread name from threading._active without running Python code. */
static char *trc_thread_name(void) {
  char *out = NULL;
  PyObject *exc_type, *exc_val, *exc_tb;
  PyErr_Fetch(&exc_type, &exc_val, &exc_tb);
  PyObject *mods = PyImport_GetModuleDict();
  PyObject *threading = mods ? PyDict_GetItemString(mods, "threading") : NULL;
  if (threading) {
    PyObject *active = PyObject_GetAttrString(threading, "_active");
    if (active && PyDict_Check(active)) {
      PyObject *ident = PyLong_FromUnsignedLong(PyThread_get_thread_ident());
      PyObject *th = ident ? PyDict_GetItem(active, ident) : NULL;
      if (th) {
        PyObject *name = PyObject_GetAttrString(th, "_name");
        if (name && PyUnicode_Check(name)) out = trc_strdup(PyUnicode_AsUTF8(name));
        Py_XDECREF(name);
      }
      Py_XDECREF(ident);
    }
    Py_XDECREF(active);
  }
  PyErr_Clear();
  PyErr_Restore(exc_type, exc_val, exc_tb);
  return out;
}

static trc_thread *trc_thread_new(ProfileObject *p) {
  trc_thread *t = calloc(1, sizeof *t);
  if (!t) return NULL;
  t->index = p->nthreads++;
  t->native_tid = (int64_t)syscall(SYS_gettid);
  t->name = trc_thread_name();
  t->next = p->threads;
  p->threads = t;
  trc_tls.t = t;
  trc_tls.gen = p->gen;
  return t;
}

static inline trc_thread *trc_thread_get(ProfileObject *p) {
  if (trc_tls.gen == p->gen && trc_tls.t) return trc_tls.t;
  return trc_thread_new(p);
}

static void trc_thread_free(trc_thread *t) {
  free(t->stack);
  free(t->func_active);
  free(t->edge_active);
  free(t->name);
  free(t);
}

/* ---- function identity ---------------------------------------------------- */

/* Module name of a code object's globals, for focus matching; borrowed frame. */
static int trc_focus_match(ProfileObject *p, PyObject *globals, const char *qualname,
                           const char *file) {
  char buf[1024];
  const char *mod = NULL;
  if (globals && PyDict_Check(globals)) {
    PyObject *n = PyDict_GetItemString(globals, "__name__");
    if (n && PyUnicode_Check(n)) mod = PyUnicode_AsUTF8(n);
  }
  char base[256];
  if (!mod) {
    const char *b = file ? strrchr(file, '/') : NULL;
    b = b ? b + 1 : (file ? file : "?");
    snprintf(base, sizeof base, "%s", b);
    char *dot = strrchr(base, '.');
    if (dot) *dot = 0;
    mod = base;
  }
  snprintf(buf, sizeof buf, "%s:%s", mod, qualname ? qualname : "?");
  PyErr_Clear();
  return fnmatch(p->focus_glob, buf, 0) == 0;
}

static const char *trc_code_qualname(PyCodeObject *co) {
#if PY_VERSION_HEX >= 0x030B0000
  return PyUnicode_AsUTF8(co->co_qualname);
#else
  return PyUnicode_AsUTF8(co->co_name);
#endif
}

static uint32_t trc_func_add(ProfileObject *p, const void *key, PyObject *ref, int is_c) {
  if (p->nfuncs == p->capfuncs) {
    size_t ncap = p->capfuncs ? p->capfuncs * 2 : 256;
    bf_trc_func *nf = realloc(p->funcs, ncap * sizeof *nf);
    if (!nf) return 0;
    p->funcs = nf;
    p->capfuncs = ncap;
  }
  uint32_t idx = (uint32_t)p->nfuncs;
  if (trc_map_put(&p->func_map, (uint64_t)(uintptr_t)key, idx) < 0) return 0;
  p->nfuncs++;
  bf_trc_func *f = &p->funcs[idx];
  memset(f, 0, sizeof *f);
  f->key = key;
  Py_INCREF(ref);
  f->ref = ref;
  f->is_c = is_c;
  return idx;
}

/* Each code object's extra slot caches (profile generation << 32 | function
 * index), so the function of a code object is found without a hash lookup;
 * another generation's value (an older Profile) is a miss. */
#if PY_VERSION_HEX >= 0x030C0000
#define trc_code_set_extra PyUnstable_Code_SetExtra
#define trc_request_extra PyUnstable_Eval_RequestCodeExtraIndex
#else
#define trc_code_set_extra _PyCode_SetExtra
#define trc_request_extra _PyEval_RequestCodeExtraIndex
#endif
static Py_ssize_t trc_extra = -2; /* extra slot index: -2 not requested, -1 none free */

/* in the slot's function index: this code has DISABLEd CALL sites, so a start
 * or resume checks it runs under the globals they were decided for */
#define TRC_FI_SITES 0x80000000u

static inline void trc_code_remember(ProfileObject *p, PyCodeObject *co, uint32_t fi) {
  if (trc_extra >= 0 && fi &&
      trc_code_set_extra((PyObject *)co, trc_extra,
                         (void *)(((uintptr_t)(uint32_t)p->gen << 32) | fi)) < 0)
    PyErr_Clear();
}

/* CPython's co_extra block (Objects/codeobject.c, unchanged since 3.6): read
 * inline on every start, written only through the API above. */
typedef struct {
  Py_ssize_t ce_size;
  void *ce_extras[1];
} trc_code_extra;

/* Known function index of code co (maybe with TRC_FI_SITES), else 0. */
static inline uint32_t trc_code_lookup(ProfileObject *p, PyCodeObject *co) {
  const trc_code_extra *ex = (const trc_code_extra *)co->co_extra;
  if (ex && trc_extra >= 0 && trc_extra < ex->ce_size) {
    uintptr_t v = (uintptr_t)ex->ce_extras[trc_extra];
    if ((uint32_t)(v >> 32) == (uint32_t)p->gen && (uint32_t)v) return (uint32_t)v;
  }
  return 0;
}

/* Python function index for code; globals (may be NULL) decide focus. */
static uint32_t trc_code_func(ProfileObject *p, PyCodeObject *co, PyObject *globals) {
  uint32_t idx = trc_map_get(&p->func_map, (uint64_t)(uintptr_t)co);
  if (idx) {
    trc_code_remember(p, co, idx);
    return idx;
  }
  idx = trc_func_add(p, co, (PyObject *)co, 0);
  if (!idx) {
    p->error = 1;
    return 0;
  }
  trc_code_remember(p, co, idx);
  if (p->focus_glob)
    p->funcs[idx].focus =
        trc_focus_match(p, globals, trc_code_qualname(co), PyUnicode_AsUTF8(co->co_filename));
  PyErr_Clear();
  return idx;
}

/* The type that defines C method def among t's MRO, else NULL. Borrowed. */
static PyTypeObject *trc_defining_type(PyTypeObject *t, PyMethodDef *def) {
  PyObject *mro = t->tp_mro;
  if (!mro || !PyTuple_Check(mro)) return t;
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(mro); i++) {
    PyTypeObject *c = (PyTypeObject *)PyTuple_GET_ITEM(mro, i);
    for (PyMethodDef *m = c->tp_methods; m && m->ml_name; m++)
      if (m == def) return c;
  }
  return NULL;
}

static char *trc_type_name(PyTypeObject *t, const char *meth) {
  PyObject *mod = PyObject_GetAttrString((PyObject *)t, "__module__");
  PyObject *qn = PyObject_GetAttrString((PyObject *)t, "__qualname__");
  const char *ms = mod && PyUnicode_Check(mod) ? PyUnicode_AsUTF8(mod) : "builtins";
  const char *qs = qn && PyUnicode_Check(qn) ? PyUnicode_AsUTF8(qn) : t->tp_name;
  PyErr_Clear();
  size_t n = strlen(ms) + strlen(qs) + strlen(meth) + 3;
  char *out = malloc(n);
  if (out) snprintf(out, n, "%s.%s.%s", ms, qs, meth);
  Py_XDECREF(mod);
  Py_XDECREF(qn);
  return out;
}

/* "module.qualname" of a builtin callable (caller frees). */
static char *trc_cfunc_name(PyObject *callable, PyMethodDef *def) {
  if (Py_IS_TYPE(callable, &PyMethodDescr_Type))
    return trc_type_name(PyDescr_TYPE(callable), def->ml_name);
  PyObject *self = PyCFunction_GET_SELF(callable);
  if (self == NULL || PyModule_Check(self)) {
    const char *ms = NULL;
    PyObject *m = ((PyCFunctionObject *)callable)->m_module;
    if (m && PyUnicode_Check(m)) ms = PyUnicode_AsUTF8(m);
    if (!ms && self) ms = PyModule_GetName(self);
    PyErr_Clear();
    if (!ms) ms = "builtins";
    size_t n = strlen(ms) + strlen(def->ml_name) + 2;
    char *out = malloc(n);
    if (out) snprintf(out, n, "%s.%s", ms, def->ml_name);
    return out;
  }
  PyTypeObject *t = NULL;
  if (PyType_Check(self)) t = trc_defining_type((PyTypeObject *)self, def);
  if (!t) t = trc_defining_type(Py_TYPE(self), def);
  if (!t) t = PyType_Check(self) ? (PyTypeObject *)self : Py_TYPE(self);
  return trc_type_name(t, def->ml_name);
}

/* PyMethodDef of a builtin callable worth tracing, else NULL (and never ours). */
static inline PyMethodDef *trc_builtin_def(PyObject *callable) {
  /* exact-type tests first: most callables are Python functions, bound
   * methods or method descriptors, and PyCFunction_Check walks the MRO */
  PyTypeObject *tp = Py_TYPE(callable);
  if (tp == &PyFunction_Type || tp == &PyMethod_Type) return NULL;
  if (tp == &PyMethodDescr_Type) {
    if (PyDescr_TYPE(callable) == &ProfileType) return NULL;
    return ((PyMethodDescrObject *)callable)->d_method;
  }
  if (tp == &PyCFunction_Type || PyCFunction_Check(callable)) {
    PyObject *self = PyCFunction_GET_SELF(callable);
    if (self && Py_IS_TYPE(self, &ProfileType)) return NULL;
    return ((PyCFunctionObject *)callable)->m_ml;
  }
  if (Py_IS_TYPE(callable, &PyMethodDescr_Type)) {
    if (PyDescr_TYPE(callable) == &ProfileType) return NULL;
    return ((PyMethodDescrObject *)callable)->d_method;
  }
  return NULL;
}

static uint32_t trc_cfunc(ProfileObject *p, PyObject *callable, PyMethodDef *def) {
  uint32_t idx = trc_map_get(&p->func_map, (uint64_t)(uintptr_t)def);
  if (idx) return idx;
  idx = trc_func_add(p, def, callable, 1);
  if (!idx) {
    p->error = 1;
    return 0;
  }
  bf_trc_func *f = &p->funcs[idx];
  f->file = trc_strdup("<builtin>");
  f->qualname = trc_cfunc_name(callable, def);
  f->firstlineno = 0;
  return idx;
}

/* ---- shadow stacks ---------------------------------------------------------- */

static int trc_grow_u32(uint32_t **a, size_t *n, size_t need) {
  if (need <= *n) return 0;
  size_t nn = *n ? *n : 256;
  while (nn < need) nn *= 2;
  uint32_t *na = realloc(*a, nn * sizeof *na);
  if (!na) return -ENOMEM;
  memset(na + *n, 0, (nn - *n) * sizeof *na);
  *a = na;
  *n = nn;
  return 0;
}

static uint32_t trc_edge(ProfileObject *p, uint32_t caller, uint32_t callee) {
  uint64_t key = ((uint64_t)caller << 32) | callee;
  uint32_t idx = trc_map_get(&p->edge_map, key);
  if (idx) return idx;
  if (p->nedges == 0) p->nedges = 1; /* index 0 means "absent" in the map */
  if (p->nedges >= p->capedges) {
    size_t ncap = p->capedges ? p->capedges * 2 : 1024;
    bf_trc_edge *ne = realloc(p->edges, ncap * sizeof *ne);
    if (!ne) return 0;
    p->edges = ne;
    p->capedges = ncap;
  }
  idx = (uint32_t)p->nedges;
  if (trc_map_put(&p->edge_map, key, idx) < 0) return 0;
  p->nedges++;
  memset(&p->edges[idx], 0, sizeof p->edges[idx]);
  p->edges[idx].caller = caller;
  p->edges[idx].callee = callee;
  return idx;
}

static void trc_focus_tool(ProfileObject *p, int on);

/* Enter func fi (a call, or a generator resume when TRC_FR_RESUME). */
static inline __attribute__((always_inline)) void trc_push(ProfileObject *p, trc_thread *t,
                                                           uint32_t fi, const void *key,
                                                           uint32_t flags, int64_t now) {
  if (!fi) return;
  if (p->focus_glob && t->focus_depth == 0) {
    if (!p->funcs[fi].focus) return; /* outside every focus subtree */
    flags |= TRC_FR_FOCUS_ROOT;
  } else if (p->focus_glob && p->funcs[fi].focus && !(flags & TRC_FR_RESUME)) {
    flags |= TRC_FR_FOCUS_NESTED;
  }
  if (t->depth == t->cap) {
    size_t ncap = t->cap ? t->cap * 2 : 256;
    trc_frame *ns = realloc(t->stack, ncap * sizeof *ns);
    if (!ns) {
      p->error = 1;
      return;
    }
    t->stack = ns;
    t->cap = ncap;
  }
  /* the caller remembers its last callee's edge: a loop calling one function
   * finds the edge without a lookup */
  uint32_t *last_callee, *last_edge, caller;
  if (t->depth) {
    trc_frame *cf = &t->stack[t->depth - 1];
    caller = cf->func;
    last_callee = &cf->last_callee;
    last_edge = &cf->last_edge;
  } else {
    caller = 0;
    last_callee = &t->root_last_callee;
    last_edge = &t->root_last_edge;
  }
  uint32_t ei;
  if (*last_callee == fi) {
    ei = *last_edge;
  } else {
    ei = trc_edge(p, caller, fi);
    *last_callee = fi;
    *last_edge = ei;
  }
  if (!ei ||
      (fi >= t->nfunc_active && trc_grow_u32(&t->func_active, &t->nfunc_active, (size_t)fi + 1) < 0) ||
      (ei >= t->nedge_active && trc_grow_u32(&t->edge_active, &t->nedge_active, (size_t)ei + 1) < 0)) {
    p->error = 1;
    return;
  }
  bf_trc_func *f = &p->funcs[fi];
  if (flags & TRC_FR_RESUME) {
    f->resumes++;
  } else {
    bf_trc_edge *e = &p->edges[ei];
    f->calls++;
    e->calls++;
    if (t->func_active[fi] == 0) f->primitive_calls++;
    if (t->edge_active[ei] == 0) e->primitive_calls++;
  }
  t->func_active[fi]++;
  t->edge_active[ei]++;
  trc_frame *fr = &t->stack[t->depth++];
  fr->key = key;
  fr->func = fi;
  fr->edge = ei;
  fr->flags = flags;
  fr->last_callee = 0;
  fr->child_ns = 0;
  if (flags & TRC_FR_FOCUS_ROOT) {
    t->focus_depth++;
    /* cpu clock: records still start on the monotonic timeline */
    fr->start_raw = p->clock_cpu ? trc_clock(CLOCK_MONOTONIC) : now;
    if (p->focus_threads++ == 0) trc_focus_tool(p, 1);
  } else if (flags & TRC_FR_FOCUS_NESTED) {
    fr->start_raw = p->clock_cpu ? trc_clock(CLOCK_MONOTONIC) : now;
  }
  fr->t0 = now;
}

static void trc_record(ProfileObject *p, trc_thread *t, const trc_frame *fr, int64_t dur) {
  if (!p->rec_cap) return;
  bf_trc_rec *r;
  if (p->rec_count == p->rec_cap) {
    r = &p->recs[p->rec_head];
    p->funcs[r->func].records_kept--;
    p->funcs[r->func].records_dropped++;
    p->rec_head = (p->rec_head + 1) % p->rec_cap;
  } else {
    r = &p->recs[(p->rec_head + p->rec_count) % p->rec_cap];
    p->rec_count++;
  }
  r->func = fr->func;
  r->parent = t->depth ? t->stack[t->depth - 1].func : 0;
  r->thread = t->index;
  r->start_ns = fr->start_raw - (p->clock_cpu ? p->start_mono_ns : p->start_raw);
  r->duration_ns = dur;
  p->funcs[fr->func].records_kept++;
}

/* A focus root ended (cold: once per focused call). */
static __attribute__((noinline, cold)) void trc_pop_focus_root(ProfileObject *p, trc_thread *t,
                                                               const trc_frame *fr, int64_t el) {
  /* a resume of a focused generator is one more slice, not a call record */
  if (!(fr->flags & TRC_FR_RESUME)) trc_record(p, t, fr, el);
  t->focus_depth--;
  if (--p->focus_threads == 0) trc_focus_tool(p, 0);
}

static inline __attribute__((always_inline)) void trc_pop(ProfileObject *p, trc_thread *t,
                                                          int64_t now) {
  trc_frame *fr = &t->stack[--t->depth];
  int64_t el = now - fr->t0;
  if (el < 0) el = 0;
  int64_t self = el - fr->child_ns;
  bf_trc_func *f = &p->funcs[fr->func];
  bf_trc_edge *e = &p->edges[fr->edge];
  f->self_ns += self;
  e->self_ns += self;
  if (--t->func_active[fr->func] == 0) f->total_ns += el;
  if (--t->edge_active[fr->edge] == 0) e->total_ns += el;
  if (t->depth) t->stack[t->depth - 1].child_ns += el;
  if (fr->flags & TRC_FR_FOCUS_ROOT) trc_pop_focus_root(p, t, fr, el);
  else if (fr->flags & TRC_FR_FOCUS_NESTED) trc_record(p, t, fr, el);
}

/* trc_leave when key is not the top frame's. */
static __attribute__((noinline)) void trc_leave_resync(ProfileObject *p, trc_thread *t,
                                                       const void *key, int64_t now) {
  size_t i = t->depth;
  while (i > 0 && t->stack[i - 1].key != key) i--;
  if (i == 0) {
    /* Not on the stack: a frame entered before tracing started, unless focus
     * mode ignored it. Only count it when it cannot be either. */
    if (!p->focus_glob) p->mismatches++;
    return;
  }
  while (t->depth > i) {
    trc_pop(p, t, now);
    p->mismatches++;
  }
  trc_pop(p, t, now);
}

/* A frame with key returned: it must be the top one; resynchronise if not. */
static inline void trc_leave(ProfileObject *p, trc_thread *t, const void *key, int64_t now) {
  if (t->depth == 0) return; /* entered before tracing started (or outside focus) */
  if (t->stack[t->depth - 1].key == key) {
    trc_pop(p, t, now);
    return;
  }
  trc_leave_resync(p, t, key, now);
}

/* Unwind every thread's stack as if all frames returned now (stop). */
static void trc_unwind_all(ProfileObject *p) {
  for (trc_thread *t = p->threads; t; t = t->next) {
    int64_t now = trc_now(p);
    /* thread CPU clocks of other threads are not readable here: close their
     * frames at their last known time (child time keeps totals consistent) */
    if (p->clock_cpu && !(trc_tls.t == t && trc_tls.gen == p->gen))
      now = t->depth ? t->stack[t->depth - 1].t0 : 0;
    while (t->depth) trc_pop(p, t, now);
  }
}

/* ===================================================================== */
#if BF_TRC_MONITORING
/* ---- 3.12+: sys.monitoring ---------------------------------------------- */

static PyObject *trc_mon;       /* sys.monitoring */
static PyObject *trc_disable;   /* sys.monitoring.DISABLE */
static int trc_ev_py_start, trc_ev_py_resume, trc_ev_py_return, trc_ev_py_yield,
    trc_ev_py_unwind, trc_ev_py_throw, trc_ev_call, trc_ev_c_return, trc_ev_c_raise;

static int trc_sites_off = -1; /* BIFOCAL_TRACE_ALL_CALLS, read once (see trc_site_call) */
static int trc_opcodes_init(void);

static int trc_mon_init(void) {
  if (trc_mon) return 0;
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
  } ev[] = {{"PY_START", &trc_ev_py_start},   {"PY_RESUME", &trc_ev_py_resume},
            {"PY_RETURN", &trc_ev_py_return}, {"PY_YIELD", &trc_ev_py_yield},
            {"PY_UNWIND", &trc_ev_py_unwind}, {"PY_THROW", &trc_ev_py_throw},
            {"CALL", &trc_ev_call},           {"C_RETURN", &trc_ev_c_return},
            {"C_RAISE", &trc_ev_c_raise}};
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
  trc_disable = PyObject_GetAttrString(mon, "DISABLE");
  if (!trc_disable) {
    Py_DECREF(mon);
    return -1;
  }
  trc_mon = mon;
  if (trc_sites_off < 0) {
    const char *all = getenv("BIFOCAL_TRACE_ALL_CALLS");
    trc_sites_off = (all && *all && strcmp(all, "0")) || trc_opcodes_init() < 0;
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

static int op_cache = -1, op_ext = -1, op_call = -1, op_call_kw = -1, op_kw_names = -1,
           op_load_global = -1, op_load_fast = -1, op_load_fast_check = -1, op_load_const = -1,
           op_load_deref = -1, op_load_fast2 = -1, op_load_attr = -1, op_binary_op = -1,
           op_binary_subscr = -1, op_compare_op = -1, op_build_tuple = -1, op_build_list = -1;
static int trc_watcher_id = -1;      /* -2: no dict watcher available */
static PyObject *trc_watched_names;  /* set: names whose sites are DISABLEd */
static int trc_site_restarts;

/* Opcode numbers from the headers this extension is built against (fixed
 * within a minor version). Not from the opcode module: importing it at enable
 * would fill import caches the traced program would otherwise fill itself. */
static int trc_opcodes_init(void) {
#if PY_VERSION_HEX >= 0x030C0000
  op_cache = CACHE;
  op_ext = EXTENDED_ARG;
  op_call = CALL;
  op_load_global = LOAD_GLOBAL;
  op_load_fast = LOAD_FAST;
  op_load_fast_check = LOAD_FAST_CHECK;
  op_load_const = LOAD_CONST;
  op_load_deref = LOAD_DEREF;
  op_load_attr = LOAD_ATTR;
  op_binary_op = BINARY_OP;
  op_binary_subscr = BINARY_SUBSCR;
  op_compare_op = COMPARE_OP;
  op_build_tuple = BUILD_TUPLE;
  op_build_list = BUILD_LIST;
#ifdef CALL_KW
  op_call_kw = CALL_KW;
#endif
#ifdef KW_NAMES
  op_kw_names = KW_NAMES;
#endif
#ifdef LOAD_FAST_LOAD_FAST
  op_load_fast2 = LOAD_FAST_LOAD_FAST;
#endif
#endif
  /* without these the walk below cannot be trusted */
  return op_cache == 0 && op_ext > 0 && op_call > 0 && op_load_global > 0 ? 0 : -1;
}

/* The instruction that ends just before unit i of deoptimised bytecode c
 * (CACHE units skipped, EXTENDED_ARG folded in): its start, or -1. */
static Py_ssize_t trc_prev_instr(const uint8_t *c, Py_ssize_t i, int *op, int *arg) {
  Py_ssize_t j = i - 1;
  while (j >= 0 && c[2 * j] == op_cache) j--;
  if (j < 0) return -1;
  *op = c[2 * j];
  int a = c[2 * j + 1], shift = 8;
  Py_ssize_t k = j - 1;
  for (; k >= 0 && c[2 * k] == op_ext && shift <= 24; k--, shift += 8) a |= c[2 * k + 1] << shift;
  *arg = a;
  return k + 1;
}

/* Site kind of the CALL at byte offset off of co (see TRC_SITE_*). */
static uint32_t trc_site_analyse(PyCodeObject *co, Py_ssize_t off) {
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
  for (int shift = 8; i > 0 && c[2 * (i - 1)] == op_ext && shift <= 24; i--, shift += 8)
    arg |= c[2 * (i - 1) + 1] << shift;
  long need; /* stack items still to account for above the callable */
  if (op == op_call) need = arg;
  else if (op == op_call_kw) need = (long)arg + 1; /* 3.13: kwnames on top */
  else goto done;
  for (int steps = 0; steps < 64; steps++) {
    Py_ssize_t start = trc_prev_instr(c, i, &op, &arg);
    if (start < 0) goto done;
    if (need == 0) {
      if (op == op_load_global && (arg & 1)) out = TRC_SITE_NAME + (uint32_t)(arg >> 1);
      goto done;
    }
    long pop, push;
    if (op == op_load_fast || op == op_load_fast_check || op == op_load_const ||
        op == op_load_deref)
      pop = 0, push = 1;
    else if (op == op_load_fast2) pop = 0, push = 2;
    else if (op == op_load_global) pop = 0, push = 1 + (arg & 1);
    else if (op == op_load_attr) pop = 1, push = 1 + (arg & 1);
    else if (op == op_kw_names) pop = 0, push = 0;
    else if (op == op_binary_op || op == op_binary_subscr || op == op_compare_op) pop = 2, push = 1;
    else if (op == op_build_tuple || op == op_build_list) pop = arg, push = 1;
    else if (op == op_call) pop = (long)arg + 2, push = 1;
    else if (op == op_call_kw) pop = (long)arg + 3, push = 1;
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

static void trc_restart_sites(void) {
  PyObject *exc_type, *exc_val, *exc_tb;
  PyErr_Fetch(&exc_type, &exc_val, &exc_tb);
  if (trc_watched_names) PySet_Clear(trc_watched_names);
  trc_site_restarts++;
  PyObject *r = PyObject_CallMethod(trc_mon, "restart_events", NULL);
  Py_XDECREF(r);
  PyErr_Clear();
  PyErr_Restore(exc_type, exc_val, exc_tb);
}

/* A watched globals/builtins dict is about to change. */
static int trc_dict_watch_cb(PyDict_WatchEvent ev, PyObject *d, PyObject *key, PyObject *nv) {
  (void)d;
  (void)nv;
  if (!trc_active || !trc_watched_names || PySet_GET_SIZE(trc_watched_names) == 0) return 0;
  if (ev == PyDict_EVENT_DEALLOCATED) return 0;
  if (key) {
    if (!PyUnicode_Check(key)) return 0;
    int r = PySet_Contains(trc_watched_names, key);
    if (r < 0) PyErr_Clear();
    if (r <= 0) return 0;
  } else if (ev != PyDict_EVENT_CLEARED && ev != PyDict_EVENT_CLONED) {
    return 0;
  }
  trc_restart_sites();
  return 0;
}

static int trc_watch(PyObject *g, PyObject *b, PyObject *name) {
  if (trc_watcher_id == -2) return -1;
  if (trc_watcher_id < 0) {
    trc_watcher_id = PyDict_AddWatcher(trc_dict_watch_cb);
    if (trc_watcher_id < 0) {
      trc_watcher_id = -2;
      PyErr_Clear();
      return -1;
    }
  }
  if (!trc_watched_names && !(trc_watched_names = PySet_New(NULL))) {
    PyErr_Clear();
    return -1;
  }
  if (PyDict_Watch(trc_watcher_id, g) < 0 || PyDict_Watch(trc_watcher_id, b) < 0 ||
      PySet_Add(trc_watched_names, name) < 0) {
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
  trc_restart_sites();
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
    if (!trc_map_get(&p->func_map, (uint64_t)(uintptr_t)co)) Py_RETURN_NONE;
    kind = trc_site_analyse(co, off);
    if (trc_map_put(&p->site_map, key, kind) < 0 || kind == TRC_SITE_NO) Py_RETURN_NONE;
  }
  if (trc_site_restarts >= TRC_SITE_MAX_RESTARTS) Py_RETURN_NONE;
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
  if (!fi) fi = trc_map_get(&p->func_map, (uint64_t)(uintptr_t)co);
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
  if (trc_watch(g, b, name) < 0) Py_RETURN_NONE;
  trc_code_remember(p, co, fi | TRC_FI_SITES);
  p->sites_disabled = 1;
  Py_INCREF(trc_disable);
  return trc_disable;
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
  trc_push(p, t, fi, co, 0, now);
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
  trc_push(p, t, fi, co, TRC_FR_RESUME, now);
  Py_RETURN_NONE;
}

static PyObject *cb_return(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
  (void)nargs;
  TRC_CB_PROLOGUE();
  if (t->depth == 0) Py_RETURN_NONE;
  trc_leave(p, t, args[0], trc_now(p));
  Py_RETURN_NONE;
}

static PyObject *cb_call(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
  (void)nargs;
  ProfileObject *p = (ProfileObject *)self;
  if (!p->running) Py_RETURN_NONE;
  PyMethodDef *def = trc_builtin_def(args[2]);
  if (!def) { /* no frame to push; whether the site can be DISABLEd is per-thread free */
    if (!p->focus_glob && !trc_sites_off) return trc_site_call(p, args);
    Py_RETURN_NONE;
  }
  trc_thread *t = trc_thread_get(p);
  if (!t || t->paused) Py_RETURN_NONE;
  if (p->focus_glob && t->focus_depth == 0) Py_RETURN_NONE;
  int64_t now = trc_now(p);
  uint32_t fi = trc_map_get(&p->func_map, (uint64_t)(uintptr_t)def);
  if (!fi) fi = trc_cfunc(p, args[2], def);
  size_t depth = t->depth;
  trc_push(p, t, fi, def, TRC_FR_C, now);
  if (t->depth > depth) t->stack[depth].callable = args[2];
  Py_RETURN_NONE;
}

static PyObject *cb_c_return(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
  (void)nargs;
  TRC_CB_PROLOGUE();
  if (t->depth == 0) Py_RETURN_NONE;
  const trc_frame *top = &t->stack[t->depth - 1];
  if ((top->flags & TRC_FR_C) && top->callable == args[2]) { /* the usual case */
    trc_pop(p, t, trc_now(p));
    Py_RETURN_NONE;
  }
  PyMethodDef *def = trc_builtin_def(args[2]);
  if (!def) Py_RETURN_NONE;
  trc_leave(p, t, def, trc_now(p));
  Py_RETURN_NONE;
}

/* Focus entry tool: PY_START everywhere, DISABLEd on every code that does not
 * match, so unfocused code runs uninstrumented after its first call. */
static PyObject *cb_focus_start(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
  (void)nargs;
  ProfileObject *p = (ProfileObject *)self;
  if (!p->running) Py_RETURN_NONE;
  PyCodeObject *co = (PyCodeObject *)args[0];
  uint32_t fi = trc_map_get(&p->func_map, (uint64_t)(uintptr_t)co);
  if (!fi) {
    PyObject *g = PyEval_GetGlobals();
    if (!trc_focus_match(p, g, trc_code_qualname(co), PyUnicode_AsUTF8(co->co_filename))) {
      PyErr_Clear();
      Py_INCREF(trc_disable);
      return trc_disable;
    }
    fi = trc_code_func(p, co, g);
    if (fi && (co->co_flags & (CO_GENERATOR | CO_COROUTINE | CO_ASYNC_GENERATOR))) {
      PyObject *r = PyObject_CallMethod(trc_mon, "set_local_events", "iOi", p->tool_id,
                                        (PyObject *)co, trc_ev_py_start | trc_ev_py_resume);
      Py_XDECREF(r);
      PyErr_Clear();
    }
  }
  if (!fi || !p->funcs[fi].focus) {
    Py_INCREF(trc_disable);
    return trc_disable;
  }
  trc_thread *t = trc_thread_get(p);
  if (!t || t->paused || t->focus_depth > 0) Py_RETURN_NONE; /* the subtree tool sees it */
  trc_push(p, t, fi, co, 0, trc_now(p));
  Py_RETURN_NONE;
}

static PyObject *cb_focus_resume(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
  (void)nargs;
  ProfileObject *p = (ProfileObject *)self;
  if (!p->running) Py_RETURN_NONE;
  PyCodeObject *co = (PyCodeObject *)args[0];
  uint32_t fi = trc_map_get(&p->func_map, (uint64_t)(uintptr_t)co);
  if (!fi || !p->funcs[fi].focus) Py_RETURN_NONE;
  trc_thread *t = trc_thread_get(p);
  if (!t || t->paused || t->focus_depth > 0) Py_RETURN_NONE;
  trc_push(p, t, fi, co, TRC_FR_RESUME, trc_now(p));
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
static const vectorcallfunc cb_vcs[] = {vc_start, vc_resume,       vc_return,      vc_call,
                                        vc_c_return, vc_focus_start, vc_focus_resume};

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

static PyObject *trc_mon_call(const char *meth, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  PyObject *args = Py_VaBuildValue(fmt, ap);
  va_end(ap);
  if (!args) return NULL;
  PyObject *f = PyObject_GetAttrString(trc_mon, meth);
  PyObject *r = f ? PyObject_Call(f, args, NULL) : NULL;
  Py_XDECREF(f);
  Py_DECREF(args);
  return r;
}

static int trc_register(ProfileObject *p, int tool, int event, int def) {
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
  PyObject *r = trc_mon_call("register_callback", "(iiO)", tool, event, cb);
  Py_DECREF(cb);
  Py_XDECREF(r);
  return r ? 0 : -1;
}

/* Claim tool id; error names the current holder, never evicts it. */
static int trc_claim_tool(int tool) {
  PyObject *holder = trc_mon_call("get_tool", "(i)", tool);
  if (!holder) return -1;
  if (holder != Py_None) {
    PyErr_Format(PyExc_RuntimeError,
                 "sys.monitoring tool id %d is already in use by %R; pick another free id "
                 "with --tool-id N (tool_id=N), 0-5",
                 tool, holder);
    Py_DECREF(holder);
    return -1;
  }
  Py_DECREF(holder);
  PyObject *r = trc_mon_call("use_tool_id", "(is)", tool, "bifocal");
  Py_XDECREF(r);
  return r ? 0 : -1;
}

static void trc_release_tool(int tool) {
  PyObject *exc_type, *exc_val, *exc_tb;
  PyErr_Fetch(&exc_type, &exc_val, &exc_tb);
  PyObject *r = trc_mon_call("set_events", "(ii)", tool, 0);
  Py_XDECREF(r);
  int evs[] = {trc_ev_py_start, trc_ev_py_resume, trc_ev_py_return, trc_ev_py_yield,
               trc_ev_py_unwind, trc_ev_py_throw, trc_ev_call, trc_ev_c_return,
               trc_ev_c_raise};
  for (size_t i = 0; i < sizeof evs / sizeof evs[0]; i++) {
    r = trc_mon_call("register_callback", "(iiO)", tool, evs[i], Py_None);
    Py_XDECREF(r);
  }
  r = trc_mon_call("free_tool_id", "(i)", tool);
  Py_XDECREF(r);
  PyErr_Clear();
  PyErr_Restore(exc_type, exc_val, exc_tb);
}

static int trc_full_events(ProfileObject *p) {
  int ev = trc_ev_py_start | trc_ev_py_resume | trc_ev_py_return | trc_ev_py_yield |
           trc_ev_py_unwind | trc_ev_py_throw;
  if (p->builtins) ev |= trc_ev_call | trc_ev_c_return | trc_ev_c_raise;
  return ev;
}

/* Register the full callback set on tool. */
static int trc_register_full(ProfileObject *p, int tool) {
  if (trc_register(p, tool, trc_ev_py_start, 0) < 0 ||
      trc_register(p, tool, trc_ev_py_resume, 1) < 0 ||
      trc_register(p, tool, trc_ev_py_throw, 1) < 0 ||
      trc_register(p, tool, trc_ev_py_return, 2) < 0 ||
      trc_register(p, tool, trc_ev_py_yield, 2) < 0 ||
      trc_register(p, tool, trc_ev_py_unwind, 2) < 0)
    return -1;
  if (p->builtins &&
      (trc_register(p, tool, trc_ev_call, 3) < 0 || trc_register(p, tool, trc_ev_c_return, 4) < 0 ||
       trc_register(p, tool, trc_ev_c_raise, 4) < 0))
    return -1;
  return 0;
}

static void trc_focus_tool(ProfileObject *p, int on) {
  if (p->focus_tool_id < 0 || p->focus_tool_on == on) return;
  PyObject *exc_type, *exc_val, *exc_tb;
  PyErr_Fetch(&exc_type, &exc_val, &exc_tb);
  PyObject *r = trc_mon_call("set_events", "(ii)", p->focus_tool_id, on ? trc_full_events(p) : 0);
  if (r) p->focus_tool_on = on;
  else p->error = 1;
  Py_XDECREF(r);
  PyErr_Clear();
  PyErr_Restore(exc_type, exc_val, exc_tb);
}

static int trc_backend_start(ProfileObject *p) {
  if (trc_mon_init() < 0) return -1;
  trc_site_restarts = 0;
  int tool = p->req_tool_id >= 0 ? p->req_tool_id : 2; /* sys.monitoring.PROFILER_ID */
  if (trc_claim_tool(tool) < 0) return -1;
  p->tool_id = tool;
  p->callbacks = PyList_New(0);
  if (!p->callbacks) goto fail;
  if (!p->focus_glob) {
    if (trc_register_full(p, tool) < 0) goto fail;
    PyObject *r = trc_mon_call("set_events", "(ii)", tool, trc_full_events(p));
    if (!r) goto fail;
    Py_DECREF(r);
    return 0;
  }
  /* focus: a second, free tool id sees the subtrees while one is active */
  for (int cand = 3; cand < 3 + 6 && p->focus_tool_id < 0; cand++) {
    int id = cand % 6;
    if (id == tool) continue;
    PyObject *holder = trc_mon_call("get_tool", "(i)", id);
    if (!holder) goto fail;
    int free_id = holder == Py_None;
    Py_DECREF(holder);
    if (free_id && trc_claim_tool(id) == 0) p->focus_tool_id = id;
    PyErr_Clear();
  }
  if (p->focus_tool_id < 0) {
    PyErr_SetString(PyExc_RuntimeError,
                    "focus mode needs a second free sys.monitoring tool id and none is free");
    goto fail;
  }
  if (trc_register_full(p, p->focus_tool_id) < 0 ||
      trc_register(p, tool, trc_ev_py_start, 5) < 0 ||
      trc_register(p, tool, trc_ev_py_resume, 6) < 0)
    goto fail;
  PyObject *r = trc_mon_call("set_events", "(ii)", tool, trc_ev_py_start);
  if (!r) goto fail;
  Py_DECREF(r);
  return 0;
fail:
  if (p->focus_tool_id >= 0) trc_release_tool(p->focus_tool_id);
  p->focus_tool_id = -1;
  trc_release_tool(tool);
  p->tool_id = -1;
  Py_CLEAR(p->callbacks);
  return -1;
}

static void trc_backend_stop(ProfileObject *p) {
  if (p->tool_id >= 0) trc_release_tool(p->tool_id);
  if (p->focus_tool_id >= 0) trc_release_tool(p->focus_tool_id);
  p->tool_id = p->focus_tool_id = -1;
  p->focus_tool_on = 0;
  if (p->focus_glob || p->sites_disabled) {
    /* focus mode DISABLEd PY_START on unfocused code, full trace DISABLEd
     * single-callable CALL sites; those locations would stay disabled for
     * the next user of the tool id */
    if (trc_watched_names) PySet_Clear(trc_watched_names);
    p->sites_disabled = 0;
    PyObject *exc_type, *exc_val, *exc_tb;
    PyErr_Fetch(&exc_type, &exc_val, &exc_tb);
    PyObject *r = trc_mon_call("restart_events", "()");
    Py_XDECREF(r);
    PyErr_Clear();
    PyErr_Restore(exc_type, exc_val, exc_tb);
  }
  Py_CLEAR(p->callbacks);
}

static PyObject *trc_thread_hook_obj; /* unused on 3.12+ */

#else
/* ---- 3.8–3.11: PyEval_SetProfile ---------------------------------------- */

static void trc_focus_tool(ProfileObject *p, int on) {
  (void)p;
  (void)on;
}

static inline PyCodeObject *trc_frame_code(PyFrameObject *f) {
#if PY_VERSION_HEX >= 0x030B0000
  PyCodeObject *co = PyFrame_GetCode(f);
  Py_DECREF(co); /* the frame keeps it alive for this event */
  return co;
#else
  return f->f_code;
#endif
}

static inline PyObject *trc_frame_globals(PyFrameObject *f) {
#if PY_VERSION_HEX >= 0x030B0000
  PyObject *g = PyFrame_GetGlobals(f);
  Py_XDECREF(g); /* borrowed from the frame for this event */
  return g;
#else
  return f->f_globals;
#endif
}

static inline int trc_frame_lasti(PyFrameObject *f) {
#if PY_VERSION_HEX >= 0x030B0000
  return PyFrame_GetLasti(f);
#else
  return f->f_lasti;
#endif
}

/* Is this 'call' of a generator frame a resume (not its first start)? */
static inline int trc_gen_resumed(PyCodeObject *co, int lasti) {
#if PY_VERSION_HEX >= 0x030B0000
  /* 3.11 reports the call on a RESUME instruction whose oparg says why:
   * 0 = function start, 1..3 = after yield / yield from / await */
  if (lasti < 0) return 0;
  return (unsigned char)co->co_code_adaptive[lasti + 1] != 0;
#else
  (void)co;
  return lasti >= 0;
#endif
}

static int trc_profile_fn(PyObject *obj, PyFrameObject *frame, int what, PyObject *arg) {
  (void)obj;
  ProfileObject *p = trc_active;
  if (!p || !p->running) return 0;
  trc_thread *t = trc_thread_get(p);
  if (!t || t->paused) return 0;
  int64_t now;
  switch (what) {
  case PyTrace_CALL: {
    PyCodeObject *co = trc_frame_code(frame);
    now = trc_now(p);
    uint32_t flags = 0;
    /* a generator/coroutine frame that already ran is being resumed */
    if ((co->co_flags & (CO_GENERATOR | CO_COROUTINE | CO_ASYNC_GENERATOR)) &&
        trc_gen_resumed(co, trc_frame_lasti(frame)))
      flags = TRC_FR_RESUME;
    uint32_t fi = trc_code_lookup(p, co) & ~TRC_FI_SITES;
    if (!fi) fi = trc_code_func(p, co, trc_frame_globals(frame));
    trc_push(p, t, fi, co, flags, now);
    break;
  }
  case PyTrace_RETURN:
    if (t->depth == 0) break;
    trc_leave(p, t, trc_frame_code(frame), trc_now(p));
    break;
  case PyTrace_C_CALL: {
    if (!p->builtins) break;
    PyMethodDef *def = trc_builtin_def(arg);
    if (!def) break;
    if (p->focus_glob && t->focus_depth == 0) break;
    now = trc_now(p);
    uint32_t fi = trc_map_get(&p->func_map, (uint64_t)(uintptr_t)def);
    if (!fi) fi = trc_cfunc(p, arg, def);
    size_t depth = t->depth;
    trc_push(p, t, fi, def, TRC_FR_C, now);
    if (t->depth > depth) t->stack[depth].callable = arg;
    break;
  }
  case PyTrace_C_RETURN:
  case PyTrace_C_EXCEPTION: {
    if (!p->builtins || t->depth == 0) break;
    now = trc_now(p);
    const trc_frame *top = &t->stack[t->depth - 1];
    if ((top->flags & TRC_FR_C) && top->callable == arg) {
      trc_pop(p, t, now);
      break;
    }
    PyMethodDef *def = trc_builtin_def(arg);
    if (def) trc_leave(p, t, def, now);
    break;
  }
  default:
    break;
  }
  return 0;
}

static int trc_set_profile(PyThreadState *ts, Py_tracefunc fn) {
#if PY_VERSION_HEX >= 0x03090000
  return _PyEval_SetProfile(ts, fn, NULL);
#else
  PyObject *old = ts->c_profileobj;
  ts->c_profilefunc = NULL;
  ts->c_profileobj = NULL;
  ts->use_tracing = ts->c_tracefunc != NULL;
  Py_XDECREF(old);
  ts->c_profilefunc = fn;
  ts->c_profileobj = NULL;
  ts->use_tracing = (fn != NULL) || (ts->c_tracefunc != NULL);
  return 0;
#endif
}

/* threading.setprofile hook: the first event of a new thread installs the C
 * profile function on that thread, then counts that event if it is a call. */
static PyObject *trc_thread_hook(PyObject *self, PyObject *args) {
  (void)self;
  PyObject *frame, *event, *arg;
  if (!PyArg_ParseTuple(args, "OOO", &frame, &event, &arg)) return NULL;
  if (trc_set_profile(PyThreadState_Get(), trc_profile_fn) < 0) return NULL;
  if (PyFrame_Check(frame) && PyUnicode_Check(event) &&
      PyUnicode_CompareWithASCIIString(event, "call") == 0)
    trc_profile_fn(NULL, (PyFrameObject *)frame, PyTrace_CALL, arg);
  Py_RETURN_NONE;
}

static PyMethodDef trc_hook_def = {"_thread_hook", trc_thread_hook, METH_VARARGS, NULL};
static PyObject *trc_thread_hook_obj;

static int trc_threading_setprofile(PyObject *hook) {
  PyObject *threading = PyImport_ImportModule("threading");
  if (!threading) return -1;
  PyObject *r = PyObject_CallMethod(threading, "setprofile", "O", hook);
  Py_DECREF(threading);
  Py_XDECREF(r);
  return r ? 0 : -1;
}

static int trc_backend_start(ProfileObject *p) {
  if (!trc_thread_hook_obj) {
    trc_thread_hook_obj = PyCFunction_NewEx(&trc_hook_def, NULL, NULL);
    if (!trc_thread_hook_obj) return -1;
  }
  if (trc_threading_setprofile(trc_thread_hook_obj) < 0) return -1;
  PyThreadState *me = PyThreadState_Get();
  for (PyThreadState *ts = PyInterpreterState_ThreadHead(me->interp); ts;
       ts = PyThreadState_Next(ts)) {
    if (trc_set_profile(ts, trc_profile_fn) < 0) return -1;
  }
  (void)p;
  return 0;
}

static void trc_backend_stop(ProfileObject *p) {
  (void)p;
  PyObject *exc_type, *exc_val, *exc_tb;
  PyErr_Fetch(&exc_type, &exc_val, &exc_tb);
  PyThreadState *me = PyThreadState_Get();
  for (PyThreadState *ts = PyInterpreterState_ThreadHead(me->interp); ts;
       ts = PyThreadState_Next(ts))
    trc_set_profile(ts, NULL);
  trc_threading_setprofile(Py_None);
  PyErr_Clear();
  PyErr_Restore(exc_type, exc_val, exc_tb);
}
#endif

/* ===================================================================== */
/* ---- the Profile type ---------------------------------------------------- */

static void trc_reset(ProfileObject *p) {
  for (size_t i = 1; i < p->nfuncs; i++) {
    Py_XDECREF((PyObject *)p->funcs[i].ref);
    free(p->funcs[i].file);
    free(p->funcs[i].qualname);
  }
  free(p->funcs);
  p->funcs = NULL;
  p->nfuncs = p->capfuncs = 0;
  trc_map_free(&p->func_map);
  free(p->edges);
  p->edges = NULL;
  p->nedges = p->capedges = 0;
  trc_map_free(&p->edge_map);
  trc_map_free(&p->site_map);
  p->site_no_last = 0;
  for (size_t i = 0; i < p->nsite_globals; i++) Py_XDECREF(p->site_globals[i]);
  free(p->site_globals);
  p->site_globals = NULL;
  p->nsite_globals = 0;
  while (p->threads) {
    trc_thread *n = p->threads->next;
    trc_thread_free(p->threads);
    p->threads = n;
  }
  p->nthreads = 0;
  p->rec_head = p->rec_count = 0;
  p->mismatches = 0;
  p->error = 0;
  p->elapsed_ns = 0;
  p->cpu_total_ns = 0;
  /* index 0 of funcs is the thread root */
  p->funcs = calloc(256, sizeof *p->funcs);
  if (p->funcs) {
    p->capfuncs = 256;
    p->nfuncs = 1;
  }
}

static int Profile_init(ProfileObject *p, PyObject *args, PyObject *kw) {
  static char *kwlist[] = {"db", "clock", "focus", "builtins", "tool_id", "records", "label",
                           NULL};
  const char *db = NULL, *clock = "wall", *focus = NULL, *label = NULL;
  int builtins = 1, tool_id = -1;
  Py_ssize_t records = 1 << 20;
  if (!PyArg_ParseTupleAndKeywords(args, kw, "|zszpinz:Profile", kwlist, &db, &clock, &focus,
                                   &builtins, &tool_id, &records, &label))
    return -1;
  if (p->running) {
    PyErr_SetString(PyExc_RuntimeError, "Profile is enabled; disable it first");
    return -1;
  }
  if (strcmp(clock, "wall") == 0) {
    p->clock_id = CLOCK_MONOTONIC;
    p->clock_cpu = 0;
  } else if (strcmp(clock, "cpu") == 0) {
    p->clock_id = CLOCK_THREAD_CPUTIME_ID;
    p->clock_cpu = 1;
  } else {
    PyErr_Format(PyExc_ValueError, "clock must be 'wall' or 'cpu', not '%s'", clock);
    return -1;
  }
  if (tool_id < -1 || tool_id > 5) {
    PyErr_Format(PyExc_ValueError, "tool_id must be 0..5, not %d", tool_id);
    return -1;
  }
  if (records < 0) {
    PyErr_SetString(PyExc_ValueError, "records must be >= 0");
    return -1;
  }
  p->builtins = builtins;
  p->req_tool_id = tool_id;
  free(p->db_path);
  p->db_path = db ? trc_strdup(db) : NULL;
  free(p->label);
  p->label = label ? trc_strdup(label) : NULL;
  p->tool_id = p->focus_tool_id = -1;
  free(p->focus_glob);
  p->focus_glob = focus && *focus ? trc_strdup(focus) : NULL;
  free(p->recs);
  p->recs = NULL;
  p->rec_cap = 0;
  if (p->focus_glob && records > 0) {
    p->recs = malloc((size_t)records * sizeof *p->recs);
    if (!p->recs) {
      PyErr_NoMemory();
      return -1;
    }
    p->rec_cap = (size_t)records;
  }
  trc_reset(p);
  if (!p->funcs) {
    PyErr_NoMemory();
    return -1;
  }
  return 0;
}

static void Profile_dealloc(ProfileObject *p) {
  if (p->running) {
    p->running = 0;
    trc_backend_stop(p);
    if (trc_active == p) trc_active = NULL;
  }
  trc_reset(p);
  free(p->funcs);
  free(p->recs);
  free(p->focus_glob);
  free(p->db_path);
  free(p->label);
  Py_TYPE(p)->tp_free((PyObject *)p);
}

static int64_t trc_wall_ns(void) { return trc_clock(CLOCK_REALTIME); }

static PyObject *Profile_enable(ProfileObject *p, PyObject *noargs) {
  (void)noargs;
  if (p->running) Py_RETURN_NONE;
  if (trc_active) {
    PyErr_SetString(PyExc_RuntimeError, "another bifocal Profile is already enabled");
    return NULL;
  }
  if (!p->funcs) {
    PyErr_SetString(PyExc_RuntimeError, "Profile was not initialised");
    return NULL;
  }
  p->gen = trc_next_gen++;
  trc_active = p;
  if (p->start_wall_ns == 0) p->start_wall_ns = trc_wall_ns();
  if (trc_tsc_usable < 0) trc_tsc_usable = trc_detect_tsc();
  if (trc_extra == -2) {
    trc_extra = trc_request_extra(NULL);
    if (trc_extra < 0) {
      PyErr_Clear();
      trc_extra = -1;
    }
  }
  p->use_tsc = !p->clock_cpu && trc_tsc_usable;
  p->cpu_start_ns = trc_clock(CLOCK_PROCESS_CPUTIME_ID);
  p->iv_mono0 = trc_clock(CLOCK_MONOTONIC);
  p->iv_tsc0 = trc_rdtsc();
  if (p->start_mono_ns == 0) {
    p->start_mono_ns = p->iv_mono0;
    p->start_raw = trc_now(p);
  }
  if (trc_backend_start(p) < 0) {
    trc_active = NULL;
    return NULL;
  }
  p->running = 1;
  Py_RETURN_NONE;
}

static void trc_stop(ProfileObject *p) {
  p->running = 0;
  trc_backend_stop(p);
  trc_unwind_all(p);
  int64_t mono = trc_clock(CLOCK_MONOTONIC);
  p->tsc_ticks += trc_rdtsc() - p->iv_tsc0;
  p->tsc_ns += mono - p->iv_mono0;
  p->cpu_total_ns += trc_clock(CLOCK_PROCESS_CPUTIME_ID) - p->cpu_start_ns;
  p->elapsed_ns = mono - p->start_mono_ns;
  if (trc_active == p) trc_active = NULL;
}

static long long trc_write_session(ProfileObject *p, const char *db, long long session,
                                   const char *label, const char *command, const char *status,
                                   double ttl_s, const char *commit, const char *extra);

/* Stop; with a database given at construction, write the session there. */
static PyObject *Profile_disable(ProfileObject *p, PyObject *noargs) {
  (void)noargs;
  if (!p->running) Py_RETURN_NONE;
  trc_stop(p);
  if (p->db_path &&
      trc_write_session(p, p->db_path, 0, p->label, NULL, "complete", 0, NULL, NULL) < 0)
    return NULL;
  Py_RETURN_NONE;
}

static PyObject *Profile_enter(ProfileObject *p, PyObject *noargs) {
  if (!Profile_enable(p, noargs)) return NULL;
  Py_INCREF(p);
  return (PyObject *)p;
}

static PyObject *Profile_exit(ProfileObject *p, PyObject *args) {
  (void)args;
  PyObject *r = Profile_disable(p, NULL);
  if (!r) return NULL;
  Py_DECREF(r);
  Py_RETURN_FALSE;
}

/* Pause/resume counting on the calling thread (the runner joins threads). */
static PyObject *Profile_pause_thread(ProfileObject *p, PyObject *arg) {
  int on = PyObject_IsTrue(arg);
  if (on < 0) return NULL;
  if (!p->running) Py_RETURN_NONE;
  trc_thread *t = trc_thread_get(p);
  if (t) t->paused = on;
  Py_RETURN_NONE;
}

/* Enable, run code in globals, disable: no bootstrap frame is ever seen. */
static PyObject *Profile_run_code(ProfileObject *p, PyObject *args) {
  PyObject *code, *globals;
  if (!PyArg_ParseTuple(args, "O!O!:run_code", &PyCode_Type, &code, &PyDict_Type, &globals))
    return NULL;
  if (!p->running) {
    PyObject *r = Profile_enable(p, NULL);
    if (!r) return NULL;
    Py_DECREF(r);
  }
  PyObject *r = PyEval_EvalCode(code, globals, globals);
  /* whatever the caller does next (exception handling, joining threads) is
   * bootstrap work, not the program: stop counting on this thread now */
  if (p->running) {
    trc_thread *t = trc_thread_get(p);
    if (t) t->paused = 1;
  }
  return r;
}

static PyObject *trc_func_name_obj(bf_trc_func *f) {
  if (f->is_c || f->file) return NULL;
  return NULL;
}

/* ns per raw clock unit (1 unless the TSC was read). */
static double trc_factor(const ProfileObject *p) {
  if (!p->use_tsc || p->tsc_ticks <= 0) return 1.0;
  return (double)p->tsc_ns / (double)p->tsc_ticks;
}

static inline int64_t trc_scale(int64_t v, double k) {
  return k == 1.0 ? v : (int64_t)((double)v * k + 0.5);
}

/* Fill names of Python functions from their code objects (write/stats time). */
static void trc_fill_names(ProfileObject *p) {
  for (size_t i = 1; i < p->nfuncs; i++) {
    bf_trc_func *f = &p->funcs[i];
    if (f->is_c || f->file) continue;
    PyCodeObject *co = (PyCodeObject *)f->ref;
    f->file = trc_strdup(PyUnicode_AsUTF8(co->co_filename));
    f->qualname = trc_strdup(trc_code_qualname(co));
    f->firstlineno = co->co_firstlineno;
    PyErr_Clear();
  }
  (void)trc_func_name_obj;
}

/* stats() -> {"functions": [...], "edges": [...], "mismatches": n, ...} */
static PyObject *Profile_stats(ProfileObject *p, PyObject *noargs) {
  (void)noargs;
  if (p->running) {
    PyErr_SetString(PyExc_RuntimeError, "disable the Profile before reading its stats");
    return NULL;
  }
  trc_fill_names(p);
  double k = trc_factor(p);
  PyObject *funcs = PyList_New(0), *edges = PyList_New(0), *out = NULL;
  if (!funcs || !edges) goto done;
  for (size_t i = 1; i < p->nfuncs; i++) {
    bf_trc_func *f = &p->funcs[i];
    if (f->calls == 0 && f->resumes == 0 && f->self_ns == 0) continue; /* seen, not counted */
    PyObject *d = Py_BuildValue(
        "{s:s,s:s,s:L,s:L,s:L,s:L,s:L,s:L,s:L,s:L,s:O}", "file", f->file ? f->file : "?",
        "qualname", f->qualname ? f->qualname : "?", "firstlineno", (long long)f->firstlineno,
        "calls", (long long)f->calls, "primitive_calls", (long long)f->primitive_calls, "resumes",
        (long long)f->resumes, "self_ns", (long long)trc_scale(f->self_ns, k), "total_ns",
        (long long)trc_scale(f->total_ns, k), "records_kept", (long long)f->records_kept, "records_dropped",
        (long long)f->records_dropped, "focus", f->focus ? Py_True : Py_False);
    if (!d || PyList_Append(funcs, d) < 0) {
      Py_XDECREF(d);
      goto done;
    }
    Py_DECREF(d);
  }
  for (size_t i = 1; i < p->nedges; i++) {
    bf_trc_edge *e = &p->edges[i];
    if (e->calls == 0 && e->self_ns == 0) continue;
    bf_trc_func *cr = e->caller ? &p->funcs[e->caller] : NULL, *ce = &p->funcs[e->callee];
    PyObject *caller = cr ? Py_BuildValue("(ssL)", cr->file ? cr->file : "?",
                                          cr->qualname ? cr->qualname : "?",
                                          (long long)cr->firstlineno)
                          : (Py_INCREF(Py_None), Py_None);
    PyObject *callee = Py_BuildValue("(ssL)", ce->file ? ce->file : "?",
                                     ce->qualname ? ce->qualname : "?", (long long)ce->firstlineno);
    /* caller/callee are (file, qualname, firstlineno); caller None = thread root */
    PyObject *d = caller && callee
                      ? Py_BuildValue("{s:O,s:O,s:L,s:L,s:L,s:L}", "caller", caller, "callee",
                                      callee, "calls", (long long)e->calls, "primitive_calls",
                                      (long long)e->primitive_calls, "self_ns",
                                      (long long)trc_scale(e->self_ns, k), "total_ns",
                                      (long long)trc_scale(e->total_ns, k))
                      : NULL;
    Py_XDECREF(caller);
    Py_XDECREF(callee);
    if (!d || PyList_Append(edges, d) < 0) {
      Py_XDECREF(d);
      goto done;
    }
    Py_DECREF(d);
  }
  out = Py_BuildValue("{s:O,s:O,s:L,s:I,s:L,s:L,s:i}", "functions", funcs, "edges", edges,
                      "mismatches", (long long)p->mismatches, "threads", p->nthreads,
                      "records", (long long)p->rec_count, "elapsed_ns",
                      (long long)p->elapsed_ns, "partial", p->error);
done:
  Py_XDECREF(funcs);
  Py_XDECREF(edges);
  return out;
}

static char *trc_json_escape(const char *s) { return bf_json_escape(s); }

/* write(db, session=0, label=None, command=None, status="complete", ttl_s=0,
 *       commit=None, extra=None) -> session id */
static PyObject *Profile_write(ProfileObject *p, PyObject *args, PyObject *kw) {
  static char *kwlist[] = {"db", "session", "label", "command", "status", "ttl_s", "commit",
                           "extra", NULL};
  const char *db, *label = NULL, *command = NULL, *status = "complete", *commit = NULL,
                  *extra = NULL;
  long long session = 0;
  double ttl_s = 0;
  if (!PyArg_ParseTupleAndKeywords(args, kw, "s|Lzzzdzz:write", kwlist, &db, &session, &label,
                                   &command, &status, &ttl_s, &commit, &extra))
    return NULL;
  if (p->running) trc_stop(p);
  long long sid = trc_write_session(p, db, session, label ? label : p->label, command, status,
                                    ttl_s, commit, extra);
  if (sid < 0) return NULL;
  return PyLong_FromLongLong(sid);
}

static long long trc_write_session(ProfileObject *p, const char *db, long long session,
                                   const char *label, const char *command, const char *status,
                                   double ttl_s, const char *commit, const char *extra) {
  trc_fill_names(p);

  /* ring contents, oldest first */
  bf_trc_rec *recs = NULL;
  bf_trc_thread_info *threads = calloc(p->nthreads ? p->nthreads : 1, sizeof *threads);
  if (p->rec_count) recs = malloc(p->rec_count * sizeof *recs);
  if (!threads || (p->rec_count && !recs)) {
    free(threads);
    free(recs);
    PyErr_NoMemory();
    return -1;
  }
  double k = trc_factor(p);
  for (size_t i = 0; i < p->rec_count; i++) {
    recs[i] = p->recs[(p->rec_head + i) % p->rec_cap];
    recs[i].duration_ns = trc_scale(recs[i].duration_ns, k);
    if (!p->clock_cpu) recs[i].start_ns = trc_scale(recs[i].start_ns, k);
  }
  bf_trc_func *sfuncs = malloc((p->nfuncs ? p->nfuncs : 1) * sizeof *sfuncs);
  bf_trc_edge *sedges = malloc((p->nedges ? p->nedges : 1) * sizeof *sedges);
  if (!sfuncs || !sedges) {
    free(sfuncs);
    free(sedges);
    free(threads);
    free(recs);
    PyErr_NoMemory();
    return -1;
  }
  for (size_t i = 0; i < p->nfuncs; i++) {
    sfuncs[i] = p->funcs[i];
    sfuncs[i].self_ns = trc_scale(sfuncs[i].self_ns, k);
    sfuncs[i].total_ns = trc_scale(sfuncs[i].total_ns, k);
  }
  for (size_t i = 0; i < p->nedges; i++) {
    sedges[i] = p->edges[i];
    sedges[i].self_ns = trc_scale(sedges[i].self_ns, k);
    sedges[i].total_ns = trc_scale(sedges[i].total_ns, k);
  }
  for (trc_thread *t = p->threads; t; t = t->next) {
    threads[t->index].native_tid = t->native_tid;
    threads[t->index].name = t->name;
  }
  bf_trc_result res = {sfuncs, p->nfuncs, sedges, p->nedges, recs, p->rec_count, threads,
                       p->nthreads};

  /* the interpreter running now, not the headers this was built with: one
   * extension suffix serves e.g. pyenv's 3.11.7 and Debian's 3.11.2 */
  char pyver[64];
  snprintf(pyver, sizeof pyver, "%.*s", (int)strcspn(Py_GetVersion(), " "), Py_GetVersion());
  const char *build = "release";
#ifdef Py_DEBUG
  build = "debug";
#endif
  char *fglob = p->focus_glob ? trc_json_escape(p->focus_glob) : NULL;
  size_t extra_len = 1024 + (fglob ? strlen(fglob) : 0) + (extra ? strlen(extra) : 0);
  char *extra_json = malloc(extra_len);
  if (!extra_json) {
    free(fglob);
    free(threads);
    free(recs);
    free(sfuncs);
    free(sedges);
    PyErr_NoMemory();
    return -1;
  }
  snprintf(extra_json, extra_len,
           "{\"mismatches\":%lld,\"threads\":%u,\"builtins\":%s,\"backend\":\"%s\","
           "\"timer\":\"%s\","
           "\"tool_id\":%d,\"focus\":%s%s%s,\"records_capacity\":%zu,\"partial\":%s%s%s}",
           (long long)p->mismatches, p->nthreads, p->builtins ? "true" : "false",
           BF_TRC_MONITORING ? "sys.monitoring" : "setprofile",
           p->clock_cpu ? "thread_cputime" : (p->use_tsc ? "tsc" : "clock_monotonic"),
           p->req_tool_id >= 0 ? p->req_tool_id : (BF_TRC_MONITORING ? 2 : -1),
           fglob ? "\"" : "", fglob ? fglob : "null", fglob ? "\"" : "", p->rec_cap,
           p->error ? "true" : "false", extra && *extra ? "," : "", extra && *extra ? extra : "");
  free(fglob);

  bf_trc_meta meta = {0};
  meta.session_id = session;
  meta.clock = p->clock_cpu ? "cpu" : "wall";
  meta.mode = p->focus_glob ? "focus" : "trace";
  meta.start_ns = p->start_wall_ns;
  meta.duration_ns = p->elapsed_ns;
  meta.pid = (int64_t)getpid();
  meta.command = command;
  meta.python_version = pyver;
  meta.python_build = build;
  meta.label = label;
  meta.commit = commit;
  meta.status = status;
  meta.expires_at_ns = ttl_s > 0 ? trc_wall_ns() + (int64_t)(ttl_s * 1e9) : 0;
  meta.profiler_cpu_ns = 0;
  meta.extra_json = extra_json;

  int64_t sid = 0;
  char err[512] = "";
  int rc;
  Py_BEGIN_ALLOW_THREADS
  rc = bf_trc_write(db, &res, &meta, &sid, err, sizeof err);
  Py_END_ALLOW_THREADS
  free(extra_json);
  free(threads);
  free(recs);
  free(sfuncs);
  free(sedges);
  if (rc < 0) {
    PyErr_Format(PyExc_OSError, "could not write the trace to %s", err);
    return -1;
  }
  p->session_id = (long long)sid;
  return (long long)sid;
}

static PyObject *Profile_get_running(ProfileObject *p, void *c) {
  (void)c;
  return PyBool_FromLong(p->running);
}

static PyMethodDef Profile_methods[] = {
    {"enable", (PyCFunction)Profile_enable, METH_NOARGS, "Start tracing (all threads)."},
    {"disable", (PyCFunction)Profile_disable, METH_NOARGS, "Stop tracing."},
    {"__enter__", (PyCFunction)Profile_enter, METH_NOARGS, NULL},
    {"__exit__", (PyCFunction)Profile_exit, METH_VARARGS, NULL},
    {"stats", (PyCFunction)Profile_stats, METH_NOARGS, "Collected totals as plain Python data."},
    {"write", (PyCFunction)(void (*)(void))Profile_write, METH_VARARGS | METH_KEYWORDS,
     "write(db, session=0, label=None, ...) -> session id: store a traced session."},
    {"run_code", (PyCFunction)Profile_run_code, METH_VARARGS,
     "run_code(code, globals): enable, exec code, return; tracing stays enabled for other\n"
     "threads (the calling thread stops counting) until disable()."},
    {"_pause_thread", (PyCFunction)Profile_pause_thread, METH_O, NULL},
    {NULL, NULL, 0, NULL},
};

static PyObject *Profile_get_session_id(ProfileObject *p, void *c) {
  (void)c;
  if (!p->session_id) Py_RETURN_NONE;
  return PyLong_FromLongLong(p->session_id);
}

static PyGetSetDef Profile_getset[] = {
    {"running", (getter)Profile_get_running, NULL, "tracing is enabled", NULL},
    {"session_id", (getter)Profile_get_session_id, NULL, "id of the last session written", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject ProfileType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "_bifocal_trace.Profile",
    .tp_basicsize = sizeof(ProfileObject),
    .tp_dealloc = (destructor)Profile_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Profile(clock='wall', focus=None, builtins=True, tool_id=-1, records=1<<20)\n"
              "Exact per-function and per-edge call accounting on every thread.",
    .tp_methods = Profile_methods,
    .tp_getset = Profile_getset,
    .tp_init = (initproc)Profile_init,
    .tp_new = PyType_GenericNew,
};

/* _discard_session(db, id): remove a session that never started (the runner
 * could not set the program up), so nothing is left half-written. */
static PyObject *trc_discard_session(PyObject *self, PyObject *args) {
  (void)self;
  const char *db;
  long long id;
  if (!PyArg_ParseTuple(args, "sL:_discard_session", &db, &id)) return NULL;
  bf_store *s = NULL;
  const char *msg = NULL;
  int rc;
  Py_BEGIN_ALLOW_THREADS
  rc = bf_store_open(db, 0, &s, &msg);
  if (rc == 0) rc = bf_store_session_delete(s, (int64_t)id);
  Py_END_ALLOW_THREADS
  if (rc < 0) {
    PyErr_Format(PyExc_OSError, "could not discard session %lld in %s: %s", id, db,
                 s ? bf_store_errmsg(s) : (msg ? msg : strerror(-rc)));
    bf_store_close(s);
    return NULL;
  }
  bf_store_close(s);
  Py_RETURN_NONE;
}

static int trc_terminated;

/* SIGTERM handler for the runner: a C function so no frame is traced. */
static PyObject *trc_sigterm(PyObject *self, PyObject *args) {
  (void)self;
  (void)args;
  trc_terminated = 1;
  PyObject *code = PyLong_FromLong(128 + 15);
  if (code) PyErr_SetObject(PyExc_SystemExit, code);
  Py_XDECREF(code);
  return NULL;
}

static PyObject *trc_was_terminated(PyObject *self, PyObject *noargs) {
  (void)self;
  (void)noargs;
  return PyBool_FromLong(trc_terminated);
}

static PyMethodDef module_methods[] = {
    {"_sigterm", trc_sigterm, METH_VARARGS, NULL},
    {"_terminated", trc_was_terminated, METH_NOARGS, NULL},
    {"_discard_session", trc_discard_session, METH_VARARGS, NULL},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef trc_module = {
    PyModuleDef_HEAD_INIT, "_bifocal_trace",
    "bifocal's tracing collector (C). Use the bifocal_trace module.", -1, module_methods,
    NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__bifocal_trace(void) {
  if (PyType_Ready(&ProfileType) < 0) return NULL;
  PyObject *m = PyModule_Create(&trc_module);
  if (!m) return NULL;
  Py_INCREF(&ProfileType);
  if (PyModule_AddObject(m, "Profile", (PyObject *)&ProfileType) < 0) {
    Py_DECREF(&ProfileType);
    Py_DECREF(m);
    return NULL;
  }
  PyModule_AddStringConstant(m, "backend", BF_TRC_MONITORING ? "sys.monitoring" : "setprofile");
  PyModule_AddStringConstant(m, "version", BF_VERSION);
  (void)trc_thread_hook_obj;
  return m;
}
