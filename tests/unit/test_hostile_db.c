/* test_hostile_db.c — the database opener against crafted files (#32): views
 * in place of bifocal's tables, generated columns, expression indexes, a
 * trigger that deletes everything during bifocal's own writes, an interrupt
 * from a signal handler, and the read budget. Every open and read is timed:
 * a hostile file is refused (or read correctly) in well under a second. */
#include <errno.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "scratch.h"
#include "store.h"

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + t.tv_nsec / 1e9;
}

/* A database with two sessions, a thread and a few samples each. */
static void make_db(const char *path) {
  unlink_db(path);
  bf_store *s = NULL;
  CHECK(bf_store_open(path, BF_STORE_CREATE, &s, NULL) == 0);
  if (!s) return;
  for (int k = 0; k < 2; k++) {
    bf_session_info si = {.kind = "sampled", .clock = "wall", .mode = "all", .status = "complete"};
    int64_t sid, fn, fr, st, th;
    CHECK(bf_store_session_begin(s, &si, &sid) == 0);
    CHECK(bf_store_intern_function(s, "/srv/app.py", "work", 10, &fn) == 0);
    CHECK(bf_store_intern_frame(s, fn, 12, &fr) == 0);
    CHECK(bf_store_intern_stack(s, 0, fr, &st) == 0);
    CHECK(bf_store_intern_thread(s, sid, 100 + k, "main", &th) == 0);
    for (int i = 0; i < 10; i++) {
      bf_sample smp = {.thread_id = th, .stack_id = st, .ts_ns = 1000 * i, .count = 1, .weight = 1};
      CHECK(bf_store_sample_add(s, sid, &smp) == 0);
    }
  }
  bf_store_close(s);
}

static void alter(const char *path, const char *sql) {
  sqlite3 *db = NULL;
  CHECK(sqlite3_open(path, &db) == SQLITE_OK);
  char *msg = NULL;
  if (sqlite3_exec(db, sql, NULL, NULL, &msg) != SQLITE_OK) {
    fprintf(stderr, "alter: %s\n", msg ? msg : "?");
    CHECK(0);
  }
  sqlite3_free(msg);
  sqlite3_close(db);
}

static int64_t count_rows(const char *path, const char *sql) {
  sqlite3 *db = NULL;
  sqlite3_stmt *st = NULL;
  int64_t n = -1;
  if (sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL) == SQLITE_OK &&
      sqlite3_prepare_v2(db, sql, -1, &st, NULL) == SQLITE_OK && sqlite3_step(st) == SQLITE_ROW)
    n = sqlite3_column_int64(st, 0);
  sqlite3_finalize(st);
  sqlite3_close(db);
  return n;
}

#define RECURSIVE "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x+1 FROM c)"

static const struct attack {
  const char *name, *sql, *table;
} attacks[] = {
    {"view sessions",
     "ALTER TABLE sessions RENAME TO s_real; CREATE VIEW sessions AS " RECURSIVE
     " SELECT s_real.* FROM s_real, c WHERE c.x<0;",
     "'sessions' is a view"},
    {"view strings",
     "ALTER TABLE strings RENAME TO t_real; CREATE VIEW strings AS " RECURSIVE
     " SELECT t_real.* FROM t_real, c WHERE c.x<0;",
     "'strings' is a view"},
    {"generated column",
     "ALTER TABLE meta ADD COLUMN g TEXT GENERATED ALWAYS AS (printf('%.*c', 100000000, 'x')) VIRTUAL;",
     "'meta' has a generated column"},
    {"expression index", "CREATE INDEX evil ON stacks(abs(frame_id));", "'stacks' has an index on an expression"},
    {"partial index", "CREATE INDEX evil ON frames(line) WHERE line > 0;", "'frames' has an index on an expression"},
    {"extra column", "ALTER TABLE threads ADD COLUMN x INTEGER;", "'threads' has other columns"},
    {"dropped column", "ALTER TABLE audit DROP COLUMN argv;", "'audit' has other columns"},
    {"dropped table", "DROP TABLE call_records;", "'call_records' is missing"},
};

static void test_crafted(void) {
  const char *path = tmp_path("crafted.db");
  for (size_t i = 0; i < sizeof attacks / sizeof attacks[0]; i++) {
    for (int ro = 0; ro < 2; ro++) {
      make_db(path);
      alter(path, attacks[i].sql);
      bf_store *s = NULL;
      bf_err msg = BF_ERR_INIT;
      double t0 = now_s();
      int rc = bf_store_open(path, ro ? BF_STORE_READONLY : 0, &s, &msg);
      double dt = now_s() - t0;
      if (rc != -EINVAL || !strstr(msg.msg, attacks[i].table) || strchr(msg.msg, '\n'))
        fprintf(stderr, "%s (%s): rc %d: %s\n", attacks[i].name, ro ? "ro" : "rw", rc, bf_err_msg(&msg, "(null)"));
      CHECK_EQ_INT(rc, -EINVAL);
      CHECK(s == NULL);
      CHECK(strstr(msg.msg, attacks[i].table) && !strchr(msg.msg, '\n'));
      CHECK(dt < 1.0);
      bf_store_close(s);
    }
  }
  unlink_db(path);
}

