/* trc_tasks.h — asyncio await sites, counted exactly by the tracer: every
 * suspension of a coroutine (PY_YIELD of a CO_COROUTINE frame on 3.12+, the
 * profile 'return' of a suspended coroutine frame on 3.8-3.11) counts one hit
 * of the await at that instruction. Task steps need nothing here: a
 * coroutine's resumes are its function row's `resumes`. Also the wall time of
 * every task (outermost coroutine) from its first step to its end.
 * The tables live in a trc_tasks the caller owns (the collector's state,
 * trc_module.h); everything here runs with the GIL held.
 */
#ifndef BF_TRC_TASKS_H
#define BF_TRC_TASKS_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <frameobject.h>

#include "pmap.h"

#pragma GCC visibility push(hidden)

/* Finished tasks of one outermost coroutine function. */
typedef struct trc_task_life {
  PyCodeObject *co; /* borrowed from the code table's reference */
  int64_t n, total_ns, max_ns;
} trc_task_life;

/* Since the module loaded (never emptied): every table is a bf_pmap. */
typedef struct trc_tasks {
  bf_pmap codes;  /* code object -> its id and life row; holds a strong reference to each */
  uint32_t ncodes;
  bf_pmap sites;  /* code id << 32 | instruction offset -> suspensions */
  bf_pmap lives;  /* live outermost coroutine's address -> its start (a finished one: deleted) */
  trc_task_life *lifes; /* in order of first finish */
  size_t nlifes;
} trc_tasks;

/* An empty set of tables (zeroed, with the maps' slot sizes). */
void trc_tasks_init(trc_tasks *tk);

/* 3.12+: PY_YIELD of code co at instruction offset (a Python int, bytes). */
void trc_tasks_yield(trc_tasks *tk, PyCodeObject *co, PyObject *offset);

/* 3.8-3.11: a profile 'return' event of frame running code co (has_value:
 * its value is not NULL): an await's hit, or a coroutine's end. */
void trc_tasks_frame_return(trc_tasks *tk, PyCodeObject *co, PyFrameObject *frame, int has_value);

/* The first step of coroutine code co (frame: its frame, or NULL for the
 * current one): when no coroutine started it, a task's start. */
void trc_tasks_coro_start(trc_tasks *tk, PyCodeObject *co, PyFrameObject *frame);

/* 3.12+: PY_RETURN / PY_UNWIND of code co (its frame is the current one). */
void trc_tasks_coro_end(trc_tasks *tk, PyCodeObject *co);

/* [(file, qualname, firstlineno, tasks, total_ns, max_ns), ...] per outermost
 * coroutine function of the tasks that finished: wall time from their first
 * step to their end. A new reference, or NULL with a Python error. */
PyObject *trc_tasks_lifetimes(const trc_tasks *tk);

/* [(file, qualname, firstlineno, line, hits), ...] of every await site that
 * suspended, sites on one line summed. A new reference, or NULL with a
 * Python error. */
PyObject *trc_tasks_await_sites(const trc_tasks *tk);

#pragma GCC visibility pop

#endif
