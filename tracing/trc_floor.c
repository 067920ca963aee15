/* trc_floor.c — `_bifocal_trace_floor`: the empty-callback floor for benchmarks.
 *
 * Subscribes exactly the events the collector subscribes, with callbacks that
 * do nothing, so a benchmark can tell the interpreter's dispatch cost from the
 * collector's own work. Not used by `bifocal trace`.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <frameobject.h>
#include <stddef.h>

#if PY_VERSION_HEX >= 0x030C0000
/* The same minimal vectorcall callable type the collector registers. */
typedef struct {
  PyObject_HEAD
  vectorcallfunc vectorcall;
} floor_cb_obj;

static PyObject *floor_none(PyObject *c, PyObject *const *args, size_t nargsf, PyObject *kw) {
  (void)c;
  (void)args;
  (void)nargsf;
  (void)kw;
  Py_RETURN_NONE;
}

static PyTypeObject floor_cb_type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "_bifocal_trace_floor.callback",
    .tp_basicsize = sizeof(floor_cb_obj),
    .tp_vectorcall_offset = offsetof(floor_cb_obj, vectorcall),
    .tp_call = PyVectorcall_Call,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_VECTORCALL,
};
static int floor_tool = -1;

static PyObject *floor_call(const char *meth, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  PyObject *args = Py_VaBuildValue(fmt, ap);
  va_end(ap);
  if (!args) return NULL;
  PyObject *mon = PySys_GetObject("monitoring"); /* borrowed */
  PyObject *f = mon ? PyObject_GetAttrString(mon, meth) : NULL;
  PyObject *r = f ? PyObject_Call(f, args, NULL) : NULL;
  Py_XDECREF(f);
  Py_DECREF(args);
  return r;
}

static int floor_event(const char *name) {
  PyObject *mon = PySys_GetObject("monitoring");
  PyObject *evs = mon ? PyObject_GetAttrString(mon, "events") : NULL;
  PyObject *v = evs ? PyObject_GetAttrString(evs, name) : NULL;
  int e = v ? (int)PyLong_AsLong(v) : 0;
  Py_XDECREF(v);
  Py_XDECREF(evs);
  return e;
}

static PyObject *floor_enable(PyObject *self, PyObject *args, PyObject *kw) {
  (void)self;
  static char *kwlist[] = {"builtins", "tool_id", NULL};
  int builtins = 1, tool = 2;
  if (!PyArg_ParseTupleAndKeywords(args, kw, "|pi", kwlist, &builtins, &tool)) return NULL;
  const char *names[] = {"PY_START", "PY_RESUME", "PY_RETURN", "PY_YIELD", "PY_UNWIND",
                         "PY_THROW", "CALL",      "C_RETURN",  "C_RAISE"};
  size_t n = builtins ? 9 : 6;
  PyObject *r = floor_call("use_tool_id", "(is)", tool, "bifocal-floor");
  if (!r) return NULL;
  Py_DECREF(r);
  if (!(floor_cb_type.tp_flags & Py_TPFLAGS_READY) && PyType_Ready(&floor_cb_type) < 0) return NULL;
  floor_cb_obj *o = PyObject_New(floor_cb_obj, &floor_cb_type);
  if (!o) return NULL;
  o->vectorcall = floor_none;
  PyObject *cb = (PyObject *)o;
  int mask = 0;
  for (size_t i = 0; i < n; i++) {
    int ev = floor_event(names[i]);
    mask |= ev;
    r = floor_call("register_callback", "(iiO)", tool, ev, cb);
    if (!r) {
      Py_DECREF(cb);
      return NULL;
    }
    Py_DECREF(r);
  }
  Py_DECREF(cb);
  r = floor_call("set_events", "(ii)", tool, mask);
  if (!r) return NULL;
  Py_DECREF(r);
  floor_tool = tool;
  Py_RETURN_NONE;
}

static PyObject *floor_disable(PyObject *self, PyObject *noargs) {
  (void)self;
  (void)noargs;
  if (floor_tool < 0) Py_RETURN_NONE;
  PyObject *r = floor_call("set_events", "(ii)", floor_tool, 0);
  Py_XDECREF(r);
  r = floor_call("free_tool_id", "(i)", floor_tool);
  Py_XDECREF(r);
  floor_tool = -1;
  if (PyErr_Occurred()) return NULL;
  Py_RETURN_NONE;
}
#else
static int floor_profile(PyObject *obj, PyFrameObject *frame, int what, PyObject *arg) {
  (void)obj;
  (void)frame;
  (void)what;
  (void)arg;
  return 0;
}

static PyObject *floor_enable(PyObject *self, PyObject *args, PyObject *kw) {
  (void)self;
  (void)args;
  (void)kw;
  PyEval_SetProfile(floor_profile, NULL);
  Py_RETURN_NONE;
}

static PyObject *floor_disable(PyObject *self, PyObject *noargs) {
  (void)self;
  (void)noargs;
  PyEval_SetProfile(NULL, NULL);
  Py_RETURN_NONE;
}
#endif

static PyMethodDef floor_methods[] = {
    {"enable", (PyCFunction)(void (*)(void))floor_enable, METH_VARARGS | METH_KEYWORDS,
     "enable(builtins=True, tool_id=2): subscribe the collector's events, do nothing"},
    {"disable", (PyCFunction)floor_disable, METH_NOARGS, "unsubscribe"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef floor_module = {PyModuleDef_HEAD_INIT, "_bifocal_trace_floor",
                                          "empty-callback floor for benchmarks", -1,
                                          floor_methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__bifocal_trace_floor(void) { return PyModule_Create(&floor_module); }
