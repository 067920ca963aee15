/* guard.c — every database is untrusted input: each connection is opened
 * defensive (no triggers, no views, nothing trusted in the schema), bifocal's
 * tables are checked to be plain tables with the expected columns before
 * anything reads them, and every statement runs under a progress handler that
 * ends it on an interrupt (SIGINT/SIGTERM through bf_store_interrupt) or when a
 * read runs too long without producing a row.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "store_impl.h"

/* Set by bf_store_interrupt (a signal handler): every handle's progress
 * handler then ends its statement. */
static volatile sig_atomic_t interrupt_pending;

void bf_store_interrupt(void) { interrupt_pending = 1; }
void bf_store_interrupt_clear(void) { interrupt_pending = 0; }
int bf_store_interrupted(void) { return interrupt_pending != 0; }

/* VM steps between progress checks: one monotonic clock read per ~10 us of
 * work, too few to measure. */
#define PROGRESS_STEPS 4000

/* A statement started or produced a row: the read is making progress. */
static int on_trace(unsigned type, void *ud, void *p, void *x) {
  (void)x;
  bf_store *s = ud;
  s->progress_events++;
  if (type == SQLITE_TRACE_STMT) s->cur_write = !sqlite3_stmt_readonly((sqlite3_stmt *)p);
  return 0;
}

static int on_progress(void *ud) {
  bf_store *s = ud;
  if (interrupt_pending) return 1;
  if (s->stmt_budget_ns <= 0 || s->cur_write) return 0;
  int64_t now = bf_mono_ns();
  if (s->progress_events != s->progress_seen || s->progress_mark_ns == 0) {
    s->progress_seen = s->progress_events;
    s->progress_mark_ns = now;
    return 0;
  }
  if (now - s->progress_mark_ns > s->stmt_budget_ns) {
    s->budget_hit = 1;
    return 1;
  }
  return 0;
}

void bf_store_set_stmt_budget(bf_store *s, int64_t ns) { s->stmt_budget_ns = ns; }

int bfs_harden(bf_store *s) {
  sqlite3 *db = s->db;
  int ok = 1, v = -1;
  /* Each call reports the setting it left in v: refuse to go on if SQLite
   * could not turn one off (a build without it). */
  ok &= sqlite3_db_config(db, SQLITE_DBCONFIG_DEFENSIVE, 1, &v) == SQLITE_OK && v == 1;
  ok &= sqlite3_db_config(db, SQLITE_DBCONFIG_ENABLE_TRIGGER, 0, &v) == SQLITE_OK && v == 0;
  ok &= sqlite3_db_config(db, SQLITE_DBCONFIG_ENABLE_VIEW, 0, &v) == SQLITE_OK && v == 0;
  ok &= sqlite3_db_config(db, SQLITE_DBCONFIG_TRUSTED_SCHEMA, 0, &v) == SQLITE_OK && v == 0;
  ok &= sqlite3_db_config(db, SQLITE_DBCONFIG_ENABLE_LOAD_EXTENSION, 0, &v) == SQLITE_OK && v == 0;
  if (!ok)
    return bf_store_fail(s, -ENOTSUP,
                         "database '%s': this SQLite (%s) cannot open databases defensively (triggers and views "
                         "off); build bifocal against SQLite 3.35 or newer",
                         s->path, sqlite3_libversion());
  if (!s->stmt_budget_ns) s->stmt_budget_ns = BF_STORE_STMT_BUDGET_NS;
  sqlite3_trace_v2(db, SQLITE_TRACE_STMT | SQLITE_TRACE_ROW, on_trace, s);
  sqlite3_progress_handler(db, PROGRESS_STEPS, on_progress, s);
  return 0;
}

int bfs_fail_interrupt(bf_store *s, const char *what) {
  if (s->budget_hit) {
    s->budget_hit = 0;
    return bf_store_fail(s, -ETIMEDOUT,
                         "database '%s': %s: a read ran %.0f s without producing a row and was stopped; the "
                         "file may be crafted to hang readers (check it: sqlite3 '%s' 'PRAGMA integrity_check')",
                         s->path, what, (double)s->stmt_budget_ns / 1e9, s->path);
  }
  return bf_store_fail(s, -EINTR, "database '%s': %s: interrupted", s->path, what);
}

/* ---- bifocal's tables ---------------------------------------------------------- */

typedef struct table_spec {
  const char *name;
  const char *const cols[27]; /* NULL-terminated, in order */
} table_spec;

