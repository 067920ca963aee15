/* test_governance.c — units of issue 8: the path token rule, a redacted copy
 * of a session with every kind of data (numbers kept, paths gone), gc of an
 * expired session next to one that shares its functions. */
#include <errno.h>
#include <sodium.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "copy.h"
#include "gc.h"
#include "redact.h"
#include "store.h"

static char dir[256];

static const char *tmp_path(const char *name) {
  static char buf[4][512];
  static int k;
  k = (k + 1) % 4;
  snprintf(buf[k], sizeof buf[k], "%s/%s", dir, name);
  return buf[k];
}

static void integrity(const char *path) {
  sqlite3 *db;
  CHECK(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL) == SQLITE_OK);
  sqlite3_stmt *st;
  CHECK(sqlite3_prepare_v2(db, "PRAGMA integrity_check", -1, &st, NULL) == SQLITE_OK);
  CHECK(sqlite3_step(st) == SQLITE_ROW);
  CHECK(strcmp((const char *)sqlite3_column_text(st, 0), "ok") == 0);
  sqlite3_finalize(st);
  sqlite3_close(db);
}

static int file_contains(const char *path, const char *needle) {
  FILE *f = fopen(path, "rb");
  if (!f) return 0;
  size_t cap = 1 << 20, n = 0;
  char *b = malloc(cap);
  size_t r;
  while ((r = fread(b + n, 1, cap - n, f)) > 0) {
    n += r;
    if (n == cap) b = realloc(b, cap *= 2);
  }
  fclose(f);
  int hit = memmem(b, n, needle, strlen(needle)) != NULL;
  free(b);
  return hit;
}

static void test_token_rule(void) {
  unsigned char k1[32] = {1}, k2[32] = {2};
  char a[64], b[64], c[64];
  const char *keep[] = {"/usr/lib/python3"};
  CHECK_EQ_INT(bf_redact_path(k1, "/home/alice/app/x.py", keep, 1, a, sizeof a), 0);
  CHECK_EQ_INT(bf_redact_path(k1, "/home/alice/app/x.py", keep, 1, b, sizeof b), 0);
  CHECK(strcmp(a, b) == 0);
  CHECK(strncmp(a, "<path:", 6) == 0 && strlen(a) == 23);
  CHECK_EQ_INT(bf_redact_path(k1, "/home/alice/app/y.py", keep, 1, c, sizeof c), 0);
  CHECK(strcmp(a, c) != 0);
  CHECK_EQ_INT(bf_redact_path(k2, "/home/alice/app/x.py", keep, 1, c, sizeof c), 0);
  CHECK(strcmp(a, c) != 0); /* another copy, another key */
  CHECK_EQ_INT(bf_redact_path(k1, "/usr/lib/python3.11/os.py", keep, 1, c, sizeof c), 1);
  CHECK(strcmp(c, "/usr/lib/python3.11/os.py") == 0);
  CHECK_EQ_INT(bf_redact_path(k1, "<builtin>", keep, 1, c, sizeof c), 1);
  CHECK_EQ_INT(bf_redact_path(k1, "<frozen importlib._bootstrap>", keep, 1, c, sizeof c), 1);
  CHECK_EQ_INT(bf_redact_path(k1, a, keep, 1, c, sizeof c), 1); /* tokens stay tokens */
  CHECK_EQ_INT(bf_redact_path(k1, "<template /home/alice/t.html>", keep, 1, c, sizeof c), 0);
  CHECK_EQ_INT(bf_redact_path(k1, "relative/app.py", NULL, 0, c, sizeof c), 0);
}

