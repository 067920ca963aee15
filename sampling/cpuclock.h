/* cpuclock.h — the CPU clock seen from outside: for each thread of a target,
 * the CPU time it really used and whether it was on a CPU during a given
 * moment (e.g. while the sampler read its stack).
 *
 * Preferred method "perf-switch": one perf event per thread (task clock,
 * counting) with context-switch records in a small ring buffer; the kernel
 * writes the exact time of every switch in and out, so on-CPU intervals are
 * known to the nanosecond without a system call per tick (the rings are
 * polled); the CPU the scheduler spends around each switch, which the
 * thread's CPU time includes and the intervals miss, is added from schedstat
 * read now and then while the thread is off a CPU. Fallback "schedstat" (perf events refused): /proc/PID/task/TID/stat
 * state R read right after the stack (a thread waiting for a CPU counts as
 * on one), and /proc/.../schedstat CPU time.
 * Thread ids are host tids.
 */
#ifndef BF_CPUCLOCK_H
#define BF_CPUCLOCK_H

#include <stdint.h>

typedef struct bf_cpuclock bf_cpuclock;

/* New clock for process pid (host pid); picks the method (see
 * bf_cpuclock_method). interval_ns: the sampling period (sizes the rings).
 * Environment BIFOCAL_CPU_CLOCK=schedstat forces the fallback.
 * NULL when out of memory. */
bf_cpuclock *bf_cpuclock_new(int pid, int64_t interval_ns);

/* Destroy; accepts NULL. */
void bf_cpuclock_free(bf_cpuclock *c);

/* "perf-switch" or "schedstat". Static string. */
const char *bf_cpuclock_method(const bf_cpuclock *c);
/* Why that method (one line). Borrowed until bf_cpuclock_free. */
const char *bf_cpuclock_why(const bf_cpuclock *c);

/* Start of a tick's accounting: fold in the kernel's records so far. */
void bf_cpuclock_drain(bf_cpuclock *c);

/* Thread tid (after bf_cpuclock_drain), whose stack was read between at_ns
 * and until_ns: OUT *cpu_ns its CPU time since the
 * clock first saw it (perf-switch: exact as of its last switch, and within
 * CC_SYNC_TICKS ticks of its schedstat); *on_cpu 1 when it was on a CPU
 * at at_ns, or was preempted (not gone to sleep or to wait) between from_ns
 * and at_ns and has not run since (monotonic ns, not in the future;
 * schedstat: found in state R now), and did not go to sleep or to wait
 * before until_ns (its stack may show where it waits, not where it ran);
 * *known 0 when the thread is new and that is not known yet (then *on_cpu
 * is 0); *switch_ns the part of *cpu_ns that is the scheduler's work around
 * its switches (perf-switch; 0 else), which belongs where it waits;
 * *waiting 1 when it went to sleep or to wait before at_ns and has not run
 * since (its stack is where it waits; perf-switch only). Returns 0, or
 * -ENOMEM. */
int bf_cpuclock_thread(bf_cpuclock *c, int64_t tid, int64_t from_ns, int64_t at_ns,
                       int64_t until_ns, int64_t *cpu_ns, int *on_cpu, int *known,
                       int64_t *switch_ns, int *waiting);

/* When the calling thread (the sampler) last went onto a CPU (monotonic ns),
 * from its own context-switch records: a thread of the target that was
 * still running then, or was displaced by it, was on a CPU at that moment.
 * -1 when not known (perf events refused; not back on a CPU since the first
 * call, which opens the event for the calling thread). */
int64_t bf_cpuclock_self_in(bf_cpuclock *c);

/* Sum of the CPU time of every thread the clock has seen (ns). */
int64_t bf_cpuclock_total_ns(const bf_cpuclock *c);

/* Context-switch records the kernel dropped (ring full), summed. */
uint64_t bf_cpuclock_lost(const bf_cpuclock *c);

#endif
