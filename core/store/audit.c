/* audit.c — the audit trail: who ran what against which process. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "store_impl.h"

int bf_store_audit_add(bf_store *s, const bf_audit_entry *e, int64_t *id) {
  if (s->readonly) return bf_store_fail(s, -EACCES, "database '%s' is open read-only", s->path);
  int was_open;
  int rc = bfs_own_begin(s, &was_open);
  if (rc) return rc;
  sqlite3_stmt *st = NULL;
  if (sqlite3_prepare_v2(s->db,
                         "INSERT INTO audit(time_ns,user,uid,target_pid,target_uid,command,argv,outcome,"
                         "session_id) VALUES(?1,?2,?3,?4,?5,?6,?7,?8,?9)",
                         -1, &st, NULL) != SQLITE_OK) {
    rc = bfs_fail_sql(s, "prepare");
    goto out;
  }
  sqlite3_bind_int64(st, 1, e->time_ns ? e->time_ns : bf_wall_ns());
  bfs_bind_text(st, 2, e->user);
  sqlite3_bind_int64(st, 3, e->uid);
  sqlite3_bind_int64(st, 4, e->target_pid);
  sqlite3_bind_int64(st, 5, e->target_uid);
  bfs_bind_text(st, 6, e->command);
  bfs_bind_text(st, 7, e->argv);
  bfs_bind_text(st, 8, e->outcome);
  sqlite3_bind_int64(st, 9, e->session_id);
  if (sqlite3_step(st) != SQLITE_DONE) {
    rc = bfs_fail_sql(s, "write audit");
    goto out;
  }
  if (id) *id = sqlite3_last_insert_rowid(s->db);
out:
  sqlite3_finalize(st);
  return bfs_own_end(s, was_open, rc);
}

int bf_store_audit_update(bf_store *s, int64_t id, const char *outcome, int64_t session_id) {
  int was_open;
  int rc = bfs_own_begin(s, &was_open);
  if (rc) return rc;
  sqlite3_stmt *st = NULL;
  if (sqlite3_prepare_v2(s->db, "UPDATE audit SET outcome=?2, session_id=?3 WHERE id=?1", -1, &st, NULL) !=
      SQLITE_OK) {
    rc = bfs_fail_sql(s, "prepare");
    goto out;
  }
  sqlite3_bind_int64(st, 1, id);
  bfs_bind_text(st, 2, outcome);
  sqlite3_bind_int64(st, 3, session_id);
  if (sqlite3_step(st) != SQLITE_DONE) rc = bfs_fail_sql(s, "update audit");
out:
  sqlite3_finalize(st);
  return bfs_own_end(s, was_open, rc);
}

int bf_store_audit_foreach(bf_store *s, bf_audit_fn fn, void *ud) {
  sqlite3_stmt *st = NULL;
  if (sqlite3_prepare_v2(s->db,
                         "SELECT id,time_ns,user,uid,target_pid,target_uid,command,argv,outcome,session_id "
                         "FROM audit ORDER BY id",
                         -1, &st, NULL) != SQLITE_OK)
    return bfs_fail_sql(s, "prepare");
  int rc;
  while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
    bf_audit_entry e;
    e.id = sqlite3_column_int64(st, 0);
    e.time_ns = sqlite3_column_int64(st, 1);
    e.user = (const char *)sqlite3_column_text(st, 2);
    e.uid = sqlite3_column_int64(st, 3);
    e.target_pid = sqlite3_column_int64(st, 4);
    e.target_uid = sqlite3_column_int64(st, 5);
    e.command = (const char *)sqlite3_column_text(st, 6);
    e.argv = (const char *)sqlite3_column_text(st, 7);
    e.outcome = (const char *)sqlite3_column_text(st, 8);
    e.session_id = sqlite3_column_int64(st, 9);
    int x = fn(ud, &e);
    if (x) {
      sqlite3_finalize(st);
      return x;
    }
  }
  sqlite3_finalize(st);
  return rc == SQLITE_DONE ? 0 : bfs_fail_sql(s, "read audit");
}
