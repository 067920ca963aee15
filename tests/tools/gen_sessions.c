/* gen_sessions.c — make realistic test sessions through the store API, before
 * (and independently of) the sampler and tracer: a fake web server with a main
 * thread and two workers, recursion, builtins, GIL/CPU/idle flags and a load
 * that moves over time; or a traced run with calls, edges and focus records.
 *
 *   gen_sessions DB sampled [--samples N] [--clock wall|cpu] [--rate HZ]
 *                           [--threads N] [--seed S] [--shift] [--label L]
 *   gen_sessions DB traced  [--label L]
 *   gen_sessions DB sampled --distinct N [--samples M]   (benchmark shape:
 *       N distinct stacks over 2,000 functions, depth 8..60, skewed use)
 * Prints the new session id. --shift moves load from parsing to computing
 * (for diff tests). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store.h"

static bf_store *S;

static void die(const char *what) {
  fprintf(stderr, "gen_sessions: %s: %s\n", what, S ? bf_store_errmsg(S) : "?");
  exit(1);
}

enum { F_MAIN, F_SERVE, F_HANDLE, F_PARSE, F_LOADS, F_COMPUTE, F_FIB, F_RENDER, F_SLEEP,
       F_RUN, F_WLOOP, F_JOB, F_ACQUIRE, NF };
static const struct { const char *file, *qual; int first; } FN[NF] = {
    {"/srv/app/server.py", "main", 1},
    {"/srv/app/server.py", "Server.serve", 10},
    {"/srv/app/server.py", "Server.handle_request", 30},
    {"/srv/app/parse.py", "parse_request", 12},
    {"<builtin>", "json.loads", 0},
    {"/srv/app/compute.py", "compute", 5},
    {"/srv/app/compute.py", "fib", 40},
    {"/srv/app/render.py", "render_page", 8},
    {"<builtin>", "time.sleep", 0},
    {"/usr/lib/python3.12/threading.py", "Thread.run", 990},
    {"/srv/app/worker.py", "worker_loop", 5},
    {"/srv/app/worker.py", "process_job", 20},
    {"<builtin>", "_thread.lock.acquire", 0},
};
static int64_t fid[NF];

static uint64_t rng = 88172645463325252ull;
static double rnd(void) {
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return (double)(rng >> 11) / 9007199254740992.0;
}

static int64_t stack_of(const int *fs, int n) {
  int64_t parent = 0;
  for (int i = 0; i < n; i++) {
    int64_t frame, st;
    int64_t line = FN[fs[i]].first ? FN[fs[i]].first + 1 + (fs[i] % 5) : 0;
    if (bf_store_intern_frame(S, fid[fs[i]], line, &frame) || bf_store_intern_stack(S, parent, frame, &st))
      die("intern");
    parent = st;
  }
  return parent;
}

#define STK(name, ...)                      \
  static const int name##_f[] = {__VA_ARGS__}; \
  int64_t name = stack_of(name##_f, (int)(sizeof name##_f / sizeof name##_f[0]))

static void session_base(bf_session_info *in, const char *kind, const char *label) {
  memset(in, 0, sizeof *in);
  in->kind = kind;
  in->start_ns = 1767261600000000000LL; /* 2026-01-01 10:00 UTC */
  in->host = "gen-host";
  in->pid = 4242;
  in->command = "python3 -m app.server";
  in->python_version = "3.12.1";
  in->python_build = "release";
  in->profiler_version = "test-generator";
  in->label = label;
  in->status = "complete";
}

