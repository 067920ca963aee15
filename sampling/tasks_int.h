/* tasks_int.h — what tasks.c shares with its readers of other task kinds:
 * pure-Python Tasks (tasks_py.c) and, on 3.14+, the _asyncio module's
 * debug offsets (tasks_314.c). Internal to sampling/.
 */
#ifndef BF_SMP_TASKS_INT_H
#define BF_SMP_TASKS_INT_H

#include <stdint.h>

#include "smp_int.h"
#include "tasks.h"

/* Kinds of object the task reader follows, from their type's tp_name.
 * TK_PYTASK: asyncio's pure-Python Task (asyncio.tasks._PyTask) or a
 * subclass of it: fields in its instance dict (tasks_py.c). */
enum tk_kind { TK_OTHER, TK_NONE, TK_CORO, TK_GEN, TK_TASK, TK_FUTITER, TK_FUT, TK_WEAKREF, TK_SET, TK_STR, TK_INT,
               TK_PYTASK };

/* Kind of the object at obj (one read of its type pointer; the type's kind
 * is cached). TK_OTHER when unreadable. */
int tk_obj_kind(bf_smp_tasks *tk, uint64_t obj);
/* The sampler handle tk reads through (borrowed). */
bf_smp *tk_sampler(bf_smp_tasks *tk);

/* ---- pure-Python Tasks (tasks_py.c) ---- */
typedef struct tk_py tk_py;

/* The fields of a pending pure-Python Task: its coroutine (a coroutine or
 * generator, type-checked), the future it is parked on (0: none) and its
 * name object (checked later, as a C Task's). */
typedef struct tk_py_task {
  uint64_t coro, waiter, name_obj;
} tk_py_task;

/* New cache of the key and value objects seen (interned attribute names,
 * state strings, None). NULL when out of memory. */
tk_py *tk_py_new(void);
/* Destroy; accepts NULL. */
void tk_py_free(tk_py *py);
/* Read the Task at task. OUT: *out. Returns 1 (pending), 0 (done or
 * cancelled), -ENOTSUP (no attribute layout for this Python: no instance
 * dicts can be read) or -EIO (not a readable Task now). */
int tk_py_read(bf_smp_tasks *tk, tk_py *py, uint64_t task, tk_py_task *out);

#endif