/* A sampled-and-traced looking session with two threads. */
static int64_t fill(bf_store *s, const char *label, int64_t expires, const char *leaf_file) {
  bf_session_info in = {.kind = "sampled", .clock = "cpu", .mode = "all", .rate_hz = 997, .achieved_rate_hz = 990.5,
                        .start_ns = 1700000000123456789LL, .duration_ns = 2500000000LL, .host = "build-host-7",
                        .pid = 4242, .command = "python /home/alice/app/serve.py --token=hunter2",
                        .python_version = "3.12.1", .python_build = "release", .commit = "abc123",
                        .label = label, .samples = 30, .missed = 2, .invalid = 1, .profiler_cpu_ns = 777,
                        .status = "complete", .expires_at_ns = expires,
                        .extra_json = "{\"cwd\":\"/home/alice/app\",\"n\":3,\"argv\":\"python serve.py\","
                                      "\"gil\":\"held\",\"esc\":\"a\\\"b/c\"}"};
  int64_t sid, fa, fb, fc, fra, frb, frc, s1, s2, s3, t1, t2;
  CHECK_EQ_INT(bf_store_session_begin(s, &in, &sid), 0);
  CHECK_EQ_INT(bf_store_intern_function(s, "/home/alice/app/serve.py", "main", 1, &fa), 0);
  CHECK_EQ_INT(bf_store_intern_function(s, "/home/alice/app/serve.py", "handle", 20, &fb), 0);
  CHECK_EQ_INT(bf_store_intern_function(s, leaf_file, "leaf", 7, &fc), 0);
  int64_t fd, frd, s4;
  CHECK_EQ_INT(bf_store_intern_function(s, "<unknown>", "render (/home/alice/app/serve.py:3);x /", 0, &fd), 0);
  CHECK_EQ_INT(bf_store_intern_frame(s, fd, 0, &frd), 0);
  CHECK_EQ_INT(bf_store_intern_frame(s, fa, 3, &fra), 0);
  CHECK_EQ_INT(bf_store_intern_frame(s, fb, 22, &frb), 0);
  CHECK_EQ_INT(bf_store_intern_frame(s, fc, 9, &frc), 0);
  CHECK_EQ_INT(bf_store_intern_stack(s, 0, fra, &s1), 0);
  CHECK_EQ_INT(bf_store_intern_stack(s, s1, frb, &s2), 0);
  CHECK_EQ_INT(bf_store_intern_stack(s, s2, frc, &s3), 0);
  CHECK_EQ_INT(bf_store_intern_stack(s, s3, frd, &s4), 0);
  CHECK_EQ_INT(bf_store_intern_thread(s, sid, 100, "MainThread", &t1), 0);
  CHECK_EQ_INT(bf_store_intern_thread(s, sid, 101, NULL, &t2), 0);
  for (int i = 0; i < 10; i++) {
    bf_sample a = {.thread_id = t1, .stack_id = i % 2 ? s3 : (i % 4 ? s4 : s2), .ts_ns = i * 1000, .flags = BF_SAMPLE_GIL | BF_SAMPLE_ON_CPU,
                   .count = 2, .weight = 1001 + i};
    bf_sample b = {.thread_id = t2, .stack_id = i % 3 ? 0 : s1, .ts_ns = i * 1000 + 5, .flags = BF_SAMPLE_IDLE,
                   .count = 1, .weight = 3};
    CHECK_EQ_INT(bf_store_sample_add(s, sid, &a), 0);
    CHECK_EQ_INT(bf_store_sample_add(s, sid, &b), 0);
  }
  bf_trace_func tf = {.function_id = fc, .calls = 5, .primitive_calls = 4, .resumes = 1, .self_ns = 50, .total_ns = 60,
                      .p50_ns = 10, .p90_ns = 12, .p99_ns = 13, .max_ns = 14, .records_kept = 2, .records_dropped = 3};
  CHECK_EQ_INT(bf_store_trace_func_put(s, sid, &tf), 0);
  bf_trace_edge te = {.caller_function_id = 0, .callee_function_id = fa, .calls = 1, .primitive_calls = 1,
                      .self_ns = 5, .total_ns = 99};
  CHECK_EQ_INT(bf_store_trace_edge_put(s, sid, &te), 0);
  te.caller_function_id = fb;
  te.callee_function_id = fc;
  CHECK_EQ_INT(bf_store_trace_edge_put(s, sid, &te), 0);
  bf_call_record cr = {.function_id = fc, .thread_id = t1, .start_ns = 11, .duration_ns = 22, .depth = 1,
                       .parent_function_id = fb};
  CHECK_EQ_INT(bf_store_call_record_add(s, sid, &cr), 0);
  CHECK_EQ_INT(bf_store_flush(s), 0);
  return sid;
}

typedef struct sum {
  bf_store *s;
  int64_t n, count, weight, ts, flags, depth, lines;
} sum;

static int add_sample(void *ud, const bf_sample *smp) {
  sum *m = ud;
  m->n++;
  m->count += smp->count;
  m->weight += smp->weight * (smp->ts_ns + 1);
  m->ts += smp->ts_ns;
  m->flags += smp->flags * (m->n);
  int64_t *fr = NULL;
  size_t n = 0;
  if (smp->stack_id && bf_store_stack_frames(m->s, smp->stack_id, &fr, &n) == 0) {
    m->depth += (int64_t)n;
    for (size_t i = 0; i < n; i++) {
      int64_t fid, line;
      CHECK_EQ_INT(bf_store_frame_get(m->s, fr[i], &fid, &line), 0);
      m->lines += line * (int64_t)(i + 1);
    }
  }
  free(fr);
  return 0;
}

