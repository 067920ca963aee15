/* trc_module.c — the `_bifocal_trace` extension: the Profile type and module.
 *
 * Exact per-function and per-edge call accounting on every thread: the
 * backend (trc_monitoring.c on 3.12+, trc_setprofile.c before) feeds the
 * shadow stacks of trc_stack.c; this file keeps per-thread state, turns code
 * objects and builtins into function indexes, and reads the results out as
 * Python data or into the store (trc_write.c). Built once per Python.
 */
#include "trc_module.h"
#include "jsonw.h"
#include "trc_memory.h"
#include "trc_tasks.h"

#include <errno.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <stdint.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "ident.h"
#include "store.h"
#include "trace_run.h"

/* The collector's state (trc_module.h; read through trc_state_root); the
 * tasks' tables get their slot sizes when the module first loads. */
trc_state trc_root = {
    .next_gen = 1,
    .code_extra = -2,
    .tsc_usable = -1,
    .mon = {.sites_off = -1, .watcher_id = -1},
};

_Thread_local __attribute__((tls_model("initial-exec"))) trc_tls_state trc_tls;

/* The wall clock is CLOCK_MONOTONIC; where the CPU has an invariant TSC
 * (constant_tsc + nonstop_tsc) it is read with rdtsc (about a third of the
 * cost of clock_gettime here) and scaled to ns against CLOCK_MONOTONIC over
 * the enabled intervals. BIFOCAL_TRACE_NO_TSC=1 forces clock_gettime. */

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

static char *trc_strdup(const char *s) {
  if (!s) return NULL;
  size_t n = strlen(s) + 1;
  char *d = malloc(n);
  if (d) memcpy(d, s, n);
  return d;
}

/* A name of a code object as the sampler reads it (sampling/walker.c
 * smp_read_str), so the two lenses join on it: UTF-8, NUL as '?', a lone
 * surrogate as U+FFFD, cut after TRC_NAME_MAX code points with "…" appended.
 * NULL when s is no str (or out of memory). Caller frees. */
