/* offsets_gen.c — compiled once per CPython version against its internal
 * headers (by gen_offsets.sh) to print the offset table vendored in
 * sampling/layouts.c. Not part of the build. */
#define Py_BUILD_CORE 1
#include <Python.h>
#include <stddef.h>
#include <stdio.h>
#if PY_VERSION_HEX >= 0x030B0000
#include <internal/pycore_frame.h>
#include <internal/pycore_interp.h>
#include <internal/pycore_runtime.h>
#else
#include <frameobject.h>
#if PY_VERSION_HEX >= 0x03090000
#include <internal/pycore_interp.h>
#include <internal/pycore_runtime.h>
#else
#include <internal/pycore_pystate.h>
#endif
#endif
#include <internal/pycore_gil.h>

#define F(name, val) printf("    .%s = %lu,\n", name, (unsigned long)(val))

int main(void) {
  printf("  { /* %s */\n", PY_VERSION);
  printf("    .version_hex = 0x%08lx,\n", (unsigned long)PY_VERSION_HEX);
  F("rt_interp_head", offsetof(_PyRuntimeState, interpreters.head));
#if PY_VERSION_HEX < 0x030C0000
  F("rt_gil_last_holder", offsetof(_PyRuntimeState, ceval.gil.last_holder));
  F("rt_gil_locked", offsetof(_PyRuntimeState, ceval.gil.locked));
#else
  F("is_gil_ptr", offsetof(PyInterpreterState, ceval.gil));
  F("gil_last_holder", offsetof(struct _gil_runtime_state, last_holder));
  F("gil_locked", offsetof(struct _gil_runtime_state, locked));
#endif
#if PY_VERSION_HEX < 0x03090000
  F("rt_gc_collecting", offsetof(_PyRuntimeState, gc.collecting));
#else
  F("is_gc_collecting", offsetof(PyInterpreterState, gc.collecting));
#endif
  F("is_next", offsetof(PyInterpreterState, next));
#if PY_VERSION_HEX < 0x030B0000
  F("is_tstate_head", offsetof(PyInterpreterState, tstate_head));
#else
  F("is_tstate_head", offsetof(PyInterpreterState, threads.head));
#endif
  F("is_size", sizeof(PyInterpreterState));
  F("ts_next", offsetof(PyThreadState, next));
  F("ts_thread_id", offsetof(PyThreadState, thread_id));
#if PY_VERSION_HEX >= 0x030B0000
  F("ts_native_thread_id", offsetof(PyThreadState, native_thread_id));
  F("ts_cframe", offsetof(PyThreadState, cframe));
  F("cf_current_frame", offsetof(_PyCFrame, current_frame));
  F("fr_code", offsetof(_PyInterpreterFrame, f_code));
  F("fr_back", offsetof(_PyInterpreterFrame, previous));
  F("fr_instr", offsetof(_PyInterpreterFrame, prev_instr));
  F("fr_owner", offsetof(_PyInterpreterFrame, owner));
#if PY_VERSION_HEX < 0x030C0000
  F("fr_entry", offsetof(_PyInterpreterFrame, is_entry));
#endif
  F("fr_size", sizeof(_PyInterpreterFrame));
  F("co_qualname", offsetof(PyCodeObject, co_qualname));
  F("co_code_adaptive", offsetof(PyCodeObject, co_code_adaptive));
  F("co_linetable", offsetof(PyCodeObject, co_linetable));
#else
  F("ts_frame", offsetof(PyThreadState, frame));
  F("fr_code", offsetof(PyFrameObject, f_code));
  F("fr_back", offsetof(PyFrameObject, f_back));
  F("fr_instr", offsetof(PyFrameObject, f_lasti));
  F("fr_size", sizeof(PyFrameObject));
#if PY_VERSION_HEX >= 0x030A0000
  F("co_linetable", offsetof(PyCodeObject, co_linetable));
#else
  F("co_linetable", offsetof(PyCodeObject, co_lnotab));
#endif
#endif
  F("ts_size", sizeof(PyThreadState));
  F("co_filename", offsetof(PyCodeObject, co_filename));
  F("co_name", offsetof(PyCodeObject, co_name));
  F("co_firstlineno", offsetof(PyCodeObject, co_firstlineno));
  F("co_size", sizeof(PyCodeObject));
  F("ob_type", offsetof(PyObject, ob_type));
  F("tp_name", offsetof(PyTypeObject, tp_name));
  F("bytes_size", offsetof(PyVarObject, ob_size));
  F("bytes_sval", offsetof(PyBytesObject, ob_sval));
  F("uni_length", offsetof(PyASCIIObject, length));
  F("uni_state", offsetof(PyASCIIObject, state));
  F("uni_ascii_size", sizeof(PyASCIIObject));
  F("uni_compact_size", sizeof(PyCompactUnicodeObject));
  printf("  },\n");
  return 0;
}