/* The same crafted file in memory (a sealed import's path). */
static void test_crafted_image(void) {
  const char *path = tmp_path("img.db");
  make_db(path);
  alter(path, attacks[0].sql);
  alter(path, "PRAGMA journal_mode=DELETE");
  FILE *f = fopen(path, "rb");
  CHECK(f != NULL);
  if (!f) return;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  unsigned char *img = bf_store_image_buf_alloc((size_t)n);
  CHECK(img && fread(img, 1, (size_t)n, f) == (size_t)n);
  fclose(f);
  bf_store *s = NULL;
  bf_err msg = BF_ERR_INIT;
  double t0 = now_s();
  CHECK_EQ_INT(bf_store_open_image(img, (size_t)n, "evil.bfs", &s, &msg), -EINVAL);
  CHECK(now_s() - t0 < 1.0);
  CHECK(strstr(msg.msg, "'sessions' is a view"));
  bf_store_close(s);
  unlink_db(path);
}

/* Item 4: a trigger inside the file never runs during bifocal's writes. */
static void test_trigger(void) {
  const char *path = tmp_path("trigger.db");
  make_db(path);
  alter(path,
        "CREATE TRIGGER t1 AFTER INSERT ON audit BEGIN DELETE FROM sessions; DELETE FROM sample_chunks; END;"
        "CREATE TRIGGER t2 AFTER UPDATE ON sessions BEGIN DELETE FROM threads; END;");
  bf_store *s = NULL;
  CHECK(bf_store_open(path, 0, &s, NULL) == 0);
  if (!s) return;
  bf_audit_entry e = {.time_ns = 1, .user = "u", .command = "gc", .outcome = "started"};
  int64_t aid = 0;
  CHECK(bf_store_audit_add(s, &e, &aid) == 0);
  CHECK(bf_store_audit_update(s, aid, "ok", 1) == 0);
  bf_session_info *info = NULL;
  CHECK(bf_store_session_get(s, 1, &info) == 0);
  if (info) {
    info->label = "relabelled";
    CHECK(bf_store_session_update(s, info) == 0);
  }
  bf_session_info_free(info);
  bf_store_close(s);
  CHECK_EQ_INT(count_rows(path, "SELECT count(*) FROM sessions"), 2);
  CHECK_EQ_INT(count_rows(path, "SELECT count(*) FROM threads"), 2);
  CHECK_EQ_INT(count_rows(path, "SELECT sum(n_samples) FROM sample_chunks"), 20);
  CHECK_EQ_INT(count_rows(path, "SELECT count(*) FROM audit"), 1);
  unlink_db(path);
}

static int count_fn(void *ud, const bf_sample *smp) {
  *(int64_t *)ud += smp->count;
  return 0;
}

static void on_alarm(int sig) {
  (void)sig;
  bf_store_interrupt();
}

/* 20000 strings more: a database whose integrity check is a long read
 * (one row, at the end). */
static void grow(bf_store *s) {
  CHECK(bf_store_begin(s) == 0);
  char name[64];
  for (int i = 0; i < 20000; i++) {
    int64_t id;
    snprintf(name, sizeof name, "/srv/pkg/module_%d.py", i);
    CHECK(bf_store_intern_string(s, name, &id) == 0);
  }
  CHECK(bf_store_commit(s) == 0);
}

/* make_db at tmp_path(name), opened, grown and checked once (under the
 * default budget, uninterrupted). OUT: *path. NULL when it did not open. */
static bf_store *open_grown(const char *name, const char **path) {
  *path = tmp_path(name);
  make_db(*path);
  bf_store *s = NULL;
  CHECK(bf_store_open(*path, 0, &s, NULL) == 0);
  if (!s) return NULL;
  grow(s);
  CHECK(bf_store_check_untrusted(s) == 0);
  return s;
}

/* An interrupt (from a signal handler) ends a long statement; cleared,
 * reads work again. */
static void test_interrupt(void) {
  const char *path;
  bf_store *s = open_grown("intr.db", &path);
  if (!s) return;
  signal(SIGALRM, on_alarm);
  raise(SIGALRM);
  CHECK(bf_store_interrupted());
  CHECK(bf_store_check_untrusted(s) != 0);
  bf_store_interrupt_clear();
  CHECK(bf_store_check_untrusted(s) == 0);
  int64_t total = 0;
  CHECK(bf_store_samples_foreach(s, 1, NULL, count_fn, &total) == 0);
  CHECK_EQ_INT(total, 10);
  bf_session_info **list = NULL;
  size_t n = 0;
  CHECK(bf_store_session_list(s, &list, &n) == 0);
  CHECK_EQ_INT(n, 2);
  for (size_t i = 0; i < n; i++) bf_session_info_free(list[i]);
  free(list);
  signal(SIGALRM, SIG_DFL);
  bf_store_close(s);
  unlink_db(path);
}

/* The read budget: a read that runs past it without a row is stopped. A
 * long integrity check under a 1 ns budget fails; under the default it
 * passes. */
static void test_budget(void) {
  const char *path;
  bf_store *s = open_grown("budget.db", &path);
  if (!s) return;
  bf_store_set_stmt_budget(s, 1);
  CHECK(bf_store_check_untrusted(s) != 0);
  bf_store_set_stmt_budget(s, 30LL * 1000000000LL);
  CHECK(bf_store_check_untrusted(s) == 0);
  bf_store_close(s);
  unlink_db(path);
}

int main(void) {
  snprintf(scratch_dir(), SCRATCH_DIR_LEN, "/tmp/bf-hostile-XXXXXX");
  if (!mkdtemp(scratch_dir())) return 1;
  test_crafted();
  test_crafted_image();
  test_trigger();
  test_interrupt();
  test_budget();
  rmdir(scratch_dir());
  return CHECK_DONE();
}
