/* memory.c — sampled memory (record --memory): the rows charging a memory
 * change to the stack that ran, and the process's memory over time. Rows are
 * written in batches the sampler keeps; reading is one ordered walk. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store_impl.h"

/* Insert n rows of `cols` int64 values each (vals[i*cols + k]) with sql. */
static int insert_rows(bf_store *s, const char *sql, const int64_t *vals, size_t n, int cols,
                       const char *what) {
  if (!n) return 0;
  int rc = bfs_ensure_txn(s);
  if (rc) return rc;
  sqlite3_stmt *st = NULL;
  if (sqlite3_prepare_v2(s->db, sql, -1, &st, NULL) != SQLITE_OK) return bfs_fail_sql(s, what);
  for (size_t i = 0; i < n && !rc; i++) {
    for (int k = 0; k < cols; k++) sqlite3_bind_int64(st, k + 1, vals[i * (size_t)cols + (size_t)k]);
    if (sqlite3_step(st) != SQLITE_DONE) rc = bfs_fail_sql(s, what);
    sqlite3_reset(st);
  }
  sqlite3_finalize(st);
  return rc;
}

int bf_store_memory_samples_add(bf_store *s, int64_t session_id, const bf_memory_sample *rows, size_t n) {
  if (!n) return 0;
  int64_t *v = malloc(n * 7 * sizeof *v);
  if (!v) return bf_store_fail(s, -ENOMEM, "out of memory");
  for (size_t i = 0; i < n; i++) {
    int64_t r[7] = {session_id,         rows[i].thread_id,  rows[i].stack_id, rows[i].ts_ns,
                    rows[i].rss_delta, rows[i].anon_delta, rows[i].py_delta};
    memcpy(v + i * 7, r, sizeof r);
  }
  int rc = insert_rows(s,
                       "INSERT INTO memory_samples(session_id,thread_id,stack_id,ts_ns,rss_delta,anon_delta,"
                       "py_delta) VALUES(?1,?2,?3,?4,?5,?6,?7)",
                       v, n, 7, "write memory samples");
  free(v);
  return rc;
}

int bf_store_memory_points_add(bf_store *s, int64_t session_id, const bf_memory_point *pts, size_t n) {
  if (!n) return 0;
  int64_t *v = malloc(n * 5 * sizeof *v);
  if (!v) return bf_store_fail(s, -ENOMEM, "out of memory");
  for (size_t i = 0; i < n; i++) {
    int64_t r[5] = {session_id, pts[i].ts_ns, pts[i].rss_bytes, pts[i].anon_bytes, pts[i].py_bytes};
    memcpy(v + i * 5, r, sizeof r);
  }
  int rc = insert_rows(s,
                       "INSERT INTO memory_timeline(session_id,ts_ns,rss_bytes,anon_bytes,py_bytes) "
                       "VALUES(?1,?2,?3,?4,?5)",
                       v, n, 5, "write memory timeline");
  free(v);
  return rc;
}

#define TREE_CTE \
  "WITH RECURSIVE tree(id) AS (SELECT ?1 UNION SELECT s.id FROM sessions s JOIN tree ON s.parent_id=tree.id) "
#define MEM_COLS "SELECT thread_id,stack_id,ts_ns,rss_delta,anon_delta,py_delta FROM memory_samples WHERE "

int bf_store_memory_foreach(bf_store *s, int64_t session_id, const bf_sample_filter *f,
                            bf_memory_sample_fn fn, void *ud) {
  const char *sql = f && f->tree ? TREE_CTE MEM_COLS "session_id IN (SELECT id FROM tree) AND (?2=0 OR thread_id=?2)"
                                                     " AND ts_ns>=?3 AND (?4<=0 OR ts_ns<?4) ORDER BY ts_ns, rowid"
                                 : MEM_COLS "session_id=?1 AND (?2=0 OR thread_id=?2) AND ts_ns>=?3"
                                            " AND (?4<=0 OR ts_ns<?4) ORDER BY ts_ns, rowid";
  sqlite3_stmt *st = NULL;
  if (sqlite3_prepare_v2(s->db, sql, -1, &st, NULL) != SQLITE_OK) return bfs_fail_sql(s, "read memory samples");
  sqlite3_bind_int64(st, 1, session_id);
  sqlite3_bind_int64(st, 2, f ? f->thread_id : 0);
  sqlite3_bind_int64(st, 3, f ? f->since_ns : 0);
  sqlite3_bind_int64(st, 4, f ? f->until_ns : 0);
  int rc;
  while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
    bf_memory_sample m;
    int64_t *col[] = {&m.thread_id, &m.stack_id, &m.ts_ns, &m.rss_delta, &m.anon_delta, &m.py_delta};
    for (int i = 0; i < 6; i++) *col[i] = sqlite3_column_int64(st, i);
    int r = fn(ud, &m);
    if (r) {
      sqlite3_finalize(st);
      return r;
    }
  }
  sqlite3_finalize(st);
  return rc == SQLITE_DONE ? 0 : bfs_fail_sql(s, "read memory samples");
}

int bf_store_memory_timeline_foreach(bf_store *s, int64_t session_id, bf_memory_point_fn fn, void *ud) {
  sqlite3_stmt *st = NULL;
  if (sqlite3_prepare_v2(s->db,
                         "SELECT ts_ns,rss_bytes,anon_bytes,py_bytes FROM memory_timeline WHERE session_id=?1 "
                         "ORDER BY ts_ns, rowid",
                         -1, &st, NULL) != SQLITE_OK)
    return bfs_fail_sql(s, "read memory timeline");
  sqlite3_bind_int64(st, 1, session_id);
  int rc;
  while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
    bf_memory_point p = {sqlite3_column_int64(st, 0), sqlite3_column_int64(st, 1), sqlite3_column_int64(st, 2),
                         sqlite3_column_int64(st, 3)};
    int r = fn(ud, &p);
    if (r) {
      sqlite3_finalize(st);
      return r;
    }
  }
  sqlite3_finalize(st);
  return rc == SQLITE_DONE ? 0 : bfs_fail_sql(s, "read memory timeline");
}

static int count_of(bf_store *s, const char *sql, int64_t session_id, int64_t *out) {
  sqlite3_stmt *st = NULL;
  if (sqlite3_prepare_v2(s->db, sql, -1, &st, NULL) != SQLITE_OK) return bfs_fail_sql(s, "count memory rows");
  sqlite3_bind_int64(st, 1, session_id);
  int rc = sqlite3_step(st);
  if (rc == SQLITE_ROW) *out = sqlite3_column_int64(st, 0);
  sqlite3_finalize(st);
  return rc == SQLITE_ROW ? 0 : bfs_fail_sql(s, "count memory rows");
}

int bf_store_memory_count(bf_store *s, int64_t session_id, int64_t *rows, int64_t *points) {
  int64_t r = 0, p = 0;
  int rc = count_of(s, "SELECT count(*) FROM memory_samples WHERE session_id=?1", session_id, &r);
  if (!rc) rc = count_of(s, "SELECT count(*) FROM memory_timeline WHERE session_id=?1", session_id, &p);
  if (rc) return rc;
  *rows = r;
  *points = p;
  return 0;
}
