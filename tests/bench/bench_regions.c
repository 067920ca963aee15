/* bench_regions.c — which remote regions one sample reads, and what they
 * cost in pinned pages (not a timed test): attaches to a 20-deep spinning
 * stack, takes WARM samples, then logs every process_vm_readv of the next
 * samples (iovecs, bytes, pages spanned) and names each region of the
 * prefetch plan (interpreter, GIL, thread state, frame, code object).
 * With a third argument, the target is that script instead (run with
 * argument 1000), sampled at about RATE (fourth argument, default 20000 Hz)
 * as record would, with the torn-stack figures (re-read, cut, given up) and
 * reads per walk: the fast recursion of test_consistent_stacks.py, say.
 * usage: bench_regions PYTHON [SAMPLES [SCRIPT [RATE]]]
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench_deep20.h"
#include "sampler.h"
#include "smp_int.h"

static const char *TARGET = BENCH_DEEP20_TARGET;

static pid_t spawn(const char *py, const char *script) {
  int fds[2];
  if (pipe(fds) < 0) return -1;
  pid_t c = fork();
  if (c == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    dup2(fds[1], 1);
    close(fds[0]);
    if (script)
      execl(py, py, script, "1000", (char *)NULL);
    else
      execl(py, py, "-c", TARGET, (char *)NULL);
    _exit(127);
  }
  close(fds[1]);
  char buf[8];
  ssize_t n = script ? 6 : read(fds[0], buf, 6);
  close(fds[0]);
  if (script) { /* no ready line: give it time to start */
    struct timespec d = {0, 500000000};
    nanosleep(&d, NULL);
  }
  return n == 6 ? c : -1;
}

static int logging;
static unsigned long calls, iovs, bytes, pages;

static unsigned long span_pages(uint64_t a, size_t len) {
  return len ? (unsigned long)(((a + len - 1) >> 12) - (a >> 12) + 1) : 0;
}

static ssize_t log_readv(void *ud, const struct iovec *l, size_t nl, const struct iovec *r, size_t nr) {
  pid_t pid = (pid_t)(intptr_t)ud;
  calls++;
  iovs += nr;
  for (size_t i = 0; i < nr; i++) {
    bytes += r[i].iov_len;
    pages += span_pages((uint64_t)(uintptr_t)r[i].iov_base, r[i].iov_len);
    if (logging)
      printf("  readv %lu iov %zu: %#lx +%zu (%lu pages)\n", calls, i, (unsigned long)(uintptr_t)r[i].iov_base,
             r[i].iov_len, span_pages((uint64_t)(uintptr_t)r[i].iov_base, r[i].iov_len));
  }
  return process_vm_readv(pid, l, nl, r, nr, 0);
}

static const char *what(bf_smp *h, uint64_t a) {
  static char buf[64];
  if (a >= h->runtime_addr && a < h->runtime_addr + 0x10000) return "_PyRuntime";
  if (a >= h->interp_head && a < h->interp_head + 0x40000) return "interpreter";
  for (size_t i = 0; i < h->nslots; i++)
    if (a >= h->slots[i].tstate && a < h->slots[i].tstate + h->lay.ts_read) return "thread state";
  for (size_t i = 0; i < h->nframes; i++)
    if (a == h->frame_addr[i]) {
      snprintf(buf, sizeof buf, "frame %zu", i);
      return buf;
    }
  size_t it = 0;
  for (smp_code_slot *e; (e = bf_pmap_next(&h->codes, &it));)
    if (a >= e->addr && a < e->addr + 512) return "code object";
  return "?";
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: bench_regions PYTHON [SAMPLES]\n");
    return 2;
  }
  int nsamp = argc > 2 ? atoi(argv[2]) : 3;
  const char *script = argc > 3 ? argv[3] : NULL;
  double rate = argc > 4 ? atof(argv[4]) : 20000;
  pid_t pid = spawn(argv[1], script);
  if (pid < 0) return 1;
  bf_smp *h = bf_smp_new();
  if (bf_smp_attach(h, pid) < 0) {
    fprintf(stderr, "bench: %s\n", bf_smp_errmsg(h));
    kill(pid, SIGKILL);
    return 1;
  }
  smp_set_reader(h, log_readv, (void *)(intptr_t)pid);
  const bf_smp_thread *t;
  size_t n;
  for (int i = 0; i < 2000; i++) bf_smp_sample(h, 0, &t, &n);
  calls = iovs = bytes = pages = 0;
  enum { M = 100000 };
  bf_smp_consistency_stats c0, c1;
  bf_smp_consistency(h, &c0);
  uint64_t builds0 = h->plan_builds;
  int bad = 0, m = script ? M / 5 : M;
  struct timespec gap = {0, (long)(1e9 / rate)};
  struct rusage ru0, ru1;
  getrusage(RUSAGE_SELF, &ru0);
  for (int i = 0; i < m; i++) {
    if (bf_smp_sample(h, 0, &t, &n) < 0) bad++;
    if (script) nanosleep(&gap, NULL);
  }
  getrusage(RUSAGE_SELF, &ru1);
  double us_user = ((double)(ru1.ru_utime.tv_sec - ru0.ru_utime.tv_sec) * 1e6 +
                    (double)(ru1.ru_utime.tv_usec - ru0.ru_utime.tv_usec)) / m;
  double us_sys = ((double)(ru1.ru_stime.tv_sec - ru0.ru_stime.tv_sec) * 1e6 +
                   (double)(ru1.ru_stime.tv_usec - ru0.ru_stime.tv_usec)) / m;
  bf_smp_consistency(h, &c1);
  uint64_t walks = m + (c1.retries - c0.retries);
  printf("python %s: per sample over %d samples: %.3f readv, %.2f iovecs, %.0f bytes, %.2f pages; "
         "per walk %.3f readv; re-read %.2f%%, cut %.2f%%, given up %.3f%% (%d failed); "
         "CPU per sample %.2f us user + %.2f us system; prefetch plan rebuilt in %.2f%% of walks\n",
         bf_smp_python_version(h), m, (double)calls / m, (double)iovs / m, (double)bytes / m,
         (double)pages / m, (double)calls / (double)walks, 100.0 * (double)(c1.retries - c0.retries) / m,
         100.0 * (double)(c1.cut - c0.cut) / m, 100.0 * (double)(c1.invalid - c0.invalid) / m, bad,
         us_user, us_sys, 100.0 * (double)(h->plan_builds - builds0) / (double)walks);
  logging = 1;
  for (int s = 0; s < nsamp; s++) {
    calls = 0;
    printf("sample %d:\n", s);
    bf_smp_sample(h, 0, &t, &n);
    printf("  hot set: %zu regions in %zu spans (%zu bytes)\n", h->npref, h->plan_ns, h->plan_total);
    for (size_t i = 0; i < h->npref; i++)
      printf("    %#lx +%u %s\n", (unsigned long)h->pref[i].addr, h->pref[i].len, what(h, h->pref[i].addr));
  }
  kill(pid, SIGKILL);
  waitpid(pid, NULL, 0);
  bf_smp_free(h);
  return 0;
}
