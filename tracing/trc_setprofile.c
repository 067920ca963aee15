/* trc_setprofile.c — the collector's 3.8–3.11 backend: PyEval_SetProfile.
 *
 * One C profile function on every thread (threads started later install it
 * through threading's profile hook) turns call/return and c_call/c_return events
 * into shadow-stack pushes and pops.
 */
#include "trc_module.h"
#include "trc_tasks.h"

#if !BF_TRC_MONITORING
#include <frameobject.h>

#include <string.h>

/* Focus subtrees need no second event source here: every event is seen. */
void trc_backend_on_focus(void *ctx, int on) {
  (void)ctx;
  (void)on;
}

void trc_backend_reset(ProfileObject *p) { (void)p; }

#if PY_VERSION_HEX >= 0x030B0000
/* 3.11's frame object and the interpreter frame it points to, as far as read
 * here (Include/internal/pycore_frame.h, fixed within 3.11). Read directly,
 * the code object costs two loads instead of a call and a reference count
 * round trip, twice per call; trc_frame_layout_check compares the layout with
 * the API at every enable and the API is used when they differ. */
typedef struct trc_iframe311 {
  PyObject *f_func, *f_globals, *f_builtins, *f_locals;
  PyCodeObject *f_code;
  PyObject *frame_obj;
  struct trc_iframe311 *previous;
  const uint16_t *prev_instr; /* _Py_CODEUNIT: the unit before the next instruction */
} trc_iframe311;
typedef struct {
  PyObject_HEAD
  PyFrameObject *f_back;
  trc_iframe311 *f_frame;
} trc_frame311;

/* PyFrame_GetLasti from the layout above: bytes into the code, -1 before the
 * first instruction. */
static inline int trc_iframe_lasti(const trc_iframe311 *i) {
  ptrdiff_t u = i->prev_instr - (const uint16_t *)i->f_code->co_code_adaptive;
  return u < 0 ? -1 : (int)(u * 2);
}

/* Does the layout above match the running interpreter (sp->frame_direct)? */
static void trc_frame_layout_check(trc_sp_state *sp) {
  PyFrameObject *f = PyEval_GetFrame(); /* borrowed; NULL when no Python frame runs */
  sp->frame_direct = 0;
  if (!f) return;
  PyCodeObject *co = PyFrame_GetCode(f);
  PyObject *g = PyFrame_GetGlobals(f);
  const trc_iframe311 *i = ((const trc_frame311 *)f)->f_frame;
  sp->frame_direct = i && i->f_code == co && i->f_globals == g &&
                     trc_iframe_lasti(i) == PyFrame_GetLasti(f);
  Py_XDECREF(co);
  Py_XDECREF(g);
  PyErr_Clear();
}
#endif

static inline PyCodeObject *trc_frame_code(const trc_sp_state *sp, PyFrameObject *f) {
#if PY_VERSION_HEX >= 0x030B0000
  if (sp->frame_direct) return ((const trc_frame311 *)f)->f_frame->f_code;
  PyCodeObject *co = PyFrame_GetCode(f);
  Py_DECREF(co); /* the frame keeps it alive for this event */
  return co;
#else
  (void)sp;
  return f->f_code;
#endif
}

static inline PyObject *trc_frame_globals(const trc_sp_state *sp, PyFrameObject *f) {
#if PY_VERSION_HEX >= 0x030B0000
  if (sp->frame_direct) return ((const trc_frame311 *)f)->f_frame->f_globals;
  PyObject *g = PyFrame_GetGlobals(f);
  Py_XDECREF(g); /* borrowed from the frame for this event */
  return g;
#else
  (void)sp;
  return f->f_globals;
#endif
}

