/* memsample.h — record --memory: read the target's memory at each tick
 * (/proc/PID/statm: resident and anonymous resident pages) and charge each
 * change to the stack that ran in between (memsample.c). */
#ifndef BF_MEMSAMPLE_H
#define BF_MEMSAMPLE_H

#include <stddef.h>
#include <stdint.h>

#include "jsonw.h"
#include "record_int.h"

/* Start reading pid's memory (the baseline is read now). NULL when out of
 * memory; a statm that cannot be opened gives a handle that never charges
 * (rec_memory_json says why). */
rec_memory *rec_memory_new(int pid);
void rec_memory_free(rec_memory *m); /* accepts NULL */

/* Read the memory now (right after the stacks were read); the next
 * rec_memory_tick charges what changed. */
void rec_memory_read(rec_memory *m);

/* One tick: when the memory read by rec_memory_read changed since the last
 * tick, charge the change at ts (ns since session start) to the GIL holder
 * among th[0..n), else to the last GIL holder a tick saw (a thread on a CPU
 * only where no GIL holder was ever seen), split with the function the tick
 * before saw when both have rates of their own; a change charged to an earlier
 * tick's stack joins that tick's row when the signs agree. Rows are buffered
 * and written about once a second. 0, or a fatal negative errno (a locked
 * database keeps rows in memory, bounded, the excess counted). */
int rec_memory_tick(bf_store *st, target *t, const bf_smp_thread *th, size_t n, int64_t ts);

/* Write every buffered row (session end). 0 or a negative errno. */
int rec_memory_flush(bf_store *st, target *t);

/* With --memory, write "memory":{...} (what was read, rows, drops) as the
 * next member of the object open in w; nothing without. */
void rec_memory_json(const target *t, bf_jw *w);

#endif
