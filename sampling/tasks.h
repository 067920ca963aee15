/* tasks.h — asyncio tasks as logical threads: each pending C _asyncio.Task of
 * the target's main interpreter, read from outside on every sample, becomes a
 * synthetic bf_smp_thread named "task:NAME" whose stack is the task's logical
 * stack (root frame: the task name; then the awaiting coroutines outermost
 * first; then, while the task runs, the frames of its running step).
 */
#ifndef BF_SMP_TASKS_H
#define BF_SMP_TASKS_H

#include <stddef.h>

#include "sampler.h"

typedef struct bf_smp_tasks bf_smp_tasks;

/* Task state, kept in the synthetic thread's flags (and the stored sample's
 * flags: bits the store passes through). A task not running is also IDLE, so
 * the cpu clock never charges it. */
#define BF_SMP_TASK_RUNNING 0x100 /* its coroutine is executing on a thread */
#define BF_SMP_TASK_READY 0x200   /* scheduled, waiting for the loop */
#define BF_SMP_TASK_WAITING 0x400 /* parked at an await on a future */

/* Root frame's file name: the qualname of that frame is the task name. */
#define BF_SMP_TASK_FILE "<task>"

/* New reader bound to an attached handle h (borrowed; h outlives it). NULL
 * when out of memory. */
bf_smp_tasks *bf_smp_tasks_new(bf_smp *h);
/* Destroy; accepts NULL. */
void bf_smp_tasks_free(bf_smp_tasks *tk);

/* After bf_smp_sample returned th[0..n): OUT *out, *nout: those threads
 * followed by one synthetic thread per task (borrowed until the next call).
 * Tasks that cannot be read are left out; never fails the sample: with no
 * asyncio (or an unsupported layout) *out is th. */
void bf_smp_tasks_sample(bf_smp_tasks *tk, const bf_smp_thread *th, size_t n,
                         const bf_smp_thread **out, size_t *nout);

/* What the reader found, as a short static/borrowed sentence for the
 * session's summary ("" when nothing to say). */
const char *bf_smp_tasks_status(const bf_smp_tasks *tk);

#endif