static const table_spec tables[] = {
    {"sessions",
     {"id", "kind", "clock", "mode", "rate_hz", "achieved_rate_hz", "start_ns", "duration_ns", "host", "pid",
      "command", "python_version", "python_build", "profiler_version", "commit_id", "label", "samples", "missed",
      "invalid", "profiler_cpu_ns", "status", "expires_at_ns", "parent_id", "redacted", "created_ns", "extra_json",
      NULL}},
    {"strings", {"id", "s", NULL}},
    {"functions", {"id", "file_id", "qualname_id", "firstlineno", NULL}},
    {"frames", {"id", "function_id", "line", NULL}},
    {"stacks", {"id", "parent_id", "frame_id", NULL}},
    {"threads", {"id", "session_id", "native_tid", "name", NULL}},
    {"sample_chunks",
     {"id", "session_id", "thread_id", "first_ts_ns", "last_ts_ns", "n_records", "n_samples", "data", NULL}},
    {"trace_functions",
     {"session_id", "function_id", "calls", "primitive_calls", "resumes", "self_ns", "total_ns", "p50_ns", "p90_ns",
      "p99_ns", "max_ns", "records_kept", "records_dropped", NULL}},
    {"trace_edges",
     {"session_id", "caller_id", "callee_id", "calls", "primitive_calls", "self_ns", "total_ns", NULL}},
    {"call_records",
     {"id", "session_id", "function_id", "thread_id", "start_ns", "duration_ns", "depth", "parent_function_id", NULL}},
    {"trace_memory",
     {"session_id", "function_id", "allocs", "alloc_bytes", "frees", "freed_bytes", "live_count", "live_bytes",
      NULL}},
    {"trace_memory_edges",
     {"session_id", "caller_id", "callee_id", "allocs", "alloc_bytes", "frees", "freed_bytes", "live_count",
      "live_bytes", NULL}},
    {"trace_memory_top", {"session_id", "rank", "size_bytes", "function_id", "stack", NULL}},
    {"audit",
     {"id", "time_ns", "user", "uid", "target_pid", "target_uid", "command", "argv", "outcome", "session_id", NULL}},
    {"meta", {"key", "value", NULL}},
    {"push_spool",
     {"id", "session_id", "seq", "window_start_ns", "window_end_ns", "target", "url_suffix", "content_type", "state",
      "attempts", "next_try_ns", "last_status", "bytes", "created_ns", "sent_ns", "payload", NULL}},
    {"memory_samples",
     {"session_id", "thread_id", "stack_id", "ts_ns", "rss_delta", "anon_delta", "py_delta", NULL}},
    {"memory_timeline", {"session_id", "ts_ns", "rss_bytes", "anon_bytes", "py_bytes", NULL}},
};

static int altered(bf_store *s, const char *table, const char *why) {
  return bf_store_fail(s, -EINVAL,
                       "database '%s': bifocal's table '%s' %s (the file was altered outside bifocal, perhaps to hang "
                       "or mislead its readers); nothing read: restore the file from a copy you trust",
                       s->path, table, why);
}

/* The three checks, prepared once per open and bound per table. */
static const char *const check_sql[3] = {
    "SELECT type, sql FROM main.sqlite_schema WHERE name=?1 COLLATE NOCASE",
    /* columns, in order; hidden != 0 is a generated column */
    "SELECT name, hidden FROM pragma_table_xinfo(?1, 'main') ORDER BY cid",
    /* indexes: no partial index, no expression (index_xinfo cid -2) */
    "SELECT count(*) FROM pragma_index_list(?1, 'main') il WHERE il.partial OR EXISTS"
    " (SELECT 1 FROM pragma_index_xinfo(il.name, 'main') WHERE cid=-2)",
};

/* One table: a plain table (not a view or virtual table) whose columns are
 * exactly spec's, none generated, with no index on an expression or a part
 * of the rows (those run code from the file on every write). */
static int check_table(bf_store *s, const table_spec *t, sqlite3_stmt *const st[3]) {
  int rc = 0, n = 0, step;
  for (int k = 0; k < 3; k++) {
    sqlite3_reset(st[k]);
    sqlite3_bind_text(st[k], 1, t->name, -1, SQLITE_STATIC);
  }
  while ((step = sqlite3_step(st[0])) == SQLITE_ROW) {
    const char *type = (const char *)sqlite3_column_text(st[0], 0);
    const char *sql = (const char *)sqlite3_column_text(st[0], 1);
    n++;
    if (!type || strcmp(type, "table") != 0) {
      char why[64];
      snprintf(why, sizeof why, "is a %.20s, not a table", type ? type : "(no type)");
      rc = altered(s, t->name, why);
    } else if (!sql || strncmp(sql, "CREATE TABLE", 12) != 0) {
      rc = altered(s, t->name, "is a virtual table");
    }
    if (rc) return rc;
  }
  if (step != SQLITE_DONE) return bfs_fail_sql(s, "read schema");
  if (n != 1) return altered(s, t->name, n ? "is defined more than once" : "is missing");
  int i = 0;
  while ((step = sqlite3_step(st[1])) == SQLITE_ROW) {
    const char *col = (const char *)sqlite3_column_text(st[1], 0);
    if (sqlite3_column_int(st[1], 1) != 0) return altered(s, t->name, "has a generated column");
    if (!t->cols[i] || !col || strcmp(col, t->cols[i]) != 0) return altered(s, t->name, "has other columns");
    i++;
  }
  if (step != SQLITE_DONE) return bfs_fail_sql(s, "read schema");
  if (t->cols[i]) return altered(s, t->name, "lacks columns");
  if (sqlite3_step(st[2]) != SQLITE_ROW) return bfs_fail_sql(s, "read schema");
  if (sqlite3_column_int64(st[2], 0) != 0) return altered(s, t->name, "has an index on an expression or a partial index");
  return 0;
}

int bfs_check_schema(bf_store *s) {
  sqlite3_stmt *st[3] = {NULL, NULL, NULL};
  int rc = 0;
  for (int k = 0; k < 3 && !rc; k++)
    if (sqlite3_prepare_v2(s->db, check_sql[k], -1, &st[k], NULL) != SQLITE_OK) rc = bfs_fail_sql(s, "read schema");
  for (size_t i = 0; !rc && i < sizeof tables / sizeof tables[0]; i++) rc = check_table(s, &tables[i], st);
  for (int k = 0; k < 3; k++) sqlite3_finalize(st[k]);
  return rc;
}
