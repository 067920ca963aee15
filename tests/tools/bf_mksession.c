/* bf_mksession.c — write test sessions (sampled or traced) into a bifocal
 * database through the store API, from a small text spec on stdin:
 *
 *   session sampled|traced|imported [clock=wall|cpu] [rate=HZ] [duration=S]
 *           [label=L] [mode=M] [profiler_cpu_ms=MS] [achieved=HZ]
 *   stack COUNT [thread=TID] q@file:line;q@file:line;...   (sampled: outermost first)
 *   func q@file:line calls=N [prim=N] self_ms=X total_ms=Y (traced)
 *   edge CALLER|- CALLEE calls=N [prim=N] self_ms=X total_ms=Y
 *   record q@file:line start_ms=X dur_ms=Y [depth=D]
 *
 * Prints the id of every session it creates, one per line.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store.h"

static bf_store *st;
static int64_t cur;
static bf_session_info info;
static int64_t ts_ns;
static int64_t samples_total;

static void die(const char *what, int line) {
  fprintf(stderr, "bf_mksession: line %d: %s (%s)\n", line, what, st ? bf_store_errmsg(st) : "");
  exit(1);
}

static int64_t func_id(const char *spec, int line) {
  char buf[512];
  snprintf(buf, sizeof buf, "%s", spec);
  char *at = strchr(buf, '@');
  if (!at) die("function must be qualname@file:line", line);
  *at = 0;
  char *colon = strrchr(at + 1, ':');
  if (!colon) die("function must be qualname@file:line", line);
  *colon = 0;
  int64_t id;
  if (bf_store_intern_function(st, at + 1, buf, atoll(colon + 1), &id) < 0) die("intern", line);
  return id;
}

static double kv(char **tok, int n, const char *key, double def) {
  size_t l = strlen(key);
  for (int i = 0; i < n; i++)
    if (strncmp(tok[i], key, l) == 0 && tok[i][l] == '=') return atof(tok[i] + l + 1);
  return def;
}
static const char *kvs(char **tok, int n, const char *key) {
  size_t l = strlen(key);
  for (int i = 0; i < n; i++)
    if (strncmp(tok[i], key, l) == 0 && tok[i][l] == '=') return tok[i] + l + 1;
  return NULL;
}

static void finish(void) {
  if (!cur) return;
  if (bf_store_flush(st) < 0) die("flush", 0);
  info.id = cur;
  info.samples = samples_total;
  info.status = "complete";
  if (bf_store_session_update(st, &info) < 0) die("update", 0);
  if (bf_store_commit(st) < 0) die("commit", 0);
  printf("%lld\n", (long long)cur);
  cur = 0;
}

static char labels[64][128];
static int nlabels;

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: bf_mksession DB < spec\n");
    return 2;
  }
  bf_err msg = BF_ERR_INIT;
  if (bf_store_open(argv[1], BF_STORE_CREATE, &st, &msg) < 0) {
    fprintf(stderr, "bf_mksession: %s\n", msg.msg);
    return 1;
  }
  char line[4096];
  int ln = 0;
  while (fgets(line, sizeof line, stdin)) {
    ln++;
    char *tok[64];
    int n = 0;
    for (char *t = strtok(line, " \t\r\n"); t && n < 64; t = strtok(NULL, " \t\r\n")) tok[n++] = t;
    if (n == 0 || tok[0][0] == '#') continue;
    if (strcmp(tok[0], "session") == 0) {
      finish();
      if (n < 2) die("session needs a kind", ln);
      memset(&info, 0, sizeof info);
      static char kind[32], clock[16], mode[32], label[128];
      snprintf(kind, sizeof kind, "%s", tok[1]);
      snprintf(clock, sizeof clock, "%s", kvs(tok, n, "clock") ? kvs(tok, n, "clock") : "wall");
      snprintf(mode, sizeof mode, "%s", kvs(tok, n, "mode") ? kvs(tok, n, "mode") : (strcmp(kind, "traced") ? "all" : "trace"));
      info.kind = kind;
      info.clock = clock;
      info.mode = mode;
      if (kvs(tok, n, "label") && nlabels < 64) {
        snprintf(labels[nlabels], sizeof labels[0], "%s", kvs(tok, n, "label"));
        info.label = labels[nlabels++];
      }
      (void)label;
      info.rate_hz = kv(tok, n, "rate", strcmp(kind, "traced") ? 1000 : 0);
      info.duration_ns = (int64_t)(kv(tok, n, "duration", 1.0) * 1e9);
      info.achieved_rate_hz = kv(tok, n, "achieved", info.rate_hz); /* ticks per second */
      info.profiler_cpu_ns = (int64_t)(kv(tok, n, "profiler_cpu_ms", 0) * 1e6);
      info.start_ns = 1700000000000000000LL;
      info.host = "testhost";
      info.python_version = "3.12.0";
      info.profiler_version = "test";
      info.status = "incomplete";
      if (bf_store_begin(st) < 0) die("begin", ln);
      if (bf_store_session_begin(st, &info, &cur) < 0) die("session_begin", ln);
      ts_ns = 0;
      samples_total = 0;
      continue;
    }
    if (!cur) die("no session yet", ln);
    if (strcmp(tok[0], "stack") == 0) {
      if (n < 3) die("stack COUNT [thread=T] frames", ln);
      int64_t count = atoll(tok[1]);
      int64_t tid = (int64_t)kv(tok, n, "thread", 1);
      int64_t thread;
      if (bf_store_intern_thread(st, cur, tid, NULL, &thread) < 0) die("thread", ln);
      int64_t parent = 0;
      char *frames = tok[n - 1];
      for (char *f = strtok(frames, ";"); f; f = strtok(NULL, ";")) {
        int64_t fid = func_id(f, ln), fr;
        bf_function_ref ref;
        bf_store_function_get(st, fid, &ref);
        if (bf_store_intern_frame(st, fid, ref.firstlineno, &fr) < 0) die("frame", ln);
        if (bf_store_intern_stack(st, parent, fr, &parent) < 0) die("stack", ln);
      }
      double per = info.rate_hz > 0 ? 1e9 / info.rate_hz : 1e6;
      for (int64_t left = count; left > 0;) {
        uint32_t c = left > 1000 ? 1000 : (uint32_t)left;
        bf_sample smp = {.thread_id = thread, .stack_id = parent, .ts_ns = ts_ns, .count = c,
                         .weight = (int64_t)(per * c)};
        if (bf_store_sample_add(st, cur, &smp) < 0) die("sample", ln);
        ts_ns += (int64_t)(per * c);
        left -= c;
      }
      samples_total += count;
    } else if (strcmp(tok[0], "func") == 0) {
      bf_trace_func tf = {.function_id = func_id(tok[1], ln)};
      tf.calls = (int64_t)kv(tok, n, "calls", 1);
      tf.primitive_calls = (int64_t)kv(tok, n, "prim", (double)tf.calls);
      tf.self_ns = (int64_t)(kv(tok, n, "self_ms", 0) * 1e6);
      tf.total_ns = (int64_t)(kv(tok, n, "total_ms", 0) * 1e6);
      tf.p50_ns = tf.p90_ns = tf.p99_ns = tf.max_ns = -1;
      if (bf_store_trace_func_put(st, cur, &tf) < 0) die("trace_func", ln);
    } else if (strcmp(tok[0], "edge") == 0) {
      bf_trace_edge te = {0};
      te.caller_function_id = strcmp(tok[1], "-") == 0 ? 0 : func_id(tok[1], ln);
      te.callee_function_id = func_id(tok[2], ln);
      te.calls = (int64_t)kv(tok, n, "calls", 1);
      te.primitive_calls = (int64_t)kv(tok, n, "prim", (double)te.calls);
      te.self_ns = (int64_t)(kv(tok, n, "self_ms", 0) * 1e6);
      te.total_ns = (int64_t)(kv(tok, n, "total_ms", 0) * 1e6);
      if (bf_store_trace_edge_put(st, cur, &te) < 0) die("trace_edge", ln);
    } else if (strcmp(tok[0], "record") == 0) {
      bf_call_record r = {.function_id = func_id(tok[1], ln)};
      r.start_ns = (int64_t)(kv(tok, n, "start_ms", 0) * 1e6);
      r.duration_ns = (int64_t)(kv(tok, n, "dur_ms", 0) * 1e6);
      r.depth = (int32_t)kv(tok, n, "depth", 0);
      if (bf_store_call_record_add(st, cur, &r) < 0) die("call_record", ln);
    } else {
      die("unknown directive", ln);
    }
  }
  finish();
  bf_store_close(st);
  return 0;
}
