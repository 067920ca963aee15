/* test_store.c — store units: interning, sample round trip, traced data,
 * migrations/refusals, corrupt inputs; PRAGMA integrity_check after each. */
#include <errno.h>
#include <fcntl.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "check_db.h"
#include "profile.h"
#include "scratch.h"
#include "store.h"
#include "store_int.h"



static void test_intern_and_samples(void) {
  const char *path = tmp_path("a.db");
  bf_store *s;
  bf_err msg = BF_ERR_INIT;
  CHECK_EQ_INT(bf_store_open(path, BF_STORE_CREATE, &s, &msg), 0);
  struct stat st;
  CHECK(stat(path, &st) == 0 && (st.st_mode & 0777) == 0600);
  bf_session_info in = {.kind = "sampled", .clock = "wall", .mode = "all", .rate_hz = 1000, .label = "t1"};
  int64_t sid;
  CHECK_EQ_INT(bf_store_session_begin(s, &in, &sid), 0);
  int64_t f1, f2, f1b, fr1, fr2, stk1, stk2, stk2b, th;
  CHECK_EQ_INT(bf_store_intern_function(s, "app.py", "main", 1, &f1), 0);
  CHECK_EQ_INT(bf_store_intern_function(s, "app.py", "work", 10, &f2), 0);
  CHECK_EQ_INT(bf_store_intern_function(s, "app.py", "main", 1, &f1b), 0);
  CHECK_EQ_INT(f1, f1b);
  CHECK(f1 != f2);
  CHECK_EQ_INT(bf_store_intern_frame(s, f1, 5, &fr1), 0);
  CHECK_EQ_INT(bf_store_intern_frame(s, f2, 12, &fr2), 0);
  CHECK_EQ_INT(bf_store_intern_stack(s, 0, fr1, &stk1), 0);
  CHECK_EQ_INT(bf_store_intern_stack(s, stk1, fr2, &stk2), 0);
  CHECK_EQ_INT(bf_store_intern_stack(s, stk1, fr2, &stk2b), 0);
  CHECK_EQ_INT(stk2, stk2b);
  CHECK_EQ_INT(bf_store_intern_thread(s, sid, 4242, NULL, &th), 0);
  int64_t th2;
  CHECK_EQ_INT(bf_store_intern_thread(s, sid, 4242, "MainThread", &th2), 0);
  CHECK_EQ_INT(th, th2);
  /* 30000 samples: 3 in 4 on stk2 */
  for (int i = 0; i < 30000; i++) {
    bf_sample x = {.thread_id = th, .stack_id = (i % 4) ? stk2 : stk1, .ts_ns = (int64_t)i * 1000000,
                   .flags = (i % 4) ? BF_SAMPLE_ON_CPU | BF_SAMPLE_GIL : BF_SAMPLE_IDLE, .count = 1,
                   .weight = 1000000};
    CHECK_EQ_INT(bf_store_sample_add(s, sid, &x), 0);
  }
  in.id = sid;
  in.samples = 30000;
  in.status = "complete";
  CHECK_EQ_INT(bf_store_session_update(s, &in), 0);
  bf_store_close(s);
  check_integrity(path);

  CHECK_EQ_INT(bf_store_open(path, BF_STORE_READONLY, &s, &msg), 0);
  int64_t rid;
  CHECK_EQ_INT(bf_store_session_resolve(s, "t1", &rid), 0);
  CHECK_EQ_INT(rid, sid);
  CHECK(bf_store_session_resolve(s, "nope", &rid) == -ENOENT);
  bf_profile *p;
  CHECK_EQ_INT(bf_profile_functions(s, sid, NULL, BF_SORT_SELF, &p), 0);
  CHECK_EQ_INT(p->n, 2);
  CHECK_EQ_INT(p->total_samples, 30000);
  CHECK(strcmp(p->rows[0].qualname, "work") == 0);
  CHECK_EQ_INT(p->rows[0].self_samples, 22500);
  CHECK(p->rows[0].self_share > 0.7499 && p->rows[0].self_share < 0.7501);
  CHECK(p->rows[0].self_lo < 0.75 && p->rows[0].self_hi > 0.75);
  CHECK(strcmp(p->rows[1].qualname, "main") == 0);
  CHECK_EQ_INT(p->rows[1].total_samples, 30000);
  CHECK_EQ_INT(p->rows[1].self_samples, 7500);
  bf_profile_free(p);
  /* time window: first 1000 samples */
  bf_sample_filter f = {.until_ns = 1000LL * 1000000};
  CHECK_EQ_INT(bf_profile_functions(s, sid, &f, BF_SORT_SELF, &p), 0);
  CHECK_EQ_INT(p->total_samples, 1000);
  bf_profile_free(p);
  bf_thread_ref *threads;
  size_t nth;
  CHECK_EQ_INT(bf_store_threads(s, sid, &threads, &nth), 0);
  CHECK_EQ_INT(nth, 1);
  CHECK(threads[0].name && strcmp(threads[0].name, "MainThread") == 0);
  bf_thread_refs_free(threads, nth);
  int64_t *frames;
  size_t nf;
  CHECK_EQ_INT(bf_store_stack_frames(s, stk2, &frames, &nf), 0);
  CHECK_EQ_INT(nf, 2);
  CHECK_EQ_INT(frames[0], fr1);
  CHECK_EQ_INT(frames[1], fr2);
  free(frames);
  bf_store_close(s);
  check_integrity(path);
}

