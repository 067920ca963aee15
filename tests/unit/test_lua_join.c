/* test_lua_join.c — the correlate join (rows, not-observed, call rate,
 * Spearman with ties) and the Lua interpreter setup (sandbox, incomplete
 * chunks, errors) without going through the CLI. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <lauxlib.h>
#include <lua.h>

#include "check.h"
#include "scratch.h"
#include "correlate.h"
#include "lua_host.h"
#include "store.h"

static int64_t fn(bf_store *s, const char *q, int line) {
  int64_t id = 0;
  CHECK(bf_store_intern_function(s, "app.py", q, line, &id) == 0);
  return id;
}

static void add_stack(bf_store *s, int64_t sid, int64_t thread, const int64_t *fids, size_t n, uint32_t count) {
  int64_t parent = 0;
  for (size_t i = 0; i < n; i++) {
    int64_t fr;
    CHECK(bf_store_intern_frame(s, fids[i], 1, &fr) == 0);
    CHECK(bf_store_intern_stack(s, parent, fr, &parent) == 0);
  }
  bf_sample smp = {.thread_id = thread, .stack_id = parent, .ts_ns = 0, .count = count, .weight = count};
  CHECK(bf_store_sample_add(s, sid, &smp) == 0);
}

static void test_spearman(void) {
  double x[] = {1, 2, 3, 4}, y[] = {10, 20, 30, 40}, yr[] = {4, 3, 2, 1};
  CHECK(fabs(bf_spearman(x, y, 4) - 1) < 1e-12);
  CHECK(fabs(bf_spearman(x, yr, 4) + 1) < 1e-12);
  double t1[] = {1, 1, 2, 3}, t2[] = {5, 5, 6, 7};
  CHECK(fabs(bf_spearman(t1, t2, 4) - 1) < 1e-12); /* ties share ranks */
  double c[] = {1, 1, 1};
  CHECK(isnan(bf_spearman(c, x, 3)));
  CHECK(isnan(bf_spearman(x, y, 1)));
}

static void test_join(const char *path) {
  bf_store *s = NULL;
  CHECK(bf_store_open(path, BF_STORE_CREATE, &s, NULL) == 0);
  if (!s) return;
  int64_t main_f = fn(s, "main", 1), work = fn(s, "work", 10), tiny = fn(s, "tiny", 20);
  bf_session_info si = {.kind = "sampled", .clock = "wall", .mode = "all", .rate_hz = 100,
                        .duration_ns = 4000000000LL, .status = "complete"};
  int64_t sid, tid;
  CHECK(bf_store_session_begin(s, &si, &sid) == 0);
  int64_t t1, t2;
  CHECK(bf_store_intern_thread(s, sid, 101, "a", &t1) == 0);
  CHECK(bf_store_intern_thread(s, sid, 102, "b", &t2) == 0);
  int64_t st1[] = {main_f, work}, st2[] = {main_f};
  add_stack(s, sid, t1, st1, 2, 300);
  add_stack(s, sid, t2, st2, 1, 100);
  CHECK(bf_store_flush(s) == 0);
  bf_session_info ti = {.kind = "traced", .clock = "wall", .mode = "trace", .status = "complete"};
  CHECK(bf_store_session_begin(s, &ti, &tid) == 0);
  bf_trace_func f1 = {.function_id = main_f, .calls = 1, .primitive_calls = 1, .self_ns = 100, .total_ns = 1000,
                      .p50_ns = -1, .p90_ns = -1, .p99_ns = -1, .max_ns = -1};
  bf_trace_func f2 = f1, f3 = f1;
  f2.function_id = work;
  f2.calls = 60;
  f2.primitive_calls = 60;
  f2.self_ns = 600000000;
  f2.total_ns = 600000000;
  f3.function_id = tiny;
  f3.calls = 1000;
  f3.primitive_calls = 1000;
  f3.self_ns = f3.total_ns = 1000;
  CHECK(bf_store_trace_func_put(s, tid, &f1) == 0);
  CHECK(bf_store_trace_func_put(s, tid, &f2) == 0);
  CHECK(bf_store_trace_func_put(s, tid, &f3) == 0);

  bf_join *j = NULL;
  CHECK(bf_join_sessions(s, sid, tid, &j) == 0);
  if (j) {
    CHECK_EQ_INT(j->n, 3);
    CHECK_EQ_INT(j->sampled_threads, 2);
    CHECK(fabs(j->budget_ns - 8e9) < 1); /* no tick rate: duration × threads */
    CHECK_EQ_INT(j->n_both, 2);
    const bf_join_row *w = &j->rows[0], *last = &j->rows[2];
    CHECK(strcmp(w->qualname, "work") == 0);
    CHECK(fabs(w->self_share - 0.75) < 1e-12);
    /* 75% of 8 s thread time = 6 s at 10 ms per call = 600 calls over 4 s */
    CHECK(fabs(w->calls_per_s - 150) < 1e-6);
    CHECK(strcmp(last->qualname, "tiny") == 0 && !last->observed && last->traced);
    CHECK(isnan(last->calls_per_s) && isnan(last->self_share));
    FILE *devnull = fopen("/dev/null", "w");
    bf_join_print(j, devnull, 0, NULL, 0);
    bf_join_json(j, devnull);
    fclose(devnull);
    bf_join_free(j);
  }
  j = NULL;
  CHECK(bf_join_sessions(s, tid, sid, &j) == -EINVAL && j == NULL);
  CHECK(strstr(bf_store_errmsg(s), "traced") != NULL);
  CHECK(bf_join_sessions(s, sid, 999, &j) == -ENOENT);
  /* with an achieved tick rate each sample is one tick of one thread: 400 / 50 Hz = 8 s */
  bf_session_info *in = NULL;
  CHECK(bf_store_session_get(s, sid, &in) == 0);
  if (in) {
    in->achieved_rate_hz = 50;
    CHECK(bf_store_session_update(s, in) == 0);
    bf_session_info_free(in);
    j = NULL;
    CHECK(bf_join_sessions(s, sid, tid, &j) == 0);
    if (j) CHECK(fabs(j->budget_ns - 8e9) < 1 && fabs(j->rows[0].calls_per_s - 150) < 1e-6);
    bf_join_free(j);
  }
  bf_store_close(s);
}

