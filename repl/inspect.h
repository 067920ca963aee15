/* inspect.h — the sampling side of the commands that only look at a process
 * (dump, top, live): one target, or with --subprocesses its Python children
 * too, with the py-spy options --gil and --native. Nothing is stored. */
#ifndef BF_INSPECT_H
#define BF_INSPECT_H

#include <stddef.h>

#include "sampler.h"

typedef struct bf_inspect bf_inspect;

typedef struct bf_inspect_opts {
  int gil_only;               /* only the thread holding the GIL */
  int native;                 /* merged Python + C stacks (stops threads) */
  const char *native_threads; /* NULL or the --native-threads filter */
  int subprocesses;           /* Python children (and deeper) too */
  int native_stop_wait_ns;    /* 0 = library default */
  int settled;                /* one-shot (dump): BF_SMP_WANT_SETTLED reads */
} bf_inspect_opts;

/* Attach to pid (and, with subprocesses, its Python children). Prints one
 * line on failure and returns the exit status (1; 2 for a bad filter).
 * OUT: *out. */
int bf_inspect_open(int pid, const bf_inspect_opts *o, bf_inspect **out);

/* Destroy (resumes and detaches native-traced threads). Accepts NULL. */
void bf_inspect_free(bf_inspect *l);

/* Python version of the first target (borrowed). */
const char *bf_inspect_python_version(const bf_inspect *l);

/* Called once per target per sample: its handle (for bf_smp_locals; NULL
 * with --native), pid, version and build, threads. */
typedef int (*bf_inspect_fn)(void *ud, bf_smp *h, int pid, const char *version, const char *build,
                          const bf_smp_thread *th, size_t n);

/* Sample every target once (torn reads retried up to tries times; 1 = no
 * retry) and call fn for each. Children found since the last look are
 * attached first (at most once a second); children that exited are dropped.
 * Returns 0; -ESRCH when the first target is gone; -EIO when every target's
 * read was torn (*invalid counts torn targets); other negative errno with the
 * message in bf_inspect_errmsg. */
int bf_inspect_sample(bf_inspect *l, int tries, bf_inspect_fn fn, void *ud, int *invalid);

/* What the kernel says thread t waits on (the kernel lens, kstate.c), e.g.
 * "recvfrom tcp 127.0.0.1:5432", "futex GIL", "read pipe", "clock_nanosleep";
 * NULL when it is running, or when it was not read (--native). */
const char *bf_inspect_wait(const bf_smp_thread *t);
/* The wait class of t: "network", "disk", "lock", "gil", "sleep", "fault",
 * "other", "cpu"; NULL when not read. */
const char *bf_inspect_wait_class(const bf_smp_thread *t);

/* Last error (never NULL). */
const char *bf_inspect_errmsg(const bf_inspect *l);

/* Number of processes being looked at now. */
size_t bf_inspect_count(const bf_inspect *l);

#endif