static void test_traced(void) {
  const char *path = tmp_path("b.db");
  bf_store *s;
  CHECK_EQ_INT(bf_store_open(path, BF_STORE_CREATE, &s, NULL), 0);
  bf_session_info in = {.kind = "traced", .clock = "wall", .mode = "trace"};
  int64_t sid, fa, fb;
  CHECK_EQ_INT(bf_store_session_begin(s, &in, &sid), 0);
  CHECK_EQ_INT(bf_store_intern_function(s, "x.py", "a", 1, &fa), 0);
  CHECK_EQ_INT(bf_store_intern_function(s, "<builtin>", "builtins.len", 0, &fb), 0);
  bf_trace_func ta = {fa, 10, 10, 0, 600, 1000, -1, -1, -1, -1, 0, 0};
  bf_trace_func tb = {fb, 100, 100, 0, 400, 400, -1, -1, -1, -1, 0, 0};
  CHECK_EQ_INT(bf_store_trace_func_put(s, sid, &ta), 0);
  CHECK_EQ_INT(bf_store_trace_func_put(s, sid, &tb), 0);
  bf_trace_edge e0 = {0, fa, 10, 10, 600, 1000}, e1 = {fa, fb, 100, 100, 400, 400};
  CHECK_EQ_INT(bf_store_trace_edge_put(s, sid, &e0), 0);
  CHECK_EQ_INT(bf_store_trace_edge_put(s, sid, &e1), 0);
  bf_call_record r = {fa, 0, 5, 100, 0, 0};
  CHECK_EQ_INT(bf_store_call_record_add(s, sid, &r), 0);
  CHECK_EQ_INT(bf_store_flush(s), 0);
  bf_profile *p;
  CHECK_EQ_INT(bf_profile_functions(s, sid, NULL, BF_SORT_SELF, &p), 0);
  CHECK_EQ_INT(p->traced, 1);
  CHECK_EQ_INT(p->n, 2);
  CHECK_EQ_INT(p->rows[0].calls, 10);
  CHECK_EQ_INT(p->rows[0].self_ns, 600);
  CHECK(p->rows[0].self_share > 0.59 && p->rows[0].self_share < 0.61);
  bf_profile_free(p);
  /* audit */
  bf_audit_entry a = {.user = "root", .uid = 0, .target_pid = 1, .target_uid = 0, .command = "dump",
                      .argv = "bifocal dump 1", .outcome = "ok"};
  int64_t aid;
  CHECK_EQ_INT(bf_store_audit_add(s, &a, &aid), 0);
  CHECK_EQ_INT(bf_store_audit_update(s, aid, "ok", sid), 0);
  /* delete */
  CHECK_EQ_INT(bf_store_session_delete(s, sid), 0);
  bf_session_info *got;
  CHECK(bf_store_session_get(s, sid, &got) == -ENOENT);
  bf_store_close(s);
  check_integrity(path);
}

static void write_file(const char *path, const void *data, size_t n) {
  FILE *f = fopen(path, "wb");
  fwrite(data, 1, n, f);
  fclose(f);
}

