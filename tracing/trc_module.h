/* trc_module.h — what the collector's Python-facing files share: the Profile
 * object, the per-thread state lookup, function identity (code objects and
 * builtins to function indexes), and the backend interface that
 * trc_monitoring.c (3.12+) or trc_setprofile.c (3.8–3.11) implements.
 * Everything here runs with the GIL held.
 */
#ifndef BF_TRC_MODULE_H
#define BF_TRC_MODULE_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>
#include <time.h>
#if defined(__x86_64__)
#include <x86intrin.h>
#define TRC_HAVE_TSC 1
#else
#define TRC_HAVE_TSC 0
#endif

#include "trc_stack.h"

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

#pragma GCC visibility push(hidden)

typedef struct ProfileObject {
  PyObject_HEAD
  trc_acct acct;     /* functions, edges, records (plain C, trc_stack.h) */
  int running;
  uint64_t gen;
  clockid_t clock_id;
  int builtins;
  int tool_id;       /* 3.12+: the tool id in use (-1 when not registered) */
  int req_tool_id;
  int focus_tool_id; /* 3.12+ focus: the tool that sees focus subtrees */
  int focus_tool_on;
  char *focus_glob;  /* NULL = trace everything */
  trc_thread *threads;
  uint32_t nthreads;
  int64_t start_wall_ns, elapsed_ns;
  int use_tsc;              /* wall clock read from the invariant TSC, scaled at output */
  int64_t iv_tsc0, iv_mono0; /* current enabled interval's start */
  int64_t tsc_ticks, tsc_ns; /* TSC ticks and CLOCK_MONOTONIC ns over enabled intervals */
  int64_t cpu_start_ns, cpu_total_ns;
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
  int memory;           /* trace --memory: hook the allocators while enabled (trc_memory.c) */
  struct trc_mem_res *mem; /* memory results of the last enabled interval, NULL = none */
} ProfileObject;

extern PyTypeObject ProfileType;
extern ProfileObject *trc_active; /* at most one enabled profiler per process */

/* initial-exec: one TLS read per event instead of a __tls_get_addr call */
typedef struct trc_tls_state {
  trc_thread *t;
  uint64_t gen;
} trc_tls_state;
extern _Thread_local __attribute__((tls_model("initial-exec"))) trc_tls_state trc_tls;

static inline int64_t trc_rdtsc(void) {
#if TRC_HAVE_TSC
  return (int64_t)__rdtsc();
#else
  return 0;
#endif
}

/* The session clock in raw units (TSC ticks or ns). */
#define trc_now(p) ((p)->use_tsc ? trc_rdtsc() : trc_clock((p)->clock_id))

/* The calling thread's state for p, created on first sight (NULL: no memory). */
trc_thread *trc_thread_new(ProfileObject *p);
static inline trc_thread *trc_thread_get(ProfileObject *p) {
  if (trc_tls.gen == p->gen && trc_tls.t) return trc_tls.t;
  return trc_thread_new(p);
}

/* ---- function identity (trc_module.c) ---- */

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
extern Py_ssize_t trc_extra; /* extra slot index: -2 not requested, -1 none free */

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

/* Python function index for code; globals (may be NULL) decide focus. 0 when
 * out of memory (p->acct.error set). */
uint32_t trc_code_func(ProfileObject *p, PyCodeObject *co, PyObject *globals);

/* Does module-of-globals:qualname match the focus glob? */
int trc_focus_match(ProfileObject *p, PyObject *globals, const char *qualname, const char *file);

const char *trc_code_qualname(PyCodeObject *co);

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

/* Function index of builtin callable with method def def (added if new). */
uint32_t trc_cfunc(ProfileObject *p, PyObject *callable, PyMethodDef *def);

/* Push builtin callable (def: its trc_builtin_def) on t at now. */
static inline void trc_push_c(ProfileObject *p, trc_thread *t, PyObject *callable,
                              PyMethodDef *def, int64_t now) {
  uint32_t fi = trc_func_find(&p->acct, def);
  if (!fi) fi = trc_cfunc(p, callable, def);
  size_t depth = t->depth;
  trc_push(&p->acct, t, fi, def, TRC_FR_C, now);
  if (t->depth > depth) t->stack[depth].callable = callable;
}

/* ---- the backend: trc_monitoring.c (3.12+) or trc_setprofile.c ---- */

/* Start delivering events to p on every thread; -1 with a Python error. */
int trc_backend_start(ProfileObject *p);
/* Stop delivering events; never fails, keeps any pending exception. */
void trc_backend_stop(ProfileObject *p);
/* Release the backend's per-profile state (sites, globals). */
void trc_backend_reset(ProfileObject *p);
/* trc_acct's on_focus hook (ctx: the Profile). */
void trc_backend_on_focus(void *ctx, int on);

#pragma GCC visibility pop

#endif
