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
/* tasks.c's batched reader: n regions of len bytes at addrs[i] (0: skip).
 * OUT: *buf (n * len bytes), *ok (n flags), valid until its next call. */
int tk_read_many(bf_smp_tasks *tk, const uint64_t *addrs, size_t n, size_t len,
                 const unsigned char **buf, const unsigned char **ok);

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
/* Read the n Tasks at addrs together: the attribute layout learned once per
 * class and shared keys object, then each level (the instance's dict or
 * values pointer, its values, its coroutine's type) read for all Tasks in
 * one batch. Tasks whose attributes are not in shared-keys values go
 * through tk_py_read, a bounded number per call. OUT: out[i], rc[i] as
 * tk_py_read's. Returns how many were not read for that bound, or -ENOMEM. */
int tk_py_read_many(bf_smp_tasks *tk, tk_py *py, const uint64_t *addrs, size_t n, tk_py_task *out,
                    int *rc);

/* ---- 3.14+: the _asyncio module's debug offsets (tasks_314.c) ----
 * NOT VERIFIED against a running 3.14 (none was available): written from
 * CPython 3.14's Modules/_asynciomodule.c (_Py_AsyncioModuleDebugOffsets,
 * section .AsyncioDebug, symbol _AsyncioDebug) and
 * Include/internal/pycore_debug_offsets.h, exercised by a unit test over a
 * fake memory image. */
typedef struct tk314 {
  uint64_t task_size, task_fut_state, task_fut_waiter, task_coro, task_name, task_node;
  uint64_t is_tasks_head, ts_tasks_head; /* llist heads in the interpreter / thread state */
  uint64_t gen_iframe, gen_frame_state;  /* PyGenObject (from _Py_DebugOffsets) */
  uint64_t fr_stackpointer;              /* _PyInterpreterFrame.stackpointer */
  uint64_t llist_next;                   /* struct llist_node.next */
  uint64_t long_tag, long_digit;         /* PyLongObject (an unnamed Task's name is its number) */
} tk314;

#define TK314_ASYNCIO_LEN 104 /* 13 uint64: task 7, interpreter 2, thread 4 */
#define TK314_PYDEBUG_LEN 760 /* _Py_DebugOffsets of 3.14 */

/* Check and take the offsets: adbg (the target's _AsyncioDebug) and pydbg
 * (its _Py_DebugOffsets, at the start of _PyRuntime). Fields the sampler
 * needs beyond the exported ones (the Task's state and waiter) are placed
 * from the TaskObj layout and accepted only if the exported ones sit where
 * that layout puts them. OUT: *out; *msg says why not. 0, -EINVAL or
 * -ENOTSUP (a version whose _Py_DebugOffsets layout is not known). */
int tk314_parse(const unsigned char *adbg, size_t alen, const unsigned char *pydbg, size_t plen,
                tk314 *out, const char **msg);
/* Find _AsyncioDebug in the target (the _asyncio extension, or libpython /
 * the executable when built in) and parse it with the target's
 * _Py_DebugOffsets. OUT: *out. -ENOENT while _asyncio is not loaded. */
int tk314_find(bf_smp *h, tk314 *out, const char **msg);
/* Append to addrs[*n..max) the Tasks linked in interp's thread states'
 * lists, then in the interpreter's own (tasks of finished threads). Bounded
 * by max and by SMP_MAX_THREADS threads; a list that does not come back to
 * its head ends at the first unreadable node. OUT: *n. */
int tk314_tasks(bf_smp *h, const tk314 *o, uint64_t interp, uint64_t *addrs, size_t max, size_t *n);
/* tasks.c: read 3.14 Tasks with offsets o from now on (once tk314_find
 * found them; tests hand in their own). */
void tk_use_314(bf_smp_tasks *tk, const tk314 *o);

#endif