static void test_refusals(void) {
  bf_store *s;
  bf_err msg = BF_ERR_INIT;
  CHECK(bf_store_open(tmp_path("missing.db"), BF_STORE_READONLY, &s, &msg) == -ENOENT);
  CHECK(s == NULL && strstr(msg.msg, "does not exist"));
  /* random bytes: refused and untouched */
  unsigned char junk[4096];
  for (size_t i = 0; i < sizeof junk; i++) junk[i] = (unsigned char)(i * 131 + 7);
  write_file(tmp_path("junk.db"), junk, sizeof junk);
  CHECK(bf_store_open(tmp_path("junk.db"), BF_STORE_CREATE, &s, &msg) == -EINVAL);
  CHECK(strstr(msg.msg, "not a SQLite database") != NULL);
  FILE *f = fopen(tmp_path("junk.db"), "rb");
  unsigned char back[4096];
  CHECK(fread(back, 1, sizeof back, f) == sizeof back);
  fclose(f);
  CHECK(memcmp(junk, back, sizeof junk) == 0);
  /* a foreign SQLite database */
  sqlite3 *db;
  sqlite3_open(tmp_path("foreign.db"), &db);
  sqlite3_exec(db, "CREATE TABLE t(x); INSERT INTO t VALUES(1);", NULL, NULL, NULL);
  sqlite3_close(db);
  CHECK(bf_store_open(tmp_path("foreign.db"), BF_STORE_CREATE, &s, &msg) == -EINVAL);
  CHECK(strstr(msg.msg, "not a bifocal one") != NULL);
  check_integrity(tmp_path("foreign.db"));
  /* newer schema */
  CHECK_EQ_INT(bf_store_open(tmp_path("newer.db"), BF_STORE_CREATE, &s, &msg), 0);
  bf_store_close(s);
  sqlite3_open(tmp_path("newer.db"), &db);
  sqlite3_exec(db, "PRAGMA user_version=99", NULL, NULL, NULL);
  sqlite3_close(db);
  CHECK(bf_store_open(tmp_path("newer.db"), BF_STORE_CREATE, &s, &msg) == -EPROTO);
  CHECK(strstr(msg.msg, "newer") != NULL);
  check_integrity(tmp_path("newer.db"));
}

static int count_cb(void *ud, const bf_sample *x) {
  (void)x;
  (*(int *)ud)++;
  return 0;
}

static void test_chunk_decoder_garbage(void) {
  /* Random bytes never crash the decoder; they decode or fail cleanly. */
  uint8_t buf[257];
  unsigned seed = 12345;
  for (int iter = 0; iter < 20000; iter++) {
    size_t n = (size_t)(rand_r(&seed) % sizeof buf);
    for (size_t i = 0; i < n; i++) buf[i] = (uint8_t)rand_r(&seed);
    if (iter % 2) buf[0] &= 31;
    int cnt = 0;
    int rc = bf_chunk_decode(buf, n, 1, 0, NULL, count_cb, &cnt);
    CHECK(rc == 0 || rc == -EBADMSG);
  }
  uint64_t v;
  uint8_t over[12];
  memset(over, 0xff, sizeof over);
  CHECK(bf_varint_get(over, sizeof over, &v) == 0);
}

static void test_rollback(void) {
  const char *path = tmp_path("c.db");
  bf_store *s;
  CHECK_EQ_INT(bf_store_open(path, BF_STORE_CREATE, &s, NULL), 0);
  CHECK_EQ_INT(bf_store_begin(s), 0);
  bf_session_info in = {.kind = "imported", .clock = "wall"};
  int64_t sid, fn;
  CHECK_EQ_INT(bf_store_session_begin(s, &in, &sid), 0);
  CHECK_EQ_INT(bf_store_intern_function(s, "z.py", "zz", 3, &fn), 0);
  CHECK_EQ_INT(bf_store_rollback(s), 0);
  bf_session_info **list;
  size_t n;
  CHECK_EQ_INT(bf_store_session_list(s, &list, &n), 0);
  CHECK_EQ_INT(n, 0);
  free(list);
  /* cache was dropped: interning again gives a valid id */
  CHECK_EQ_INT(bf_store_intern_function(s, "z.py", "zz", 3, &fn), 0);
  bf_function_ref ref;
  CHECK_EQ_INT(bf_store_flush(s), 0);
  CHECK_EQ_INT(bf_store_function_get(s, fn, &ref), 0);
  CHECK(strcmp(ref.qualname, "zz") == 0);
  bf_store_close(s);
  check_integrity(path);
}

/* Reverse caches: rows created after a lookup filled the cache are found too. */
static void test_read_after_write(void) {
  const char *path = tmp_path("d.db");
  bf_store *s;
  CHECK_EQ_INT(bf_store_open(path, BF_STORE_CREATE, &s, NULL), 0);
  int64_t ids[600];
  bf_function_ref ref;
  for (int i = 0; i < 600; i++) {
    char q[32];
    snprintf(q, sizeof q, "f%d", i);
    CHECK_EQ_INT(bf_store_intern_function(s, "m.py", q, i, &ids[i]), 0);
    if (i == 10) CHECK_EQ_INT(bf_store_function_get(s, ids[0], &ref), 0); /* fills the cache */
  }
  for (int i = 0; i < 600; i += 37) {
    CHECK_EQ_INT(bf_store_function_get(s, ids[i], &ref), 0);
    CHECK_EQ_INT(ref.firstlineno, i);
  }
  bf_store_close(s);
  check_integrity(path);
}

