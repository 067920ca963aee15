/* native.h — mixed Python + C stacks (`--native`): stop chosen threads of
 * a target briefly with ptrace, unwind their C stacks with libunwind and merge
 * them with the Python frames the walker reads at the same moment.
 *
 * A bf_smp_native handle rides on an attached bf_smp handle (borrowed, must
 * outlive it). Threads are seized (PTRACE_SEIZE, never PTRACE_ATTACH) the
 * first time they are sampled and released by bf_smp_native_free; if the
 * profiler dies instead, the kernel detaches them and they keep running.
 * While a handle lives SIGCHLD is blocked in the calling thread (stops are
 * awaited with sigtimedwait); bf_smp_native_free restores the mask.
 * Fallible functions return 0 or a negative errno; the detail is on the
 * handle (bf_smp_native_errmsg). The library never prints.
 *
 * Merged frames: a native frame is a bf_smp_frame with BF_SMP_FRAME_NATIVE
 * set, line 0, and a code whose filename is the library's path as mapped in
 * the target, qualname the bare symbol (or "0x<file offset>" when unknown)
 * and firstlineno 0: the function identity (library path, symbol, 0).
 */
#ifndef BF_SMP_NATIVE_H
#define BF_SMP_NATIVE_H

#include <stddef.h>
#include <stdint.h>

#include "jsonw.h"
#include "sampler.h"

typedef struct bf_smp_native bf_smp_native;

/* New handle for the target h is attached to. threads: NULL (every Python
 * thread) or a comma list of native tids and globs on thread names
 * ("1234,worker-*") choosing which threads are stopped and unwound; the
 * others are sampled with Python frames only.
 * OUT: *out. Errors: -EINVAL bad filter, -ENOTSUP not x86-64 or libunwind
 * refuses, -ENOMEM, with the message on h (bf_smp_errmsg). */
int bf_smp_native_new(bf_smp *h, const char *threads, bf_smp_native **out);

/* Resume and detach every seized thread (bounded wait), then free. Accepts NULL. */
void bf_smp_native_free(bf_smp_native *n);

/* Last error (never NULL). Borrowed until the next call on n. */
const char *bf_smp_native_errmsg(const bf_smp_native *n);

/* One merged sample: stop the chosen threads, snapshot their registers and
 * stack, walk the Python frames (bf_smp_sample with want), resume, unwind
 * the snapshots and merge. Same contract as bf_smp_sample: OUT *threads
 * (borrowed until the next call on n), *count; threads whose C stack was
 * unwound carry BF_SMP_NATIVE. Threads vanishing mid-sample are skipped.
 * Errors: -ESRCH target gone, -EIO torn read (sample invalid), -EINTR a
 * signal arrived while waiting for a stop (threads are resumed), -EPERM
 * cannot trace (message says why). */
int bf_smp_native_sample(bf_smp_native *n, unsigned want, const bf_smp_thread **threads,
                         size_t *count);

/* Sleep until deadline_ns (CLOCK_MONOTONIC) while handing on, at once, the
 * signals the seized threads receive (a seized thread waits for its tracer
 * in a signal-delivery-stop). Returns 0, or -EINTR when a signal handler of
 * ours ran (check the stop flag). */
int bf_smp_native_wait_until(bf_smp_native *n, int64_t deadline_ns);

/* How long a stopped thread is held waiting for the other chosen threads
 * to stop (default 2 ms; the wait for the first stop is up to 100 ms and
 * costs nothing, nothing being stopped yet). A thread stopping later gets no
 * C frames in that sample (counted as a late stop) and is resumed the moment
 * its stop arrives. */
void bf_smp_native_set_stop_wait(bf_smp_native *n, int64_t ns);

/* Launch mode: the target is our child and also our tracee, so its exit is
 * reported through ptrace waits. Consume pending events without blocking;
 * returns 1 and sets *status (a wait status) once the main thread exited. */
int bf_smp_native_child_exited(bf_smp_native *n, int *status);

/* Stop-time statistics for a session's extra_json: writes "native":{...}
 * as the next member of the object open in w. */
void bf_smp_native_stats_write(const bf_smp_native *n, bf_jw *w);

/* One human line about the intrusion from a session's extra_json ("threads
 * stopped 412 times, median 38 us, p99 95 us, max 0.4 ms, total 17 ms").
 * Returns 0, or -ENOENT when extra_json has no native figures (or no stop). */
int bf_smp_native_summary(const char *extra_json, char *buf, size_t len);

#endif