static sum summarise(bf_store *s, int64_t sid) {
  sum m = {.s = s};
  CHECK_EQ_INT(bf_store_samples_foreach(s, sid, NULL, add_sample, &m), 0);
  return m;
}

static int count_tf(void *ud, const bf_trace_func *tf) {
  int64_t *x = ud;
  *x += tf->calls * 1000 + tf->p99_ns + tf->records_dropped;
  return 0;
}
static int count_te(void *ud, const bf_trace_edge *te) {
  int64_t *x = ud;
  *x += te->total_ns + (te->caller_function_id == 0);
  return 0;
}
static int count_cr(void *ud, const bf_call_record *r) {
  int64_t *x = ud;
  *x += r->duration_ns + r->depth + (r->parent_function_id != 0) + (r->thread_id != 0);
  return 0;
}

static void test_redacted_copy(void) {
  const char *src_path = tmp_path("src.db"), *out = tmp_path("red.db");
  bf_store *s, *r;
  const char *msg;
  CHECK_EQ_INT(bf_store_open(src_path, BF_STORE_CREATE, &s, &msg), 0);
  fill(s, "other", 0, "/srv/bob/vault.py");
  int64_t sid = fill(s, "mine", 0, "/usr/lib/python3.12/json/decoder.py");
  const char *keep[] = {"/usr/lib/python3"};
  bf_redact_opts ro = {.keep = keep, .nkeep = 1};
  int64_t nid = 0;
  CHECK_EQ_INT(bf_redact_session(s, sid, out, &ro, &nid), 0);
  CHECK_EQ_INT(nid, 1);
  CHECK(bf_redact_session(s, sid, out, &ro, &nid) == -EEXIST);
  CHECK(access(tmp_path("red.db-wal"), F_OK) != 0);
  integrity(out);
  CHECK(!file_contains(out, "alice"));
  CHECK(!file_contains(out, "/srv/bob"));
  CHECK(!file_contains(out, "hunter2"));
  CHECK(!file_contains(out, "build-host-7"));
  CHECK(file_contains(out, "/usr/lib/python3.12/json/decoder.py"));
  CHECK(file_contains(out, "render (<path:"));
  CHECK(file_contains(out, ":3);x <path:"));
  CHECK_EQ_INT(bf_store_open(out, BF_STORE_READONLY, &r, &msg), 0);
  bf_session_info *a, *b;
  CHECK_EQ_INT(bf_store_session_get(s, sid, &a), 0);
  CHECK_EQ_INT(bf_store_session_get(r, nid, &b), 0);
  CHECK(b->host == NULL && b->command == NULL && b->redacted == 1);
  CHECK(strcmp(b->label, "mine") == 0 && strcmp(b->commit, "abc123") == 0);
  CHECK_EQ_INT(b->start_ns, a->start_ns);
  CHECK_EQ_INT(b->duration_ns, a->duration_ns);
  CHECK_EQ_INT(b->pid, a->pid);
  CHECK_EQ_INT(b->missed, a->missed);
  CHECK_EQ_INT(b->invalid, a->invalid);
  CHECK_EQ_INT(b->profiler_cpu_ns, a->profiler_cpu_ns);
  CHECK(b->rate_hz == a->rate_hz && b->achieved_rate_hz == a->achieved_rate_hz);
  CHECK(strstr(b->extra_json, "\"n\":3") && strstr(b->extra_json, "\"gil\":\"held\""));
  CHECK(!strstr(b->extra_json, "/home") && !strstr(b->extra_json, "serve.py") && !strstr(b->extra_json, "b/c"));
  CHECK(strstr(b->extra_json, "\"cwd\":\"<path:"));
  bf_session_info_free(a);
  bf_session_info_free(b);
  sum x = summarise(s, sid), y = summarise(r, nid);
  CHECK_EQ_INT(x.n, y.n);
  CHECK_EQ_INT(x.count, y.count);
  CHECK_EQ_INT(x.weight, y.weight);
  CHECK_EQ_INT(x.ts, y.ts);
  CHECK_EQ_INT(x.flags, y.flags);
  CHECK_EQ_INT(x.depth, y.depth);
  CHECK_EQ_INT(x.lines, y.lines);
  int64_t p = 0, q = 0;
  bf_store_trace_funcs_foreach(s, sid, count_tf, &p);
  bf_store_trace_funcs_foreach(r, nid, count_tf, &q);
  CHECK(p == q && p > 0);
  p = q = 0;
  bf_store_trace_edges_foreach(s, sid, count_te, &p);
  bf_store_trace_edges_foreach(r, nid, count_te, &q);
  CHECK(p == q && p > 0);
  p = q = 0;
  bf_store_call_records_foreach(s, sid, count_cr, &p);
  bf_store_call_records_foreach(r, nid, count_cr, &q);
  CHECK(p == q && p > 0);
  bf_thread_ref *t;
  size_t nt;
  CHECK_EQ_INT(bf_store_threads(r, nid, &t, &nt), 0);
  CHECK_EQ_INT(nt, 2);
  CHECK(t[0].name && strcmp(t[0].name, "MainThread") == 0);
  bf_thread_refs_free(t, nt);
  bf_store_close(r);
  bf_store_close(s);
}