#define TRC_NAME_MAX 4096
static char *trc_name_dup(PyObject *s) {
  if (!s || !PyUnicode_Check(s)) return NULL;
#if PY_VERSION_HEX < 0x030C0000
  if (PyUnicode_READY(s) < 0) {
    PyErr_Clear();
    return NULL;
  }
#endif
  Py_ssize_t len = PyUnicode_GET_LENGTH(s), n = len > TRC_NAME_MAX ? TRC_NAME_MAX : len;
  int kind = PyUnicode_KIND(s);
  const void *data = PyUnicode_DATA(s);
  char *out = malloc((size_t)n * 4 + 4);
  if (!out) return NULL;
  size_t o = 0;
  for (Py_ssize_t i = 0; i < n; i++) {
    Py_UCS4 c = PyUnicode_READ(kind, data, i);
    if (c < 0x80) {
      out[o++] = c ? (char)c : '?';
    } else if (c < 0x800) {
      out[o++] = (char)(0xc0 | (c >> 6));
      out[o++] = (char)(0x80 | (c & 63));
    } else if (c < 0x10000) {
      if (c >= 0xd800 && c <= 0xdfff) c = 0xfffd;
      out[o++] = (char)(0xe0 | (c >> 12));
      out[o++] = (char)(0x80 | ((c >> 6) & 63));
      out[o++] = (char)(0x80 | (c & 63));
    } else {
      out[o++] = (char)(0xf0 | (c >> 18));
      out[o++] = (char)(0x80 | ((c >> 12) & 63));
      out[o++] = (char)(0x80 | ((c >> 6) & 63));
      out[o++] = (char)(0x80 | (c & 63));
    }
  }
  if (len > n) { /* U+2026: cut here */
    out[o++] = (char)0xe2;
    out[o++] = (char)0x80;
    out[o++] = (char)0xa6;
  }
  out[o] = 0;
  return out;
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

trc_thread *trc_thread_new(ProfileObject *p) {
  trc_thread *t = trc_thread_alloc();
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


/* ---- function identity ---------------------------------------------------- */

/* Module name of a code object's globals, for focus matching; borrowed frame. */
int trc_focus_match(ProfileObject *p, PyObject *globals, const char *qualname, const char *file) {
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

const char *trc_code_qualname(PyCodeObject *co) {
#if PY_VERSION_HEX >= 0x030B0000
  return PyUnicode_AsUTF8(co->co_qualname);
#else
  return PyUnicode_AsUTF8(co->co_name);
#endif
}

/* Add function key, kept alive by a new reference to ref; 0 when out of memory. */
static uint32_t trc_func_add_ref(ProfileObject *p, const void *key, PyObject *ref, int is_c) {
  uint32_t idx = trc_func_add(&p->acct, key, ref, is_c);
  if (idx) Py_INCREF(ref);
  return idx;
}

uint32_t trc_code_func(ProfileObject *p, PyCodeObject *co, PyObject *globals) {
  uint32_t idx = trc_func_find(&p->acct, co);
  if (idx) {
    trc_code_remember(p, co, idx);
    return idx;
  }
  idx = trc_func_add_ref(p, co, (PyObject *)co, 0);
  if (!idx) {
    p->acct.error = 1;
    return 0;
  }
  trc_code_remember(p, co, idx);
  if (p->focus_glob)
    p->acct.funcs[idx].focus =
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
  const char *ms = mod && PyUnicode_Check(mod) ? PyUnicode_AsUTF8(mod) : NULL;
  const char *qs = qn && PyUnicode_Check(qn) ? PyUnicode_AsUTF8(qn) : t->tp_name;
  PyErr_Clear();
  char *out = bf_ident_builtin(ms, qs, meth);
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
    return bf_ident_builtin(ms, NULL, def->ml_name);
  }
  PyTypeObject *t = NULL;
  if (PyType_Check(self)) t = trc_defining_type((PyTypeObject *)self, def);
  if (!t) t = trc_defining_type(Py_TYPE(self), def);
  if (!t) t = PyType_Check(self) ? (PyTypeObject *)self : Py_TYPE(self);
  return trc_type_name(t, def->ml_name);
}

uint32_t trc_cfunc(ProfileObject *p, PyObject *callable, PyMethodDef *def) {
  uint32_t idx = trc_func_find(&p->acct, def);
  if (idx) return idx;
  idx = trc_func_add_ref(p, def, callable, 1);
  if (!idx) {
    p->acct.error = 1;
    return 0;
  }
  bf_trc_func *f = &p->acct.funcs[idx];
  f->file = trc_strdup(BF_IDENT_BUILTIN);
  f->qualname = trc_cfunc_name(callable, def);
  f->firstlineno = 0;
  return idx;
}

/* Unwind every thread's stack as if all frames returned now (stop). */
static void trc_unwind_all(ProfileObject *p) {
  for (trc_thread *t = p->threads; t; t = t->next) {
    int64_t now = trc_now(p);
    /* thread CPU clocks of other threads are not readable here: close their
     * frames at their last known time (child time keeps totals consistent) */
    if (p->acct.clock_cpu && !(trc_tls.t == t && trc_tls.gen == p->gen))
      now = t->depth ? t->stack[t->depth - 1].t0 : 0;
    trc_thread_unwind(&p->acct, t, now);
  }
}

/* ---- the Profile type ---------------------------------------------------- */

/* Empty every table and thread; 0, or -1 (no memory for the function table). */
static int trc_reset(ProfileObject *p) {
  for (size_t i = 1; i < p->acct.nfuncs; i++) Py_XDECREF((PyObject *)p->acct.funcs[i].ref);
  trc_backend_reset(p);
  while (p->threads) {
    trc_thread *n = p->threads->next;
    trc_thread_free(p->threads);
    p->threads = n;
  }
  p->nthreads = 0;
  p->elapsed_ns = 0;
  p->cpu_total_ns = 0;
  trc_mem_free(p);
  return trc_acct_reset(&p->acct) < 0 ? -1 : 0;
}

static int Profile_init(ProfileObject *p, PyObject *args, PyObject *kw) {
  static char *kwlist[] = {"db", "clock", "focus", "builtins", "tool_id", "records", "label",
                           "memory", NULL};
  const char *db = NULL, *clock = "wall", *focus = NULL, *label = NULL;
  int builtins = 1, tool_id = -1, memory = 0;
  Py_ssize_t records = 1 << 20;
  if (!PyArg_ParseTupleAndKeywords(args, kw, "|zszpinzp:Profile", kwlist, &db, &clock, &focus,
                                   &builtins, &tool_id, &records, &label, &memory))
    return -1;
  if (p->running) {
    PyErr_SetString(PyExc_RuntimeError, "Profile is enabled; disable it first");
    return -1;
  }
  p->st = trc_state_root();
  p->code_extra = -1; /* until enabled */
  if (strcmp(clock, "wall") == 0) {
    p->clock_id = CLOCK_MONOTONIC;
    p->acct.clock_cpu = 0;
  } else if (strcmp(clock, "cpu") == 0) {
    p->clock_id = CLOCK_THREAD_CPUTIME_ID;
    p->acct.clock_cpu = 1;
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
  p->memory = memory;
  p->req_tool_id = tool_id;
  free(p->db_path);
  p->db_path = db ? trc_strdup(db) : NULL;
  free(p->label);
  p->label = label ? trc_strdup(label) : NULL;
  p->tool_id = p->focus_tool_id = -1;
  free(p->focus_glob);
  p->focus_glob = focus && *focus ? trc_strdup(focus) : NULL;
  p->acct.focus = p->focus_glob != NULL;
  p->acct.on_focus = trc_backend_on_focus;
  p->acct.on_focus_ctx = p;
  if (trc_acct_ring(&p->acct, p->focus_glob ? (size_t)records : 0) < 0 || trc_reset(p) < 0) {
    PyErr_NoMemory();
    return -1;
  }
  return 0;
}

static void Profile_dealloc(ProfileObject *p) {
  if (p->running) {
    p->running = 0;
    trc_mem_stop(p);
    trc_backend_stop(p);
    if (p->st->active == p) p->st->active = NULL;
  }
  trc_reset(p);
  trc_acct_free(&p->acct);
  free(p->focus_glob);
  free(p->db_path);
  free(p->label);
  Py_TYPE(p)->tp_free((PyObject *)p);
}

static int64_t trc_wall_ns(void) { return trc_clock(CLOCK_REALTIME); }

static PyObject *Profile_enable(ProfileObject *p, PyObject *noargs) {
  (void)noargs;
  if (p->running) Py_RETURN_NONE;
  trc_state *st = p->st;
  if (!p->acct.funcs || !st) {
    PyErr_SetString(PyExc_RuntimeError, "Profile was not initialised");
    return NULL;
  }
  if (st->active) {
    PyErr_SetString(PyExc_RuntimeError, "another bifocal Profile is already enabled");
    return NULL;
  }
  p->gen = st->next_gen++;
  st->active = p;
  if (p->start_wall_ns == 0) p->start_wall_ns = trc_wall_ns();
  if (st->tsc_usable < 0) st->tsc_usable = trc_detect_tsc();
  if (st->code_extra == -2) {
    st->code_extra = trc_request_extra(NULL);
    if (st->code_extra < 0) {
      PyErr_Clear();
      st->code_extra = -1;
    }
  }
  p->code_extra = st->code_extra;
  p->use_tsc = !p->acct.clock_cpu && st->tsc_usable;
  p->cpu_start_ns = trc_clock(CLOCK_PROCESS_CPUTIME_ID);
  p->iv_mono0 = trc_clock(CLOCK_MONOTONIC);
  p->iv_tsc0 = trc_rdtsc();
  if (p->acct.start_mono_ns == 0) {
    p->acct.start_mono_ns = p->iv_mono0;
    p->acct.start_raw = trc_now(p);
  }
  if (trc_backend_start(p) < 0) {
    st->active = NULL;
    return NULL;
  }
  if (p->memory && trc_mem_start(p) < 0) {
    trc_backend_stop(p);
    st->active = NULL;
    return NULL;
  }
  p->running = 1;
  Py_RETURN_NONE;
}

static void trc_stop(ProfileObject *p) {
  p->running = 0;
  trc_mem_stop(p); /* first: the shadow stacks it reads are unwound below */
  trc_backend_stop(p);
  trc_unwind_all(p);
  int64_t mono = trc_clock(CLOCK_MONOTONIC);
  p->tsc_ticks += trc_rdtsc() - p->iv_tsc0;
  p->tsc_ns += mono - p->iv_mono0;
  p->cpu_total_ns += trc_clock(CLOCK_PROCESS_CPUTIME_ID) - p->cpu_start_ns;
  p->elapsed_ns = mono - p->acct.start_mono_ns;
  if (p->st->active == p) p->st->active = NULL;
}

/* Where a database is: db is a path, or (dir_fd >= 0) a file name in the
 * directory dir_fd, a descriptor the runner passed from outside this
 * process's root (its host path may not exist here; shown names it). */
typedef struct trc_db_at {
  int dir_fd;
  const char *shown;
  int saved_cwd; /* while entered */
} trc_db_at;

/* Make db's directory the working directory (dir_fd mode), with the GIL
 * held so no other Python thread sees it. 0, or -1 with an OSError. */
static int trc_db_enter(trc_db_at *at) {
  if (at->dir_fd < 0) return 0;
  at->saved_cwd = open(".", O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (at->saved_cwd < 0 || fchdir(at->dir_fd) < 0) {
    int e = errno;
    if (at->saved_cwd >= 0) close(at->saved_cwd);
    at->saved_cwd = -1;
    PyErr_Format(PyExc_OSError, "cannot reach the database %s through the directory bifocal passed "
                 "(fd %d): %s", at->shown, at->dir_fd, strerror(e));
    return -1;
  }
  if (bf_trace_cwd_db_push() < 0) {
    if (fchdir(at->saved_cwd) < 0) { /* nothing better to do: the error says where */
    }
    close(at->saved_cwd);
    at->saved_cwd = -1;
    PyErr_Format(PyExc_OSError, "cannot open the database %s from this root: SQLite refused a "
                 "virtual file system", at->shown);
    return -1;
  }
  return 0;
}

/* Undo trc_db_enter. 0, or -1 when the working directory could not be put
 * back (the error is set only when none is pending). */
static int trc_db_leave(trc_db_at *at) {
  if (at->dir_fd < 0 || at->saved_cwd < 0) return 0;
  bf_trace_cwd_db_pop();
  int rc = fchdir(at->saved_cwd);
  int e = errno;
  close(at->saved_cwd);
  at->saved_cwd = -1;
  if (rc < 0 && !PyErr_Occurred())
    PyErr_Format(PyExc_OSError, "cannot return to the working directory after writing %s: %s",
                 at->shown, strerror(e));
  return rc < 0 ? -1 : 0;
}

static long long trc_write_session(ProfileObject *p, const char *db, trc_db_at *at, long long session,
                                   const char *label, const char *command, const char *status,
                                   double ttl_s, const char *commit, const char *extra);

/* Stop; with a database given at construction, write the session there. */
static PyObject *Profile_disable(ProfileObject *p, PyObject *noargs) {
  (void)noargs;
  if (!p->running) Py_RETURN_NONE;
  trc_stop(p);
  trc_db_at at = {-1, p->db_path, -1};
  if (p->db_path &&
      trc_write_session(p, p->db_path, &at, 0, p->label, NULL, "complete", 0, NULL, NULL) < 0)
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
  for (size_t i = 1; i < p->acct.nfuncs; i++) {
    bf_trc_func *f = &p->acct.funcs[i];
    if (f->is_c || f->file) continue;
    PyCodeObject *co = (PyCodeObject *)f->ref;
    f->file = trc_name_dup(co->co_filename);
#if PY_VERSION_HEX >= 0x030B0000
    f->qualname = trc_name_dup(co->co_qualname);
#else
    f->qualname = trc_name_dup(co->co_name);
#endif
    f->firstlineno = co->co_firstlineno;
    PyErr_Clear();
  }
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
  for (size_t i = 1; i < p->acct.nfuncs; i++) {
    bf_trc_func *f = &p->acct.funcs[i];
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
  for (size_t i = 1; i < p->acct.nedges; i++) {
    bf_trc_edge *e = &p->acct.edges[i];
    if (e->calls == 0 && e->self_ns == 0) continue;
    bf_trc_func *cr = e->caller ? &p->acct.funcs[e->caller] : NULL, *ce = &p->acct.funcs[e->callee];
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
                      "mismatches", (long long)p->acct.mismatches, "threads", p->nthreads,
                      "records", (long long)p->acct.rec_count, "elapsed_ns",
                      (long long)p->elapsed_ns, "partial", p->acct.error);
  if (out && p->mem) { /* trace --memory: allocations per function, edge, largest live blocks */
    PyObject *mem = trc_mem_stats(p);
    if (!mem || PyDict_SetItemString(out, "memory", mem) < 0) Py_CLEAR(out);
    Py_XDECREF(mem);
  }
done:
  Py_XDECREF(funcs);
  Py_XDECREF(edges);
  return out;
}

/* write(db, session=0, label=None, command=None, status="complete", ttl_s=0,
 *       commit=None, extra=None) -> session id */
static PyObject *Profile_write(ProfileObject *p, PyObject *args, PyObject *kw) {
  static char *kwlist[] = {"db", "session", "label", "command", "status", "ttl_s", "commit",
                           "extra", "dir_fd", "shown_as", NULL};
  const char *db, *label = NULL, *command = NULL, *status = "complete", *commit = NULL,
                  *extra = NULL, *shown_as = NULL;
  long long session = 0;
  double ttl_s = 0;
  int dir_fd = -1;
  if (!PyArg_ParseTupleAndKeywords(args, kw, "s|Lzzzdzziz:write", kwlist, &db, &session, &label,
                                   &command, &status, &ttl_s, &commit, &extra, &dir_fd,
                                   &shown_as))
    return NULL;
  if (dir_fd >= 0 && strchr(db, '/')) {
    PyErr_SetString(PyExc_ValueError, "write: with dir_fd, db is a file name in that directory");
    return NULL;
  }
  if (p->running) trc_stop(p);
  trc_db_at at = {dir_fd, shown_as ? shown_as : db, -1};
  long long sid = trc_write_session(p, db, &at, session, label ? label : p->label, command, status,
                                    ttl_s, commit, extra);
  if (sid < 0) return NULL;
  return PyLong_FromLongLong(sid);
}

static void trc_result_free(bf_trc_result *res) {
  free(res->funcs);
  free(res->edges);
  free(res->recs);
  free(res->threads);
}

/* The tables as the writer takes them: times scaled to ns, ring contents
 * oldest first, strings borrowed from p. 0, or -1 with a Python error. */
static int trc_result(ProfileObject *p, bf_trc_result *res) {
  trc_acct *a = &p->acct;
  memset(res, 0, sizeof *res);
  res->threads = calloc(p->nthreads ? p->nthreads : 1, sizeof *res->threads);
  res->recs = a->rec_count ? malloc(a->rec_count * sizeof *res->recs) : NULL;
  res->funcs = malloc((a->nfuncs ? a->nfuncs : 1) * sizeof *res->funcs);
  res->edges = malloc((a->nedges ? a->nedges : 1) * sizeof *res->edges);
  if (!res->threads || (a->rec_count && !res->recs) || !res->funcs || !res->edges) {
    trc_result_free(res);
    PyErr_NoMemory();
    return -1;
  }
  double k = trc_factor(p);
  for (size_t i = 0; i < a->rec_count; i++) {
    bf_trc_rec *r = &res->recs[i];
    *r = a->recs[(a->rec_head + i) % a->rec_cap];
    r->duration_ns = trc_scale(r->duration_ns, k);
    if (!a->clock_cpu) r->start_ns = trc_scale(r->start_ns, k);
  }
  for (size_t i = 0; i < a->nfuncs; i++) {
    res->funcs[i] = a->funcs[i];
    res->funcs[i].self_ns = trc_scale(res->funcs[i].self_ns, k);
    res->funcs[i].total_ns = trc_scale(res->funcs[i].total_ns, k);
  }
  for (size_t i = 0; i < a->nedges; i++) {
    res->edges[i] = a->edges[i];
    res->edges[i].self_ns = trc_scale(res->edges[i].self_ns, k);
    res->edges[i].total_ns = trc_scale(res->edges[i].total_ns, k);
  }
  for (trc_thread *t = p->threads; t; t = t->next) {
    res->threads[t->index].native_tid = t->native_tid;
    res->threads[t->index].name = t->name;
  }
  res->nfuncs = a->nfuncs;
  res->nedges = a->nedges;
  res->nrecs = a->rec_count;
  res->nthreads = p->nthreads;
  res->mem = trc_mem_result(p);
  return 0;
}

/* The session's extra_json: how it was traced, plus the caller's extra
 * members (a JSON object body or NULL). Caller frees; NULL: no memory. */
static char *trc_extra_json(ProfileObject *p, const char *extra) {
  char *fglob = p->focus_glob ? bf_json_escape(p->focus_glob) : NULL;
  char mem[512];
  trc_mem_extra_json(p, mem, sizeof mem);
  size_t extra_len = 1024 + sizeof mem + (fglob ? strlen(fglob) : 0) + (extra ? strlen(extra) : 0);
  char *out = malloc(extra_len);
  if (out)
    snprintf(out, extra_len,
             "{\"mismatches\":%lld,\"threads\":%u,\"builtins\":%s,\"backend\":\"%s\","
             "\"timer\":\"%s\","
             "\"tool_id\":%d,\"focus\":%s%s%s,\"records_capacity\":%zu,\"partial\":%s%s%s%s%s}",
             (long long)p->acct.mismatches, p->nthreads, p->builtins ? "true" : "false",
             BF_TRC_MONITORING ? "sys.monitoring" : "setprofile",
             p->acct.clock_cpu ? "thread_cputime" : (p->use_tsc ? "tsc" : "clock_monotonic"),
             p->req_tool_id >= 0 ? p->req_tool_id : (BF_TRC_MONITORING ? 2 : -1),
             fglob ? "\"" : "", fglob ? fglob : "null", fglob ? "\"" : "", p->acct.rec_cap,
             p->acct.error ? "true" : "false", mem[0] ? "," : "", mem, extra && *extra ? "," : "",
             extra && *extra ? extra : "");
  free(fglob);
  return out;
}

static long long trc_write_session(ProfileObject *p, const char *db, trc_db_at *at, long long session,
                                   const char *label, const char *command, const char *status,
                                   double ttl_s, const char *commit, const char *extra) {
  trc_fill_names(p);
  bf_trc_result res;
  if (trc_result(p, &res) < 0) return -1;
  char *extra_json = trc_extra_json(p, extra);
  if (!extra_json) {
    trc_result_free(&res);
    PyErr_NoMemory();
    return -1;
  }
  /* the interpreter running now, not the headers this was built with: one
   * extension suffix serves e.g. pyenv's 3.11.7 and Debian's 3.11.2 */
  char pyver[64];
  snprintf(pyver, sizeof pyver, "%.*s", (int)strcspn(Py_GetVersion(), " "), Py_GetVersion());
  const char *build = "release";
#ifdef Py_DEBUG
  build = "debug";
#endif
  bf_trc_meta meta = {0};
  meta.session_id = session;
  meta.clock = p->acct.clock_cpu ? "cpu" : "wall";
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
  bf_err err = BF_ERR_INIT;
  int rc;
  if (at->dir_fd >= 0) { /* through the runner's directory handle: the GIL stays held */
    if (trc_db_enter(at) < 0) {
      free(extra_json);
      trc_result_free(&res);
      return -1;
    }
    rc = bf_trc_write(db, &res, &meta, &sid, &err);
    if (trc_db_leave(at) < 0 && rc >= 0) rc = -EIO;
  } else {
    Py_BEGIN_ALLOW_THREADS
    rc = bf_trc_write(db, &res, &meta, &sid, &err);
    Py_END_ALLOW_THREADS
  }
  free(extra_json);
  trc_result_free(&res);
  if (rc < 0) {
    if (PyErr_Occurred()) {
    } else if (at->dir_fd >= 0) { /* err names the file as SQLite saw it, relative */
      PyErr_Format(PyExc_OSError, "could not write the trace to %s (%s)", at->shown, err.msg);
    } else {
      PyErr_Format(PyExc_OSError, "could not write the trace to %s", err.msg);
    }
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

PyTypeObject ProfileType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "_bifocal_trace.Profile",
    .tp_basicsize = sizeof(ProfileObject),
    .tp_dealloc = (destructor)Profile_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Profile(clock='wall', focus=None, builtins=True, tool_id=-1, records=1<<20,\n"
              "        memory=False)\n"
              "Exact per-function and per-edge call accounting on every thread; with memory,\n"
              "exact allocations per function and edge through the PEP 445 allocator hooks.",
    .tp_methods = Profile_methods,
    .tp_getset = Profile_getset,
    .tp_init = (initproc)Profile_init,
    .tp_new = PyType_GenericNew,
};

/* _discard_session(db, id, dir_fd=-1, shown_as=None): remove a session that
 * never started (the runner could not set the program up), so nothing is
 * left half-written. dir_fd, shown_as: as for Profile.write. */
static PyObject *trc_discard_session(PyObject *self, PyObject *args) {
  (void)self;
  const char *db, *shown_as = NULL;
  long long id;
  int dir_fd = -1;
  if (!PyArg_ParseTuple(args, "sL|iz:_discard_session", &db, &id, &dir_fd, &shown_as)) return NULL;
  trc_db_at at = {dir_fd, shown_as ? shown_as : db, -1};
  if (trc_db_enter(&at) < 0) return NULL;
  bf_store *s = NULL;
  bf_err msg = BF_ERR_INIT;
  int rc;
  if (dir_fd >= 0) {
    rc = bf_store_open(db, 0, &s, &msg);
    if (rc == 0) rc = bf_store_session_delete(s, (int64_t)id);
  } else {
    Py_BEGIN_ALLOW_THREADS
    rc = bf_store_open(db, 0, &s, &msg);
    if (rc == 0) rc = bf_store_session_delete(s, (int64_t)id);
    Py_END_ALLOW_THREADS
  }
  if (rc < 0)
    PyErr_Format(PyExc_OSError, "could not discard session %lld in %s: %s", id, at.shown,
                 s ? bf_store_errmsg(s) : bf_err_msg(&msg, strerror(-rc)));
  bf_store_close(s);
  if (trc_db_leave(&at) < 0 || rc < 0) return NULL;
  Py_RETURN_NONE;
}

/* SIGTERM handler for the runner: a C function so no frame is traced. */
static PyObject *trc_sigterm(PyObject *self, PyObject *args) {
  (void)self;
  (void)args;
  trc_state_root()->terminated = 1;
  PyObject *code = PyLong_FromLong(128 + 15);
  if (code) PyErr_SetObject(PyExc_SystemExit, code);
  Py_XDECREF(code);
  return NULL;
}

static PyObject *trc_was_terminated(PyObject *self, PyObject *noargs) {
  (void)self;
  (void)noargs;
  return PyBool_FromLong(trc_state_root()->terminated);
}

/* _await_sites() and _task_lifetimes(): the asyncio tables (trc_tasks.h). */
static PyObject *trc_await_sites(PyObject *self, PyObject *noargs) {
  (void)self;
  (void)noargs;
  return trc_tasks_await_sites(&trc_state_root()->tasks);
}

static PyObject *trc_task_lifetimes(PyObject *self, PyObject *noargs) {
  (void)self;
  (void)noargs;
  return trc_tasks_lifetimes(&trc_state_root()->tasks);
}

static PyMethodDef module_methods[] = {
    {"_sigterm", trc_sigterm, METH_VARARGS, NULL},
    {"_terminated", trc_was_terminated, METH_NOARGS, NULL},
    {"_discard_session", trc_discard_session, METH_VARARGS, NULL},
    {"_await_sites", trc_await_sites, METH_NOARGS, NULL},
    {"_task_lifetimes", trc_task_lifetimes, METH_NOARGS, NULL},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef trc_module = {
    PyModuleDef_HEAD_INIT, "_bifocal_trace",
    "bifocal's tracing collector (C). Use the bifocal_trace module.", -1, module_methods,
    NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__bifocal_trace(void) {
  if (PyType_Ready(&ProfileType) < 0) return NULL;
  if (!trc_root.tasks.codes.slot_size) trc_tasks_init(&trc_root.tasks); /* once: they live as long as the process */
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
  return m;
}
