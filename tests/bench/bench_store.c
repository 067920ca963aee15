/* bench_store.c — store ingest throughput and on-disk size.
 *
 * 1,000,000 samples of pre-interned, realistic repetitive stacks (4 threads,
 * ~300 distinct stacks 12-30 deep, Zipf-like popularity, runs of identical
 * stacks, jittered 1 kHz timestamps) written through bf_store_sample_add.
 * Prints samples/s and bytes per sample; targets: >= 500,000/s, <= 16 B. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "../unit/scratch.h"
#include "clock.h"
#include "store.h"

static double now_s(void) { return (double)bf_mono_ns() / 1e9; }

static long long fsize(const char *p) {
  struct stat st;
  return stat(p, &st) == 0 ? (long long)st.st_size : 0;
}

static int run(const char *path, const char *clock, int nsamples, double *rate, double *bps) {
  unlink_db(path);
  char wal[600];
  snprintf(wal, sizeof wal, "%s-wal", path);
  bf_store *s;
  bf_err msg = BF_ERR_INIT;
  if (bf_store_open(path, BF_STORE_CREATE, &s, &msg)) {
    fprintf(stderr, "%s\n", msg.msg);
    return 1;
  }
  bf_session_info in = {.kind = "sampled", .clock = clock, .mode = "all", .rate_hz = 1000};
  int64_t sid;
  bf_store_session_begin(s, &in, &sid);
  /* pre-intern: 60 functions, 300 stacks built as random walks in a call tree */
  enum { NSTK = 300, NTH = 4 };
  int64_t stacks[NSTK], threads[NTH];
  unsigned seed = 7;
  int64_t fns[60];
  for (int i = 0; i < 60; i++) {
    char q[64], f[96];
    snprintf(q, sizeof q, "module%d.Class.method_%d", i % 7, i);
    snprintf(f, sizeof f, "/srv/app/lib/python3.12/site-packages/pkg%d/mod%d.py", i % 5, i);
    bf_store_intern_function(s, f, q, 10 + i * 17, &fns[i]);
  }
  for (int k = 0; k < NSTK; k++) {
    int depth = 12 + rand_r(&seed) % 19;
    int64_t parent = 0;
    for (int d = 0; d < depth; d++) {
      int fi = (d < 8) ? d : (int)(rand_r(&seed) % 60); /* shared prefix like a real service */
      int64_t fr;
      bf_store_intern_frame(s, fns[fi], 10 + fi * 17 + (int)(rand_r(&seed) % 8), &fr);
      bf_store_intern_stack(s, parent, fr, &parent);
    }
    stacks[k] = parent;
  }
  for (int t = 0; t < NTH; t++) bf_store_intern_thread(s, sid, 1000 + t, NULL, &threads[t]);
  bf_store_flush(s);

  /* pre-generate the sample stream so the timed loop is only the writer */
  typedef struct { int th; int stk; uint32_t flags; int64_t ts; int64_t w; } ev;
  ev *evs = malloc(sizeof(ev) * (size_t)nsamples);
  int64_t ts[NTH] = {0};
  int cur[NTH] = {0};
  for (int i = 0; i < nsamples; i++) {
    int t = i % NTH;
    if (rand_r(&seed) % 5 == 0) {
      /* Zipf-ish: low ids much more popular */
      double u = (rand_r(&seed) + 1.0) / ((double)RAND_MAX + 2.0);
      cur[t] = (int)(NSTK * u * u * u);
      if (cur[t] >= NSTK) cur[t] = NSTK - 1;
    }
    int64_t dt = 900000 + rand_r(&seed) % 200000; /* jittered 1 kHz */
    ts[t] += dt;
    uint32_t fl = (t == 3) ? BF_SAMPLE_IDLE : (BF_SAMPLE_ON_CPU | ((t == 0) ? BF_SAMPLE_GIL : 0));
    int64_t w = strcmp(clock, "cpu") == 0 ? (int64_t)(dt * (0.5 + (rand_r(&seed) % 50) / 100.0)) : dt;
    evs[i] = (ev){t, cur[t], fl, ts[t], w};
  }
  double t0 = now_s();
  for (int i = 0; i < nsamples; i++) {
    bf_sample x = {.thread_id = threads[evs[i].th], .stack_id = stacks[evs[i].stk], .ts_ns = evs[i].ts,
                   .flags = evs[i].flags, .count = 1, .weight = evs[i].w};
    if (bf_store_sample_add(s, sid, &x)) {
      fprintf(stderr, "%s\n", bf_store_errmsg(s));
      return 1;
    }
  }
  bf_store_flush(s);
  double t1 = now_s();
  in.id = sid;
  in.samples = nsamples;
  in.status = "complete";
  bf_store_session_update(s, &in);
  bf_store_close(s); /* checkpoints the WAL */
  long long size = fsize(path) + fsize(wal);
  *rate = nsamples / (t1 - t0);
  *bps = (double)size / nsamples;
  free(evs);
  return 0;
}

int main(int argc, char **argv) {
  int n = argc > 1 ? atoi(argv[1]) : 1000000;
  const char *dir = argc > 2 ? argv[2] : "/tmp";
  char path[512];
  snprintf(path, sizeof path, "%s/bf_bench_store_%d.db", dir, (int)getpid());
  double rate, bps;
  int fail = 0;
  const char *clocks[] = {"wall", "cpu"};
  for (int i = 0; i < 2; i++) {
    if (run(path, clocks[i], n, &rate, &bps)) return 1;
    printf("store ingest (%s clock, %d samples, 4 threads, 300 stacks): %.0f samples/s (target >= 500000), "
           "%.2f bytes/sample on disk (target <= 16)\n",
           clocks[i], n, rate, bps);
    if (rate < 500000 || bps > 16) fail = 1;
  }
  unlink_db(path);
  printf("store bench: %s\n", fail ? "BELOW TARGET" : "targets met");
  return fail;
}
