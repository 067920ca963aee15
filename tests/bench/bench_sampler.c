/* bench_sampler.c — figures of the external sampler (not a timed test):
 *  1. median cost of one thread-sample (bf_smp_sample) on a 20-deep stack;
 *  2. achieved rate and missed+invalid when 100 kHz is asked (record into a
 *     scratch store, wall and cpu clocks, one thread);
 *  3. reads per sample and profiler CPU per tick at 1 kHz on a stack that
 *     changes between samples.
 * usage: bench_sampler PYTHON [SECONDS]   (run by tests/bench/bench_sampler.py)
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench_deep20.h"
#include "sampler.h"
#include "store.h"

static const char *TARGET = BENCH_DEEP20_TARGET;

/* A stack that grows and shrinks between samples (3. below). */
static const char *TARGET_MOVING =
    "import sys\n"
    "def f(n):\n"
    "    if n == 0:\n"
    "        x = 0\n"
    "        for i in range(200):\n"
    "            x += i\n"
    "        return x\n"
    "    return f(n - 1)\n"
    "sys.stdout.write('ready\\n'); sys.stdout.flush()\n"
    "while True:\n"
    "    f(18)\n";

static int64_t mono(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* This process's CPU time (user + system). */
static int64_t cpu_ns(void) {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return ((int64_t)ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1000000000 +
         ((int64_t)ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1000;
}

static int cmp_i64(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return (x > y) - (x < y);
}

static pid_t spawn(const char *py, const char *code) {
  int fds[2];
  if (pipe(fds) < 0) return -1;
  pid_t c = fork();
  if (c == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL); /* never outlive the benchmark */
    dup2(fds[1], 1);
    close(fds[0]);
    execl(py, py, "-c", code, (char *)NULL);
    _exit(127);
  }
  close(fds[1]);
  char buf[8];
  if (read(fds[0], buf, 6) != 6) {
    close(fds[0]);
    return -1;
  }
  close(fds[0]);
  return c;
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: bench_sampler PYTHON [SECONDS]\n");
    return 2;
  }
  double secs = argc > 2 ? atof(argv[2]) : 3;
  pid_t pid = spawn(argv[1], TARGET);
  if (pid < 0) {
    fprintf(stderr, "bench: cannot start %s\n", argv[1]);
    return 1;
  }
  bf_smp *h = bf_smp_new();
  int rc = bf_smp_attach(h, pid);
  if (rc < 0) {
    fprintf(stderr, "bench: %s\n", bf_smp_errmsg(h));
    kill(pid, SIGKILL);
    return 1;
  }
  /* 1. per-sample cost, stacks only and with /proc status */
  enum { N = 20000, BLOCKS = 10 };
  static int64_t cost[N];
  const bf_smp_thread *t;
  size_t n;
  size_t depth = 0;
  int invalid = 0;
  for (int mode = 0; mode < 2; mode++) {
    unsigned want = mode ? BF_SMP_WANT_STATE : 0;
    uint64_t calls0 = bf_smp_read_calls(h);
    uint64_t bytes0 = bf_smp_read_bytes(h), iovs0 = bf_smp_read_iovs(h);
    bf_smp_consistency_stats cs0, cs1;
    bf_smp_consistency(h, &cs0);
    int64_t cpu0 = cpu_ns();
    /* in BLOCKS blocks spread over about a second: the host's speed comes
     * and goes in phases, so also report the quietest block's median */
    double best_block = 1e18;
    for (int i = 0; i < N; i++) {
      int64_t a = mono();
      rc = bf_smp_sample(h, want, &t, &n);
      cost[i] = mono() - a;
      if (rc < 0)
        invalid++;
      else if (n)
        depth = t[0].nframes;
      if ((i + 1) % (N / BLOCKS) == 0) {
        int64_t blk[N / BLOCKS];
        memcpy(blk, cost + i + 1 - N / BLOCKS, sizeof blk);
        qsort(blk, N / BLOCKS, sizeof blk[0], cmp_i64);
        if ((double)blk[N / BLOCKS / 2] < best_block) best_block = (double)blk[N / BLOCKS / 2];
        struct timespec pause = {0, 100000000};
        nanosleep(&pause, NULL);
      }
    }
    double cpu_us = (double)(cpu_ns() - cpu0) / 1e3 / N;
    bf_smp_consistency(h, &cs1);
    qsort(cost, N, sizeof cost[0], cmp_i64);
    printf("python %s: per thread-sample (%s): median %.2f us (quietest of %d blocks %.2f us), "
           "p90 %.2f us, p99 %.2f us (wall); mean %.2f us CPU (user+sys, immune to preemption); "
           "depth %zu; "
                      "%.2f process_vm_readv (%.1f iovecs, %.0f bytes) per sample; %d invalid of %d; "
           "torn: %.3f%% of samples re-read, %.3f%% cut at a caller, %.3f%% given up\n",
           bf_smp_python_version(h), mode ? "stack + /proc state" : "stack only",
           (double)cost[N / 2] / 1e3, BLOCKS, best_block / 1e3, (double)cost[N * 9 / 10] / 1e3,
           (double)cost[N * 99 / 100] / 1e3, cpu_us, depth,
           (double)(bf_smp_read_calls(h) - calls0) / N,
           (double)(bf_smp_read_iovs(h) - iovs0) / N, (double)(bf_smp_read_bytes(h) - bytes0) / N,
           invalid, N, 100.0 * (double)(cs1.retries - cs0.retries) / N,
           100.0 * (double)(cs1.cut - cs0.cut) / N, 100.0 * (double)(cs1.invalid - cs0.invalid) / N);
    invalid = 0;
  }
  /* 2. asked 100 kHz, recorded into a scratch store */
  char path[] = "/tmp/bf_bench_XXXXXX";
  int fd = mkstemp(path);
  if (fd >= 0) close(fd);
  unlink(path);
  bf_store *st;
  bf_err msg = BF_ERR_INIT;
  if (bf_store_open(path, BF_STORE_CREATE, &st, &msg) < 0) {
    fprintf(stderr, "bench: %s\n", msg.msg);
    kill(pid, SIGKILL);
    return 1;
  }
  for (int clock = 0; clock < 2; clock++) {
    bf_smp_record_opts o = {0};
    o.pid = pid;
    o.rate_hz = 100000;
    o.duration_s = secs;
    o.clock_cpu = clock;
    int64_t sid;
    int wst;
    rc = bf_smp_record(h, st, &o, &sid, &wst);
    bf_session_info *in = NULL;
    if (rc < 0 || bf_store_session_get(st, sid, &in) < 0) {
      fprintf(stderr, "bench: record failed: %s\n", bf_smp_errmsg(h));
      break;
    }
    double ticks = in->achieved_rate_hz * (double)in->duration_ns / 1e9;
    long long late = 0;
    double max_late = 0;
    const char *lj = in->extra_json ? strstr(in->extra_json, "\"late_ticks\":") : NULL;
    if (lj) late = strtoll(lj + 13, NULL, 10);
    lj = in->extra_json ? strstr(in->extra_json, "\"max_late_ms\":") : NULL;
    if (lj) max_late = strtod(lj + 14, NULL);
    long long retried = 0, torn_inv = 0, torn_cut = 0;
    lj = in->extra_json ? strstr(in->extra_json, "\"torn_retried\":") : NULL;
    if (lj) retried = strtoll(lj + 15, NULL, 10);
    lj = in->extra_json ? strstr(in->extra_json, "\"torn_cut\":") : NULL;
    if (lj) torn_cut = strtoll(lj + 11, NULL, 10);
    lj = in->extra_json ? strstr(in->extra_json, "\"torn_invalid\":") : NULL;
    if (lj) torn_inv = strtoll(lj + 15, NULL, 10);
    printf("python %s: asked 100000 Hz (%s clock) for %.1fs: achieved %.0f samples/s "
           "(%lld stored), missed %lld, invalid %lld (%.3f%% of ticks), caught up late %.2f%% "
           "of ticks (at most %.2f ms late), profiler CPU %.2fs; torn: %.3f%% of samples "
           "re-read, %.3f%% cut at a caller, %.3f%% given up\n",
           bf_smp_python_version(h), clock ? "cpu" : "wall", (double)in->duration_ns / 1e9,
           in->achieved_rate_hz, (long long)in->samples, (long long)in->missed,
           (long long)in->invalid,
           100.0 * (double)(in->missed + in->invalid) / (ticks + (double)in->missed + 1),
           100.0 * (double)late / (ticks + 1), max_late,
           (double)in->profiler_cpu_ns / 1e9, 100.0 * (double)retried / (ticks + 1),
           100.0 * (double)torn_cut / (ticks + 1), 100.0 * (double)torn_inv / (ticks + 1));
    bf_session_info_free(in);
  }
  /* 3. the default rate on a stack that changes between samples: what a tick
   * really costs (reads per sample, profiler CPU per tick) */
  pid_t mpid = spawn(argv[1], TARGET_MOVING);
  bf_smp *hm = mpid > 0 ? bf_smp_new() : NULL;
  if (hm && bf_smp_attach(hm, mpid) == 0) {
    bf_smp_record_opts o = {0};
    o.pid = mpid;
    o.rate_hz = 1000;
    o.duration_s = secs;
    int64_t sid;
    int wst;
    uint64_t calls0 = bf_smp_read_calls(hm);
    bf_smp_consistency_stats m0, m1;
    bf_smp_consistency(hm, &m0);
    bf_session_info *in = NULL;
    if (bf_smp_record(hm, st, &o, &sid, &wst) == 0 && bf_store_session_get(st, sid, &in) == 0) {
      bf_smp_consistency(hm, &m1);
      double ns = (double)(in->samples + in->invalid ? in->samples + in->invalid : 1);
      printf("python %s: 1000 Hz on a stack changing between samples (1-20 deep) for %.1fs: "
             "%.2f process_vm_readv per sample, profiler CPU %.1f us per tick (wall clock, "
             "/proc state included); torn: %.3f%% of samples re-read, %.3f%% cut at a "
             "caller, %.3f%% given up\n",
             bf_smp_python_version(hm), (double)in->duration_ns / 1e9,
             (double)(bf_smp_read_calls(hm) - calls0) / (double)(in->samples ? in->samples : 1),
             (double)in->profiler_cpu_ns / 1e3 / (double)(in->samples ? in->samples : 1),
             100.0 * (double)(m1.retries - m0.retries) / ns,
             100.0 * (double)(m1.cut - m0.cut) / ns, 100.0 * (double)(m1.invalid - m0.invalid) / ns);
      bf_session_info_free(in);
    }
  }
  bf_smp_free(hm);
  if (mpid > 0) {
    kill(mpid, SIGKILL);
    waitpid(mpid, NULL, 0);
  }
  bf_store_close(st);
  unlink(path);
  char p2[64];
  snprintf(p2, sizeof p2, "%s-wal", path);
  unlink(p2);
  snprintf(p2, sizeof p2, "%s-shm", path);
  unlink(p2);
  bf_smp_free(h);
  kill(pid, SIGKILL);
  waitpid(pid, NULL, 0);
  return 0;
}