static int64_t gen_sampled(long long nsamples, const char *clock, double rate, int nthreads, int shift,
                           const char *label) {
  int cpu = strcmp(clock, "cpu") == 0;
  bf_session_info in;
  session_base(&in, "sampled", label);
  in.clock = clock;
  in.mode = "all";
  in.rate_hz = rate;
  int64_t sid;
  if (bf_store_begin(S) || bf_store_session_begin(S, &in, &sid)) die("session");
  STK(s_loads, F_MAIN, F_SERVE, F_HANDLE, F_PARSE, F_LOADS);
  STK(s_parse, F_MAIN, F_SERVE, F_HANDLE, F_PARSE);
  STK(s_fib, F_MAIN, F_SERVE, F_HANDLE, F_COMPUTE, F_FIB, F_FIB, F_FIB);
  STK(s_fib1, F_MAIN, F_SERVE, F_HANDLE, F_COMPUTE, F_FIB);
  STK(s_comp, F_MAIN, F_SERVE, F_HANDLE, F_COMPUTE);
  STK(s_render, F_MAIN, F_SERVE, F_HANDLE, F_RENDER);
  STK(s_sleep, F_MAIN, F_SERVE, F_SLEEP);
  STK(w_fib, F_RUN, F_WLOOP, F_JOB, F_COMPUTE, F_FIB);
  STK(w_job, F_RUN, F_WLOOP, F_JOB);
  STK(w_wait, F_RUN, F_WLOOP, F_ACQUIRE);
  int64_t th[16];
  if (nthreads < 1) nthreads = 1;
  if (nthreads > 16) nthreads = 16;
  for (int t = 0; t < nthreads; t++) {
    char name[32];
    if (t == 0)
      snprintf(name, sizeof name, "MainThread");
    else
      snprintf(name, sizeof name, "worker-%d", t);
    if (bf_store_intern_thread(S, sid, 1000 + t, name, &th[t])) die("thread");
  }
  int64_t interval = (int64_t)(1e9 / rate);
  long long ticks = nsamples / nthreads, written = 0;
  for (int t = 0; t < nthreads; t++) {
    for (long long i = 0; i < ticks; i++) {
      double phase = (double)i / (double)ticks; /* load moves from parsing to computing */
      double r = rnd();
      int64_t stack;
      uint32_t flags;
      if (t == 0) {
        double p_loads = shift ? 0.10 : 0.30 - 0.15 * phase, p_fib = shift ? 0.45 : 0.15 + 0.25 * phase;
        double acc = p_loads;
        if (r < acc) stack = s_loads, flags = BF_SAMPLE_GIL | BF_SAMPLE_ON_CPU;
        else if (r < (acc += 0.05)) stack = s_parse, flags = BF_SAMPLE_GIL | BF_SAMPLE_ON_CPU;
        else if (r < (acc += p_fib)) stack = (r * 1000 - (int)(r * 1000)) < 0.5 ? s_fib : s_fib1,
                                     flags = BF_SAMPLE_GIL | BF_SAMPLE_ON_CPU;
        else if (r < (acc += 0.05)) stack = s_comp, flags = BF_SAMPLE_ON_CPU; /* waiting for the GIL */
        else if (r < (acc += 0.15)) stack = s_render, flags = BF_SAMPLE_GIL | BF_SAMPLE_ON_CPU;
        else stack = s_sleep, flags = BF_SAMPLE_IDLE;
      } else {
        if (r < 0.30) stack = w_fib, flags = rnd() < 0.5 ? BF_SAMPLE_GIL | BF_SAMPLE_ON_CPU : 0;
        else if (r < 0.45) stack = w_job, flags = BF_SAMPLE_GIL | BF_SAMPLE_ON_CPU | (rnd() < 0.2 ? BF_SAMPLE_GC : 0);
        else stack = w_wait, flags = BF_SAMPLE_IDLE;
      }
      int64_t weight = interval;
      if (cpu) {
        if (!(flags & BF_SAMPLE_ON_CPU)) continue;
        weight = (int64_t)((double)interval * (0.5 + rnd()));
      }
      bf_sample smp = {.thread_id = th[t], .stack_id = stack, .ts_ns = i * interval, .flags = flags,
                       .count = 1, .weight = weight};
      if (bf_store_sample_add(S, sid, &smp)) die("sample");
      written++;
    }
  }
  if (bf_store_flush(S)) die("flush");
  in.id = sid;
  in.samples = written;
  in.achieved_rate_hz = rate;
  in.duration_ns = ticks * interval;
  in.profiler_cpu_ns = 1000000;
  if (bf_store_session_update(S, &in) || bf_store_commit(S)) die("finish");
  return sid;
}