static int exec(lua_State *L, const char *code, bf_err *err) {
  return bf_lua_exec(L, code, "=t", 0, err);
}

static void test_lua(const char *path) {
  bf_err e = BF_ERR_INIT;
  bf_lua_opts o = {.db_path = path, .sandbox = 1};
  lua_State *L = bf_lua_new(&o, &e);
  CHECK(L != NULL);
  if (!L) return;
  bf_err err = BF_ERR_INIT;
  CHECK(exec(L, "assert(bifocal.session(1).kind == 'sampled')", &err) == 0);
  CHECK(exec(L, "os.execute('true')", &err) == 2 && strstr(err.msg, "refused by the sandbox"));
  CHECK(exec(L, "io.popen('true')", &err) == 2 && strstr(err.msg, "refused by the sandbox"));
  CHECK(exec(L, "io.open('/tmp/bf_unit_x', 'w')", &err) == 2 && strstr(err.msg, "--out"));
  CHECK(exec(L, "for i = 1, 2 do", &err) == BF_LUA_INCOMPLETE);
  CHECK(exec(L, "error('x')", &err) == 2 && strcmp(err.msg, "t:1: x") == 0);
  CHECK(exec(L, "local r = bifocal.join(bifocal.session(1), bifocal.session(2)); assert(#r == 3)", &err) == 0);
  if (err.msg[0]) fprintf(stderr, "%s\n", err.msg);
  lua_close(L);
  bf_lua_opts bad = {.db_path = path, .sandbox = 1, .out_dir = "/nonexistent/dir"};
  CHECK(bf_lua_new(&bad, &e) == NULL && e.code == -ENOTDIR && strstr(e.msg, "not a directory"));
}

int main(void) {
  char path[] = "/tmp/bf_test_lua_XXXXXX";
  int fd = mkstemp(path);
  CHECK(fd >= 0);
  close(fd);
  unlink(path);
  test_spearman();
  test_join(path);
  test_lua(path);
  unlink_db(path);
  return CHECK_DONE();
}