/* Id of string str in the strings table read with SQLite itself (0 if none). */
static int64_t open_and_find(const char *path, const char *str) {
  sqlite3 *db;
  sqlite3_stmt *st;
  int64_t id = 0;
  if (sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL) != SQLITE_OK) return -1;
  if (sqlite3_prepare_v2(db, "SELECT id FROM strings WHERE s=?1", -1, &st, NULL) == SQLITE_OK) {
    sqlite3_bind_text(st, 1, str, -1, SQLITE_STATIC);
    if (sqlite3_step(st) == SQLITE_ROW) id = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
  }
  sqlite3_close(db);
  return id;
}

/* The string cache (one map keyed by content hash): ids agree with the
 * strings table read directly, across handles, whether a string reached the
 * cache by interning or by a reverse lookup, and after a rollback. */
static void test_string_cache(void) {
  const char *path = tmp_path("e.db");
  enum { N = 3000 };
  static int64_t ids[N];
  bf_store *s;
  CHECK_EQ_INT(bf_store_open(path, BF_STORE_CREATE, &s, NULL), 0);
  char q[64];
  for (int i = 0; i < N; i++) {
    snprintf(q, sizeof q, "pkg%d.mod.func_%d", i % 13, i);
    CHECK_EQ_INT(bf_store_intern_function(s, i % 2 ? "a.py" : "b.py", q, i, &ids[i]), 0);
  }
  bf_store_close(s);
  CHECK_EQ_INT(bf_store_open(path, 0, &s, NULL), 0);
  bf_function_ref ref;
  CHECK_EQ_INT(bf_store_function_get(s, ids[N / 2], &ref), 0); /* loads every string into the cache */
  sqlite3 *db;
  CHECK(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL) == SQLITE_OK);
  sqlite3_stmt *st;
  CHECK(sqlite3_prepare_v2(db, "SELECT id FROM strings WHERE s=?1", -1, &st, NULL) == SQLITE_OK);
  int bad = 0;
  for (int i = 0; i < N; i += 7) {
    snprintf(q, sizeof q, "pkg%d.mod.func_%d", i % 13, i);
    int64_t sid = 0, again = 0;
    if (bf_store_intern_string(s, q, &sid)) bad++;
    sqlite3_reset(st);
    sqlite3_bind_text(st, 1, q, -1, SQLITE_TRANSIENT);
    if (sqlite3_step(st) != SQLITE_ROW || sqlite3_column_int64(st, 0) != sid) bad++;
    if (bf_store_intern_string(s, q, &again) || again != sid) bad++;
    if (bf_store_function_get(s, ids[i], &ref) || strcmp(ref.qualname, q) != 0 || ref.firstlineno != i) bad++;
  }
  CHECK_EQ_INT(bad, 0);
  /* a string interned in a rolled-back transaction is forgotten, then made again */
  int64_t gone = 0, back = 0;
  CHECK_EQ_INT(bf_store_begin(s), 0);
  CHECK_EQ_INT(bf_store_intern_string(s, "only-in-the-rollback", &gone), 0);
  CHECK_EQ_INT(bf_store_rollback(s), 0);
  CHECK_EQ_INT(bf_store_intern_string(s, "only-in-the-rollback", &back), 0);
  CHECK_EQ_INT(bf_store_flush(s), 0);
  sqlite3_finalize(st);
  sqlite3_close(db);
  bf_store_close(s);
  CHECK_EQ_INT(bf_store_open(path, BF_STORE_READONLY, &s, NULL), 0);
  CHECK_EQ_INT(bf_store_function_get(s, ids[0], &ref), 0);
  CHECK(strcmp(ref.file, "b.py") == 0);
  bf_store_close(s);
  CHECK(open_and_find(path, "only-in-the-rollback") == back);
  check_integrity(path);
}

int main(void) {
  char *dir = scratch_dir();
  snprintf(dir, SCRATCH_DIR_LEN, "/tmp/bf_test_store_XXXXXX");
  if (!mkdtemp(dir)) return 1;
  test_intern_and_samples();
  test_traced();
  test_refusals();
  test_chunk_decoder_garbage();
  test_rollback();
  test_read_after_write();
  test_string_cache();
  char cmd[512];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  if (system(cmd) != 0) return 1;
  return CHECK_DONE();
}
