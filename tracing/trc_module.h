/* trc_module.h — what the collector's Python-facing files share: the
 * collector's state (trc_state, one instance, passed as a pointer), the
 * Profile object, the per-thread state lookup, function identity (code
 * objects and builtins to function indexes), and the backend interface that
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
#include "trc_tasks.h"

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

/* ---- the collector's state ------------------------------------------------
 *
 * Everything the collector keeps for the whole process, in one struct: the
 * root instance belongs to trc_module.c (trc_state_root), every Profile
 * points at it (p->st), and every function that needs it takes it as a
 * pointer. Left outside: the per-thread cache trc_tls below (thread-local by
 * nature) and the allocator hooks' own struct in trc_memory.c. */

typedef struct ProfileObject ProfileObject;

/* 3.12+: opcode numbers of the headers the extension is built against, -1
 * where that version has no such opcode (trc_monitoring.c's CALL-site walk). */
typedef struct trc_opcodes {
  int cache, ext, call, call_kw, kw_names, load_global, load_fast2, load_fast_borrow2, load_attr,
      binary_op, binary_subscr, compare_op, build_tuple, build_list;
  unsigned char push1[256]; /* opcodes that push one value and pop none */
} trc_opcodes;

/* 3.12+: the sys.monitoring backend (trc_monitoring.c). */
typedef struct trc_mon_state {
  PyObject *mon;     /* sys.monitoring (strong), NULL before the first enable */
  PyObject *disable; /* sys.monitoring.DISABLE (strong) */
  int ev_py_start, ev_py_resume, ev_py_return, ev_py_yield, ev_py_unwind, ev_py_throw, ev_call,
      ev_c_return, ev_c_raise; /* sys.monitoring.events bits */
  int sites_off;              /* BIFOCAL_TRACE_ALL_CALLS (or opcodes unknown): no DISABLEd sites; -1 unread */
  trc_opcodes op;
  int watcher_id;             /* dict watcher: -1 none yet, -2 none available */
  PyObject *watched_names;    /* set: names whose sites are DISABLEd */
  int site_restarts;          /* restart_events() calls since enable */
} trc_mon_state;

/* 3.8-3.11: the PyEval_SetProfile backend (trc_setprofile.c). */
typedef struct trc_sp_state {
  int frame_direct;           /* 3.11: its frame layout matched the running interpreter */
  PyObject *start_new_thread; /* _thread.start_new_thread (strong) */
  PyObject *thread_hook;      /* the threading._profile_hook we set (strong) */
} trc_sp_state;

typedef struct trc_state {
  ProfileObject *active;  /* at most one enabled profiler per process */
  uint64_t next_gen;      /* the next Profile generation (trc_tls, code extra slots) */
  Py_ssize_t code_extra;  /* code extra slot index: -2 not requested, -1 none free */
  int tsc_usable;         /* invariant TSC: -1 not checked yet */
  int terminated;         /* the runner's SIGTERM handler ran */
  trc_mon_state mon;
  trc_sp_state sp;
  trc_tasks tasks;        /* asyncio await sites and task lifetimes (trc_tasks.h) */
} trc_state;

/* The root instance, defined in trc_module.c. Only entry points CPython
 * calls without a context pointer (the setprofile function, the dict watcher,
 * module functions) and new Profiles reach for it, through trc_state_root
 * (inline: the setprofile function asks on every event); everything else is
 * handed a pointer. */
extern trc_state trc_root;
static inline trc_state *trc_state_root(void) { return &trc_root; }

struct ProfileObject {
  PyObject_HEAD
  trc_acct acct;     /* functions, edges, records (plain C, trc_stack.h) */
  int running;
  int site_calls;         /* 3.12+: CALLs of non-builtins may DISABLE their site (full trace, sites on) */
  uint64_t gen;
  Py_ssize_t code_extra;  /* st->code_extra while enabled (read on every start) */
  trc_state *st;          /* the collector's state (the root) */
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
};

extern PyTypeObject ProfileType;

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

/* in the slot's function index: this code has DISABLEd CALL sites, so a start
 * or resume checks it runs under the globals they were decided for */
#define TRC_FI_SITES 0x80000000u

static inline void trc_code_remember(ProfileObject *p, PyCodeObject *co, uint32_t fi) {
  if (p->code_extra >= 0 && fi &&
      trc_code_set_extra((PyObject *)co, p->code_extra,
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
  Py_ssize_t slot = p->code_extra;
  if (ex && slot >= 0 && slot < ex->ce_size) {
    uintptr_t v = (uintptr_t)ex->ce_extras[slot];
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
