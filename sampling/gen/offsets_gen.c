/* offsets_gen.c — compiled once per CPython version against its internal
 * headers (by gen_offsets.sh) to print the offset tables vendored in
 * sampling/layouts.c and sampling/locals.c. Not part of the build. */
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
#define FS(name, val) printf("    .%s = %ld,\n", name, (long)(val))

#if defined(BF_DBGPOS)
/* Positions inside the target's _Py_DebugOffsets (3.13+) of the fields the
 * thread-name reader takes from there rather than from NAMES_GENERATED, and
 * of what `dump --locals` reads (DBG_POS_GENERATED in sampling/layouts.c;
 * 0: this version's offsets lack it). */
#include <internal/pycore_runtime.h>
#define P(name, field) printf("    .%s = %lu,\n", name, (unsigned long)offsetof(_Py_DebugOffsets, field))
int main(void) {
  printf("  { /* %s */\n", PY_VERSION);
  printf("    .minor = %d,\n", PY_MINOR_VERSION);
  P("is_size", interpreter_state.size);
  P("is_modules", interpreter_state.imports_modules);
  P("tp_size", type_object.size);
  P("tp_flags", type_object.tp_flags);
#if PY_VERSION_HEX >= 0x030F0000
  P("tp_basicsize", type_object.tp_basicsize);
  P("tp_dictoffset", type_object.tp_dictoffset);
  P("ht_size", heap_type_object.size);
  P("ht_cached_keys", heap_type_object.ht_cached_keys);
#endif
  P("dict_size", dict_object.size);
  P("dict_keys", dict_object.ma_keys);
  P("dict_values", dict_object.ma_values);
  P("long_size", long_object.size);
  P("long_tag", long_object.lv_tag);
  P("long_digit", long_object.ob_digit);
  P("fr_size", interpreter_frame.size);
  P("fr_localsplus", interpreter_frame.localsplus);
  P("co_size", code_object.size);
  P("co_names", code_object.localsplusnames);
  P("co_kinds", code_object.localspluskinds);
  P("tuple_size", tuple_object.size);
  P("tuple_item", tuple_object.ob_item);
  P("tuple_ob_size", tuple_object.ob_size);
  P("float_size", float_object.size);
  P("float_val", float_object.ob_fval);
  printf("  },\n");
  return 0;
}
#elif defined(BF_NAMES)
/* The thread-name table (smp_names_layout, read by pynames.c): dict, int,
 * module and instance-attribute layouts. Dict keys and modules of 3.8-3.10
 * live in Objects/dict-common.h / moduleobject.c, not in the installed
 * headers: their minimal structs are vendored here (identical in 3.8-3.10). */
#if PY_VERSION_HEX >= 0x030B0000
#include <internal/pycore_dict.h>
#include <internal/pycore_object.h>
#else
#include <longintrepr.h>
typedef struct {
  Py_hash_t me_hash;
  PyObject *me_key;
  PyObject *me_value;
} PyDictKeyEntry;
struct _dictkeysobject {
  Py_ssize_t dk_refcnt;
  Py_ssize_t dk_size;
  void *dk_lookup;
  Py_ssize_t dk_usable;
  Py_ssize_t dk_nentries;
  char dk_indices[];
};
#endif
#if PY_VERSION_HEX >= 0x030A0000
#include <internal/pycore_moduleobject.h>
#else
typedef struct {
  PyObject_HEAD
  PyObject *md_dict;
} bf_module;
#endif

