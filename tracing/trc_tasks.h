/* trc_tasks.h — asyncio await sites, counted exactly by the tracer: every
 * suspension of a coroutine (PY_YIELD of a CO_COROUTINE frame on 3.12+, the
 * profile 'return' of a suspended coroutine frame on 3.8-3.11) counts one hit
 * of the await at that instruction. Task steps need nothing here: a
 * coroutine's resumes are its function row's `resumes`. Also the wall time of
 * every task (outermost coroutine) from its first step to its end.
 * Everything here runs with the GIL held.
 */
#ifndef BF_TRC_TASKS_H
#define BF_TRC_TASKS_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <frameobject.h>

#pragma GCC visibility push(hidden)

/* 3.12+: PY_YIELD of code co at instruction offset (a Python int, bytes). */
void trc_tasks_yield(PyCodeObject *co, PyObject *offset);

/* 3.8-3.11: a profile 'return' event of frame running code co (has_value:
 * its value is not NULL): an await's hit, or a coroutine's end. */
void trc_tasks_frame_return(PyCodeObject *co, PyFrameObject *frame, int has_value);

/* The first step of coroutine code co (frame: its frame, or NULL for the
 * current one): when no coroutine started it, a task's start. */
void trc_tasks_coro_start(PyCodeObject *co, PyFrameObject *frame);

/* 3.12+: PY_RETURN / PY_UNWIND of code co (its frame is the current one). */
void trc_tasks_coro_end(PyCodeObject *co);

/* _bifocal_trace._task_lifetimes(): [(file, qualname, firstlineno, tasks,
 * total_ns, max_ns), ...] per outermost coroutine function of the tasks that
 * finished: wall time from their first step to their end. */
PyObject *trc_tasks_lifetimes(PyObject *self, PyObject *noargs);

/* _bifocal_trace._await_sites(): [(file, qualname, firstlineno, line,
 * hits), ...] of every await site that suspended since the module loaded,
 * sites on one line summed. */
PyObject *trc_tasks_await_sites(PyObject *self, PyObject *noargs);

#pragma GCC visibility pop

#endif