/* Benchmark shape: many distinct, prefix-sharing stacks, skewed popularity. */
static int64_t gen_distinct(long long nsamples, int ndistinct, const char *label) {
  bf_session_info in;
  session_base(&in, "sampled", label);
  in.clock = "wall";
  in.mode = "all";
  in.rate_hz = 1000;
  int64_t sid, th[4];
  if (bf_store_begin(S) || bf_store_session_begin(S, &in, &sid)) die("session");
  for (int t = 0; t < 4; t++)
    if (bf_store_intern_thread(S, sid, 2000 + t, t ? "worker" : "MainThread", &th[t])) die("thread");
  enum { POOL = 2000 };
  static int64_t pool[POOL];
  for (int i = 0; i < POOL; i++) {
    char file[64], name[64];
    snprintf(file, sizeof file, "/srv/big/mod%03d.py", i / 20);
    snprintf(name, sizeof name, "Class%02d.method_%04d", i % 37, i);
    if (bf_store_intern_function(S, file, name, 10 + i % 500, &pool[i])) die("function");
  }
  int64_t *stacks = malloc((size_t)ndistinct * sizeof *stacks);
  int64_t(*paths)[64] = malloc((size_t)ndistinct * sizeof *paths);
  int *depth = malloc((size_t)ndistinct * sizeof *depth);
  if (!stacks || !paths || !depth) die("memory");
  for (int k = 0; k < ndistinct; k++) {
    /* extend a prefix of an earlier stack so paths share their roots */
    int d = 0;
    if (k > 0) {
      int src = (int)(rnd() * k);
      d = (int)(rnd() * depth[src]);
      memcpy(paths[k], paths[src], (size_t)d * sizeof paths[k][0]);
    }
    int want = 8 + (int)(rnd() * 52);
    if (d > want) d = want;
    for (; d < want; d++) {
      int64_t frame, f = pool[(int)(rnd() * rnd() * POOL)];
      if (bf_store_intern_frame(S, f, 10 + (int64_t)(rnd() * 40), &frame)) die("frame");
      paths[k][d] = frame;
    }
    depth[k] = want;
    int64_t parent = 0;
    for (int j = 0; j < want; j++)
      if (bf_store_intern_stack(S, parent, paths[k][j], &parent)) die("stack");
    stacks[k] = parent;
  }
  long long per = nsamples / 4;
  for (int t = 0; t < 4; t++)
    for (long long i = 0; i < per; i++) {
      int k = (int)(rnd() * rnd() * rnd() * ndistinct);
      bf_sample smp = {.thread_id = th[t], .stack_id = stacks[k], .ts_ns = i * 1000000, .count = 1,
                       .flags = BF_SAMPLE_GIL | BF_SAMPLE_ON_CPU, .weight = 1000000};
      if (bf_store_sample_add(S, sid, &smp)) die("sample");
    }
  if (bf_store_flush(S)) die("flush");
  free(stacks);
  free(paths);
  free(depth);
  in.id = sid;
  in.samples = per * 4;
  in.achieved_rate_hz = 1000;
  in.duration_ns = per * 1000000;
  if (bf_store_session_update(S, &in) || bf_store_commit(S)) die("finish");
  return sid;
}