int main(void) {
  printf("  { /* %s */\n", PY_VERSION);
  F("minor", PY_MINOR_VERSION);
#if PY_VERSION_HEX >= 0x030C0000
  F("is_modules", offsetof(PyInterpreterState, imports.modules));
#else
  F("is_modules", offsetof(PyInterpreterState, modules));
#endif
#if PY_VERSION_HEX >= 0x030A0000
  F("md_dict", offsetof(PyModuleObject, md_dict));
#else
  F("md_dict", offsetof(bf_module, md_dict));
#endif
  F("tp_basicsize", offsetof(PyTypeObject, tp_basicsize));
  F("tp_dictoffset", offsetof(PyTypeObject, tp_dictoffset));
  F("tp_flags", offsetof(PyTypeObject, tp_flags));
  F("ht_cached_keys", offsetof(PyHeapTypeObject, ht_cached_keys));
  F("tpf_heaptype", Py_TPFLAGS_HEAPTYPE);
  F("ht_size", sizeof(PyHeapTypeObject));
  F("dict_keys", offsetof(PyDictObject, ma_keys));
  F("dict_values", offsetof(PyDictObject, ma_values));
  F("dict_size", sizeof(PyDictObject));
  F("dk_nentries", offsetof(struct _dictkeysobject, dk_nentries));
  F("dk_indices", offsetof(struct _dictkeysobject, dk_indices));
  F("dk_entry_size", sizeof(PyDictKeyEntry));
  F("dk_entry_key", offsetof(PyDictKeyEntry, me_key));
  F("dk_entry_value", offsetof(PyDictKeyEntry, me_value));
#if PY_VERSION_HEX >= 0x030B0000
  F("dk_log2", 1);
  F("dk_log2_size", offsetof(struct _dictkeysobject, dk_log2_size));
  F("dk_log2_index_bytes", offsetof(struct _dictkeysobject, dk_log2_index_bytes));
  F("dk_kind", offsetof(struct _dictkeysobject, dk_kind));
  F("dk_uentry_size", sizeof(PyDictUnicodeEntry));
  F("dk_uentry_key", offsetof(PyDictUnicodeEntry, me_key));
  F("dk_uentry_value", offsetof(PyDictUnicodeEntry, me_value));
  F("dv_values", offsetof(PyDictValues, values));
  F("tpf_managed_dict", Py_TPFLAGS_MANAGED_DICT);
#else
  F("dk_size", offsetof(struct _dictkeysobject, dk_size));
#endif
#if PY_VERSION_HEX >= 0x030D0000
  F("attr_mode", 4); /* SMP_ATTR_INLINE */
  F("dv_valid", offsetof(PyDictValues, valid));
  F("dv_capacity", offsetof(PyDictValues, capacity));
  F("tpf_inline_values", Py_TPFLAGS_INLINE_VALUES);
  F("obj_inline_values", sizeof(PyObject)); /* _PyObject_InlineValues */
  FS("obj_managed_dict", MANAGED_DICT_OFFSET);
#elif PY_VERSION_HEX >= 0x030C0000
  F("attr_mode", 3); /* SMP_ATTR_DORV: _PyObject_DictOrValuesPointer, tagged */
  FS("obj_managed_dict", -3 * (long)sizeof(PyObject *));
#elif PY_VERSION_HEX >= 0x030B0000
  F("attr_mode", 2); /* SMP_ATTR_VALUES_PTR: _PyObject_ValuesPointer */
  FS("obj_managed_dict", MANAGED_DICT_OFFSET);
  FS("obj_values_ptr", -4 * (long)sizeof(PyObject *));
#else
  F("attr_mode", 1); /* SMP_ATTR_DICTOFFSET */
#endif
#if PY_VERSION_HEX >= 0x030C0000
  F("long_size", offsetof(PyLongObject, long_value.lv_tag));
  F("long_digit", offsetof(PyLongObject, long_value.ob_digit));
  F("long_tagged", 1);
#else
  F("long_size", offsetof(PyVarObject, ob_size));
  F("long_digit", offsetof(PyLongObject, ob_digit));
#endif
  printf("  },\n");
  return 0;
}
#else

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
  /* torn-stack check: recursion counters, Py_SIZE(code) */
#if PY_VERSION_HEX < 0x030C0000
  F("ts_rec_remaining", offsetof(PyThreadState, recursion_remaining));
  F("ts_rec_limit", offsetof(PyThreadState, recursion_limit));
#else
  F("ts_rec_remaining", offsetof(PyThreadState, py_recursion_remaining));
  F("ts_rec_limit", offsetof(PyThreadState, py_recursion_limit));
#endif
  F("co_ob_size", offsetof(PyVarObject, ob_size));
#else
  F("ts_frame", offsetof(PyThreadState, frame));
  F("fr_code", offsetof(PyFrameObject, f_code));
  F("fr_back", offsetof(PyFrameObject, f_back));
  F("fr_instr", offsetof(PyFrameObject, f_lasti));
  F("fr_size", sizeof(PyFrameObject));
  /* torn-stack check: recursion depth, frame running state, code bytes, flags */
  F("ts_rec_depth", offsetof(PyThreadState, recursion_depth));
#if PY_VERSION_HEX >= 0x030A0000
  F("fr_state", offsetof(PyFrameObject, f_state)); /* running: FRAME_EXECUTING (0) */
#else
  F("fr_state", offsetof(PyFrameObject, f_executing)); /* running: 1 */
#endif
  F("co_code", offsetof(PyCodeObject, co_code));
  F("co_flags", offsetof(PyCodeObject, co_flags));
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
#endif