static void test_copy_into_busy_store_and_gc(void) {
  const char *path = tmp_path("gc.db");
  bf_store *s;
  const char *msg;
  CHECK_EQ_INT(bf_store_open(path, BF_STORE_CREATE, &s, &msg), 0);
  int64_t keep = fill(s, "keep", 0, "/home/alice/app/kept_leaf.py");
  int64_t gone = fill(s, "gone", 1000, "/home/alice/app/gone_leaf.py");
  int64_t copy = 0;
  CHECK_EQ_INT(bf_session_copy(s, gone, s, NULL, &copy), 0); /* same store: ids re-interned */
  CHECK(copy > gone);
  sum a = summarise(s, gone), b = summarise(s, copy);
  CHECK_EQ_INT(a.weight, b.weight);
  bf_gc_stats st;
  CHECK_EQ_INT(bf_gc(s, 2000, 0, &st), 0);
  CHECK_EQ_INT(st.sessions_deleted, 2); /* the copy kept the expiry */
  CHECK(st.swept && st.functions == 1 && st.strings == 1);
  bf_session_info *in;
  CHECK_EQ_INT(bf_store_session_get(s, gone, &in), -ENOENT);
  CHECK_EQ_INT(bf_store_session_get(s, keep, &in), 0);
  bf_session_info_free(in);
  sum k = summarise(s, keep);
  CHECK_EQ_INT(k.n, 20);
  CHECK(!file_contains(path, "gone_leaf"));
  CHECK(!file_contains(tmp_path("gc.db-wal"), "gone_leaf"));
  CHECK(file_contains(path, "kept_leaf"));
  /* interning after gc must not hand out deleted ids */
  int64_t f;
  CHECK_EQ_INT(bf_store_intern_function(s, "/home/alice/app/gone_leaf.py", "leaf", 7, &f), 0);
  bf_function_ref ref;
  CHECK_EQ_INT(bf_store_function_get(s, f, &ref), 0);
  CHECK(strcmp(ref.file, "/home/alice/app/gone_leaf.py") == 0);
  bf_store_close(s);
  integrity(path);
}

static void test_gc_leaves_a_running_capture_alone(void) {
  const char *path = tmp_path("busy.db");
  bf_store *s;
  const char *msg;
  CHECK_EQ_INT(bf_store_open(path, BF_STORE_CREATE, &s, &msg), 0);
  bf_session_info in = {.kind = "sampled", .expires_at_ns = 1};
  int64_t sid;
  CHECK_EQ_INT(bf_store_session_begin(s, &in, &sid), 0); /* status incomplete */
  fill(s, "x", 5, "/a.py");
  bf_gc_stats st;
  CHECK_EQ_INT(bf_gc(s, 1000, 0, &st), 0);
  CHECK_EQ_INT(st.sessions_deleted, 1);
  CHECK_EQ_INT(st.sessions_busy, 1);
  CHECK(!st.swept);
  CHECK_EQ_INT(bf_gc(s, 1000, 1, &st), 0);
  CHECK_EQ_INT(st.sessions_deleted, 1);
  CHECK(st.swept);
  bf_store_close(s);
  integrity(path);
}

int main(void) {
  if (sodium_init() < 0) return 1;
  snprintf(dir, sizeof dir, "/tmp/bf-gov-XXXXXX");
  if (!mkdtemp(dir)) return 1;
  test_token_rule();
  test_redacted_copy();
  test_copy_into_busy_store_and_gc();
  test_gc_leaves_a_running_capture_alone();
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
  return CHECK_DONE();
}
