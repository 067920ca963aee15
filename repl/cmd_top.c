/* cmd_top.c — `bifocal top PID [--duration S] [--rate HZ]`: sample a process
 * for a while and print one table of its hottest functions (self and total
 * share, with sample counts); the table is top.c's, shared with `live`.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "audit.h"
#include "cli.h"
#include "clock.h"
#include "inspect.h"
#include "opts.h"
#include "sampler.h"
#include "top.h"

static void sleep_ns(int64_t ns) {
  struct timespec ts = {ns / 1000000000, ns % 1000000000};
  nanosleep(&ts, NULL);
}

int bf_cmd_top(bf_cli *cli, int argc, char **argv) {
  int64_t dur = 2000000000;
  double rate = 200;
  int limit = 20, pid, with_idle = 0, c;
  bf_inspect_opts lo = {0};
  if ((c = bf_opt_inspect("top", argc, argv, &pid, &lo, &rate, &dur, &with_idle, &limit)) >= 0) return c;
  if (lo.native && rate > 100) rate = 100; /* every sample stops the threads: gentler */
  bf_audit *au = NULL; /* audited before the target is touched */
  if ((c = bf_audit_begin_look(cli, "top", pid, &au))) return c;
  bf_inspect *l = NULL;
  if ((c = bf_inspect_open(pid, &lo, &l))) {
    bf_audit_end(au, "attach failed", 0);
    return c;
  }
  bf_top t = {0};
  t.with_idle = with_idle;
  int64_t start = bf_mono_ns(), interval = (int64_t)(1e9 / rate), next = start;
  int gone = 0, failed = 0;
  while (bf_mono_ns() - start < dur) {
    int torn = 0;
    int rc = bf_inspect_sample(l, 1, bf_top_inspect_add, &t, &torn);
    t.invalid += torn;
    if (rc == 0) bf_top_tick(&t);
    if (rc == -ESRCH) {
      gone = 1;
      break;
    }
    if (rc < 0 && rc != -EIO) {
      bf_cli_error("%s", rc == -ENOMEM ? "out of memory" : bf_inspect_errmsg(l));
      failed = 1;
      break;
    }
    next += interval;
    int64_t now = bf_mono_ns();
    if (next > now) sleep_ns(next - now);
  }
  size_t nproc = bf_inspect_count(l);
  char procs[64] = "";
  if (lo.subprocesses) snprintf(procs, sizeof procs, " and %zu subprocess%s", nproc - 1, nproc == 2 ? "" : "es");
  printf("Process %d%s: Python %s, %.1fs, %lld ticks, %lld %sthread-samples, %lld invalid%s%s%s\n\n", pid,
         procs, bf_inspect_python_version(l), (double)(bf_mono_ns() - start) / 1e9, (long long)t.ticks,
         (long long)t.samples, with_idle ? "" : "busy ", (long long)t.invalid, gone ? " (process exited)" : "",
         lo.gil_only ? ", GIL holder only" : "", lo.native ? ", with native frames" : "");
  bf_top_print(&t, stdout, 0, limit, 0, "\n");
  printf("\n");
  bf_top_print_threads(&t, stdout, lo.subprocesses, 0, "\n");
  bf_top_free(&t);
  bf_audit_end(au, failed ? bf_inspect_errmsg(l) : NULL, 0);
  bf_inspect_free(l);
  return failed;
}
