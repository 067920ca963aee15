/* top.h — the aggregation behind `top` and `live` (top.c): per function
 * self/total sample counts and per thread status shares. */
#ifndef BF_TOP_H
#define BF_TOP_H

#include <stdint.h>
#include <stdio.h>

#include "pmap.h"
#include "sampler.h"

typedef struct bf_top_fn {
  uint64_t key; /* the code pointer: the bf_pmap key */
  const bf_smp_code *code;
  int64_t self, total;
  int64_t stamp;
} bf_top_fn;

typedef struct bf_top_thread {
  int64_t tid;
  int pid; /* process of the thread (--subprocesses) */
  char name[32];
  int py_named; /* name is the Python thread name */
  int64_t samples, on_cpu, gil, idle;
  const bf_smp_code *last_top;
  /* the kernel lens: what it waits on now ("recvfrom tcp 127.0.0.1:5432",
   * "" when running or not read), and its run-queue delay (schedstat) over
   * the window: the share of the time it was runnable but not running */
  char wait[160];
  int64_t rd_first, rd_last, ts_first, ts_last; /* ns; ts 0: none read yet */
} bf_top_thread;

typedef struct bf_top {
  bf_pmap fns; /* of bf_top_fn */
  bf_top_thread *th;
  size_t nth, cap_th;
  int64_t samples, ticks, invalid, stamp;
  int with_idle; /* --idle: idle threads count in the function table too */
} bf_top;

/* Forget everything but the with_idle setting. */
void bf_top_reset(bf_top *t);
/* One tick of pid's threads (call bf_top_tick once per tick first). */
int bf_top_add_pid(bf_top *t, int pid, const bf_smp_thread *th, size_t n);
void bf_top_tick(bf_top *t);
/* bf_inspect_fn adding one process's threads to the bf_top ud (bf_top_add_pid). */
int bf_top_inspect_add(void *ud, bf_smp *h, int pid, const char *version, const char *build, const bf_smp_thread *th,
                    size_t n);
/* Function table: at most max_rows rows, lines cut to width (0 = no cut). */
void bf_top_print(bf_top *t, FILE *f, int by_total, int max_rows, int width, const char *eol);
/* Thread table; with_pid adds a pid column (process trees). */
void bf_top_print_threads(bf_top *t, FILE *f, int with_pid, int width, const char *eol);
void bf_top_free(bf_top *t);

#endif