static inline int trc_frame_lasti(const trc_sp_state *sp, PyFrameObject *f) {
#if PY_VERSION_HEX >= 0x030B0000
  if (sp->frame_direct) return trc_iframe_lasti(((const trc_frame311 *)f)->f_frame);
  return PyFrame_GetLasti(f);
#else
  (void)sp;
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

static void trc_thread_starting(trc_sp_state *sp);

static int trc_profile_fn(PyObject *obj, PyFrameObject *frame, int what, PyObject *arg) {
  (void)obj;
  trc_state *st = trc_state_root(); /* obj is NULL: sys.getprofile() stays None */
  ProfileObject *p = st->active;
  if (!p || !p->running) return 0;
  trc_sp_state *sp = &st->sp;
  trc_thread *t = trc_thread_get(p);
  if (!t || t->paused) return 0;
  int64_t now;
  switch (what) {
  case PyTrace_CALL: {
    PyCodeObject *co = trc_frame_code(sp, frame);
    now = trc_now(p);
    uint32_t flags = 0;
    /* a generator/coroutine frame that already ran is being resumed */
    if ((co->co_flags & (CO_GENERATOR | CO_COROUTINE | CO_ASYNC_GENERATOR)) &&
        trc_gen_resumed(co, trc_frame_lasti(sp, frame)))
      flags = TRC_FR_RESUME;
    else if (co->co_flags & CO_COROUTINE)
      trc_tasks_coro_start(&st->tasks, co, frame); /* a task's start, if it is one (trc_tasks.c) */
    uint32_t fi = trc_code_lookup(p, co) & ~TRC_FI_SITES;
    if (!fi) fi = trc_code_func(p, co, trc_frame_globals(sp, frame));
    trc_push(&p->acct, t, fi, co, flags, now);
    break;
  }
  case PyTrace_RETURN: {
    PyCodeObject *co = trc_frame_code(sp, frame);
    if (co->co_flags & CO_COROUTINE) /* an await's hit, or a task's end (trc_tasks.c) */
      trc_tasks_frame_return(&st->tasks, co, frame, arg != NULL);
    if (t->depth == 0) break;
    trc_leave(&p->acct, t, co, trc_now(p));
    break;
  }
  case PyTrace_C_CALL: {
    if (arg == sp->start_new_thread) trc_thread_starting(sp);
    if (!p->builtins) break;
    PyMethodDef *def = trc_builtin_def(arg);
    if (!def) break;
    if (p->focus_glob && t->focus_depth == 0) break;
    trc_push_c(p, t, arg, def, trc_now(p));
    break;
  }
  case PyTrace_C_RETURN:
  case PyTrace_C_EXCEPTION: {
    if (!p->builtins || t->depth == 0) break;
    now = trc_now(p);
    const trc_frame *top = &t->stack[t->depth - 1];
    if ((top->flags & TRC_FR_C) && top->callable == arg) {
      trc_pop(&p->acct, t, now);
      break;
    }
    PyMethodDef *def = trc_builtin_def(arg);
    if (def) trc_leave(&p->acct, t, def, now);
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

/* New threads. Thread._bootstrap_inner installs threading._profile_hook (what
 * threading.setprofile sets) in every thread it starts, so the hook is set
 * there directly, and only once the program has imported threading: the
 * tracer never imports it, and the program's own `import threading` is traced
 * like any other import. When threading was imported after tracing began, the
 * hook is set as a traced thread calls _thread.start_new_thread (a c_call
 * event), before the new thread runs. Threads started with _thread directly
 * are not followed (as with threading.setprofile). */
static int trc_threading_hook_set(const trc_sp_state *sp, PyObject *hook, int only_if_ours) {
  PyObject *mods = PyImport_GetModuleDict();
  PyObject *threading = mods ? PyDict_GetItemString(mods, "threading") : NULL;
  if (!threading) return 0;
  if (only_if_ours) {
    PyObject *cur = PyObject_GetAttrString(threading, "_profile_hook");
    int ours = cur == sp->thread_hook;
    Py_XDECREF(cur);
    PyErr_Clear();
    if (!ours) return 0;
  }
  return PyObject_SetAttrString(threading, "_profile_hook", hook);
}

/* A traced thread is about to start a thread. */
static __attribute__((noinline, cold)) void trc_thread_starting(trc_sp_state *sp) {
  PyObject *exc_type, *exc_val, *exc_tb;
  PyErr_Fetch(&exc_type, &exc_val, &exc_tb);
  if (sp->thread_hook && trc_threading_hook_set(sp, sp->thread_hook, 0) < 0) PyErr_Clear();
  PyErr_Restore(exc_type, exc_val, exc_tb);
}

static int trc_find_start_new_thread(trc_sp_state *sp) {
  if (sp->start_new_thread) return 0;
  PyObject *mods = PyImport_GetModuleDict();
  PyObject *thread = mods ? PyDict_GetItemString(mods, "_thread") : NULL;
  if (!thread) return 0; /* not loaded: nothing can start a thread through it yet */
  sp->start_new_thread = PyObject_GetAttrString(thread, "start_new_thread");
  if (!sp->start_new_thread) PyErr_Clear();
  return 0;
}

int trc_backend_start(ProfileObject *p) {
  trc_sp_state *sp = &p->st->sp;
#if PY_VERSION_HEX >= 0x030B0000
  trc_frame_layout_check(sp);
#endif
  if (!sp->thread_hook) {
    sp->thread_hook = PyCFunction_NewEx(&trc_hook_def, NULL, NULL);
    if (!sp->thread_hook) return -1;
  }
  trc_find_start_new_thread(sp);
  if (trc_threading_hook_set(sp, sp->thread_hook, 0) < 0) return -1;
  PyThreadState *me = PyThreadState_Get();
  for (PyThreadState *ts = PyInterpreterState_ThreadHead(me->interp); ts;
       ts = PyThreadState_Next(ts)) {
    if (trc_set_profile(ts, trc_profile_fn) < 0) return -1;
  }
  return 0;
}

void trc_backend_stop(ProfileObject *p) {
  PyObject *exc_type, *exc_val, *exc_tb;
  PyErr_Fetch(&exc_type, &exc_val, &exc_tb);
  PyThreadState *me = PyThreadState_Get();
  for (PyThreadState *ts = PyInterpreterState_ThreadHead(me->interp); ts;
       ts = PyThreadState_Next(ts))
    trc_set_profile(ts, NULL);
  trc_threading_hook_set(&p->st->sp, Py_None, 1);
  PyErr_Clear();
  PyErr_Restore(exc_type, exc_val, exc_tb);
}

#endif