static int64_t gen_traced(const char *label) {
  bf_session_info in;
  session_base(&in, "traced", label);
  in.clock = "wall";
  in.mode = "focus";
  in.duration_ns = 1000000000;
  int64_t sid, thread;
  if (bf_store_begin(S) || bf_store_session_begin(S, &in, &sid)) die("session");
  if (bf_store_intern_thread(S, sid, 1000, "MainThread", &thread)) die("thread");
  const int64_t MS = 1000000;
  /* function: calls, primitive, self ms, total ms — self times add up to 1 s */
  static const struct { int f; int64_t calls, prim, self_ms, total_ms; } TF[] = {
      {F_MAIN, 1, 1, 1, 1000},       {F_SERVE, 1, 1, 9, 999},      {F_HANDLE, 100, 100, 10, 990},
      {F_PARSE, 100, 100, 50, 250},  {F_LOADS, 100, 100, 200, 200}, {F_COMPUTE, 100, 100, 40, 540},
      {F_FIB, 1800, 100, 500, 500},  {F_RENDER, 100, 100, 190, 190},
  };
  for (size_t i = 0; i < sizeof TF / sizeof TF[0]; i++) {
    bf_trace_func tf = {.function_id = fid[TF[i].f], .calls = TF[i].calls, .primitive_calls = TF[i].prim,
                        .self_ns = TF[i].self_ms * MS, .total_ns = TF[i].total_ms * MS,
                        .p50_ns = -1, .p90_ns = -1, .p99_ns = -1, .max_ns = -1};
    if (TF[i].f == F_HANDLE) {
      tf.p50_ns = 9 * MS; tf.p90_ns = 11 * MS; tf.p99_ns = 14 * MS; tf.max_ns = 15 * MS;
      tf.records_kept = 100;
    }
    if (bf_store_trace_func_put(S, sid, &tf)) die("trace func");
  }
  static const struct { int caller, callee; int64_t calls, prim, self_ms, total_ms; } TE[] = {
      {-1, F_MAIN, 1, 1, 1, 1000},          {F_MAIN, F_SERVE, 1, 1, 9, 999},
      {F_SERVE, F_HANDLE, 100, 100, 10, 990}, {F_HANDLE, F_PARSE, 100, 100, 50, 250},
      {F_PARSE, F_LOADS, 100, 100, 200, 200}, {F_HANDLE, F_COMPUTE, 100, 100, 40, 540},
      {F_COMPUTE, F_FIB, 100, 100, 30, 500},  {F_FIB, F_FIB, 1700, 0, 470, 470},
      {F_HANDLE, F_RENDER, 100, 100, 190, 190},
  };
  for (size_t i = 0; i < sizeof TE / sizeof TE[0]; i++) {
    bf_trace_edge te = {.caller_function_id = TE[i].caller < 0 ? 0 : fid[TE[i].caller],
                        .callee_function_id = fid[TE[i].callee], .calls = TE[i].calls,
                        .primitive_calls = TE[i].prim, .self_ns = TE[i].self_ms * MS, .total_ns = TE[i].total_ms * MS};
    if (bf_store_trace_edge_put(S, sid, &te)) die("trace edge");
  }
  /* focus records: handle_request and its direct callees, 100 requests */
  for (int i = 0; i < 100; i++) {
    int64_t t0 = 5 * MS + i * 9900000LL;
    bf_call_record r = {.function_id = fid[F_HANDLE], .thread_id = thread, .start_ns = t0,
                        .duration_ns = 9800000, .depth = 0, .parent_function_id = fid[F_SERVE]};
    if (bf_store_call_record_add(S, sid, &r)) die("record");
    bf_call_record c1 = {fid[F_PARSE], thread, t0 + 100000, 2500000, 1, fid[F_HANDLE]};
    bf_call_record c2 = {fid[F_COMPUTE], thread, t0 + 2700000, 5300000, 1, fid[F_HANDLE]};
    bf_call_record c3 = {fid[F_RENDER], thread, t0 + 8000000, 1700000, 1, fid[F_HANDLE]};
    if (bf_store_call_record_add(S, sid, &c1) || bf_store_call_record_add(S, sid, &c2) ||
        bf_store_call_record_add(S, sid, &c3))
      die("record");
  }
  in.id = sid;
  if (bf_store_session_update(S, &in) || bf_store_commit(S)) die("finish");
  return sid;
}

int main(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: gen_sessions DB sampled|traced [options]\n");
    return 2;
  }
  long long nsamples = 20000;
  const char *clock = "wall", *label = NULL;
  double rate = 1000;
  int nthreads = 3, shift = 0, distinct = 0;
  for (int i = 3; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (strcmp(a, "--shift") == 0) shift = 1;
    else if (!v) { fprintf(stderr, "gen_sessions: %s needs a value\n", a); return 2; }
    else if (strcmp(a, "--samples") == 0) nsamples = atoll(v), i++;
    else if (strcmp(a, "--clock") == 0) clock = v, i++;
    else if (strcmp(a, "--rate") == 0) rate = atof(v), i++;
    else if (strcmp(a, "--threads") == 0) nthreads = atoi(v), i++;
    else if (strcmp(a, "--seed") == 0) rng = (uint64_t)atoll(v) * 2654435761u + 1, i++;
    else if (strcmp(a, "--label") == 0) label = v, i++;
    else if (strcmp(a, "--distinct") == 0) distinct = atoi(v), i++;
    else { fprintf(stderr, "gen_sessions: unknown option %s\n", a); return 2; }
  }
  bf_err err = BF_ERR_INIT;
  if (bf_store_open(argv[1], BF_STORE_CREATE, &S, &err)) {
    fprintf(stderr, "gen_sessions: %s\n", bf_err_msg(&err, "cannot open"));
    return 1;
  }
  for (int i = 0; i < NF; i++)
    if (bf_store_intern_function(S, FN[i].file, FN[i].qual, FN[i].first, &fid[i])) die("intern function");
  int64_t sid;
  if (strcmp(argv[2], "sampled") == 0 && distinct > 0)
    sid = gen_distinct(nsamples, distinct, label);
  else if (strcmp(argv[2], "sampled") == 0)
    sid = gen_sampled(nsamples, clock, rate, nthreads, shift, label);
  else if (strcmp(argv[2], "traced") == 0)
    sid = gen_traced(label);
  else {
    fprintf(stderr, "gen_sessions: unknown kind %s\n", argv[2]);
    return 2;
  }
  bf_store_close(S);
  printf("%lld\n", (long long)sid);
  return 0;
}
