/* session.c — session rows: begin, update, get, resolve, list, delete. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "store_impl.h"
#include "vec.h"

#define SESSION_COLS                                                                       \
  "id,kind,clock,mode,rate_hz,achieved_rate_hz,start_ns,duration_ns,host,pid,command,"     \
  "python_version,python_build,profiler_version,commit_id,label,samples,missed,invalid,"   \
  "profiler_cpu_ns,status,expires_at_ns,parent_id,redacted,created_ns,extra_json"
/* The same for reading: a capture killed before it finalised shows what its
 * chunks hold rather than 0 samples. */
#define SESSION_COLS_READ                                                                  \
  "id,kind,clock,mode,rate_hz,achieved_rate_hz,start_ns,duration_ns,host,pid,command,"     \
  "python_version,python_build,profiler_version,commit_id,label,"                          \
  "CASE WHEN status='incomplete' AND samples=0 THEN (SELECT coalesce(sum(n_samples),0) "   \
  "FROM sample_chunks WHERE session_id=sessions.id) ELSE samples END,missed,invalid,"       \
  "profiler_cpu_ns,status,expires_at_ns,parent_id,redacted,created_ns,extra_json"

static void bind_session(sqlite3_stmt *st, const bf_session_info *in, int64_t created) {
  bfs_bind_text(st, 2, in->kind ? in->kind : "sampled");
  bfs_bind_text(st, 3, in->clock);
  bfs_bind_text(st, 4, in->mode);
  sqlite3_bind_double(st, 5, in->rate_hz);
  sqlite3_bind_double(st, 6, in->achieved_rate_hz);
  sqlite3_bind_int64(st, 7, in->start_ns);
  sqlite3_bind_int64(st, 8, in->duration_ns);
  bfs_bind_text(st, 9, in->host);
  sqlite3_bind_int64(st, 10, in->pid);
  bfs_bind_text(st, 11, in->command);
  bfs_bind_text(st, 12, in->python_version);
  bfs_bind_text(st, 13, in->python_build);
  bfs_bind_text(st, 14, in->profiler_version);
  bfs_bind_text(st, 15, in->commit);
  bfs_bind_text(st, 16, in->label);
  sqlite3_bind_int64(st, 17, in->samples);
  sqlite3_bind_int64(st, 18, in->missed);
  sqlite3_bind_int64(st, 19, in->invalid);
  sqlite3_bind_int64(st, 20, in->profiler_cpu_ns);
  bfs_bind_text(st, 21, in->status ? in->status : "incomplete");
  sqlite3_bind_int64(st, 22, in->expires_at_ns);
  sqlite3_bind_int64(st, 23, in->parent_id);
  sqlite3_bind_int(st, 24, in->redacted);
  sqlite3_bind_int64(st, 25, created);
  bfs_bind_text(st, 26, in->extra_json);
}

int bf_store_session_begin(bf_store *s, const bf_session_info *info, int64_t *id) {
  if (s->readonly) return bf_store_fail(s, -EACCES, "database '%s' is open read-only", s->path);
  /* The session row is committed on its own so a crash leaves it visible as
   * "incomplete" rather than missing. */
  int was_open;
  int rc = bfs_own_begin(s, &was_open);
  if (rc) return rc;
  sqlite3_stmt *st = NULL;
  if (sqlite3_prepare_v2(s->db, "INSERT INTO sessions(" SESSION_COLS ") VALUES(NULL,?2,?3,?4,?5,?6,?7,?8,?9,?10,"
                                "?11,?12,?13,?14,?15,?16,?17,?18,?19,?20,?21,?22,?23,?24,?25,?26)",
                         -1, &st, NULL) != SQLITE_OK) {
    rc = bfs_fail_sql(s, "prepare session");
    goto out;
  }
  int64_t created = info->created_ns ? info->created_ns : bf_wall_ns();
  bind_session(st, info, created);
  if (sqlite3_step(st) != SQLITE_DONE) {
    rc = bfs_fail_sql(s, "insert session");
    goto out;
  }
  *id = sqlite3_last_insert_rowid(s->db);
out:
  sqlite3_finalize(st);
  return bfs_own_end(s, was_open, rc);
}

int bf_store_session_update(bf_store *s, const bf_session_info *info) {
  int rc = bf_store_flush(s);
  if (rc) return rc;
  int was_open;
  if ((rc = bfs_own_begin(s, &was_open))) return rc;
  sqlite3_stmt *st = NULL;
  if (sqlite3_prepare_v2(s->db,
                         "UPDATE sessions SET kind=?2,clock=?3,mode=?4,rate_hz=?5,achieved_rate_hz=?6,"
                         "start_ns=?7,duration_ns=?8,host=?9,pid=?10,command=?11,python_version=?12,"
                         "python_build=?13,profiler_version=?14,commit_id=?15,label=?16,samples=?17,"
                         "missed=?18,invalid=?19,profiler_cpu_ns=?20,status=?21,expires_at_ns=?22,"
                         "parent_id=?23,redacted=?24,created_ns=coalesce(nullif(?25,0),created_ns),"
                         "extra_json=?26 WHERE id=?1",
                         -1, &st, NULL) != SQLITE_OK) {
    rc = bfs_fail_sql(s, "prepare session update");
    goto out;
  }
  sqlite3_bind_int64(st, 1, info->id);
  bind_session(st, info, info->created_ns);
  if (sqlite3_step(st) != SQLITE_DONE) {
    rc = bfs_fail_sql(s, "update session");
    goto out;
  }
  if (sqlite3_changes(s->db) == 0) rc = bf_store_fail(s, -ENOENT, "no session %lld", (long long)info->id);
out:
  sqlite3_finalize(st);
  if (!was_open) {
    rc = bfs_own_end(s, was_open, rc);
  } else if (rc == 0 && s->txn_depth == 0) {
    rc = bfs_exec(s, "COMMIT");
    if (rc == 0) s->txn_open = 0;
  }
  return rc;
}

static bf_session_info *session_from_row(sqlite3_stmt *st) {
  /* One allocation: struct followed by the strings. */
  static const int text_cols[] = {1, 2, 3, 8, 10, 11, 12, 13, 14, 15, 20, 25};
  size_t len = sizeof(bf_session_info);
  for (size_t i = 0; i < sizeof text_cols / sizeof text_cols[0]; i++)
    len += (size_t)sqlite3_column_bytes(st, text_cols[i]) + 1;
  bf_session_info *in = calloc(1, len);
  if (!in) return NULL;
  char *p = (char *)(in + 1);
#define TXT(col, field)                                                       \
  do {                                                                        \
    const unsigned char *t = sqlite3_column_text(st, col);                    \
    if (t) {                                                                  \
      size_t l = (size_t)sqlite3_column_bytes(st, col);                       \
      memcpy(p, t, l);                                                        \
      p[l] = 0;                                                               \
      in->field = p;                                                          \
      p += l + 1;                                                             \
    }                                                                         \
  } while (0)
  in->id = sqlite3_column_int64(st, 0);
  TXT(1, kind);
  TXT(2, clock);
  TXT(3, mode);
  in->rate_hz = sqlite3_column_double(st, 4);
  in->achieved_rate_hz = sqlite3_column_double(st, 5);
  in->start_ns = sqlite3_column_int64(st, 6);
  in->duration_ns = sqlite3_column_int64(st, 7);
  TXT(8, host);
  in->pid = sqlite3_column_int64(st, 9);
  TXT(10, command);
  TXT(11, python_version);
  TXT(12, python_build);
  TXT(13, profiler_version);
  TXT(14, commit);
  TXT(15, label);
  in->samples = sqlite3_column_int64(st, 16);
  in->missed = sqlite3_column_int64(st, 17);
  in->invalid = sqlite3_column_int64(st, 18);
  in->profiler_cpu_ns = sqlite3_column_int64(st, 19);
  TXT(20, status);
  in->expires_at_ns = sqlite3_column_int64(st, 21);
  in->parent_id = sqlite3_column_int64(st, 22);
  in->redacted = sqlite3_column_int(st, 23);
  in->created_ns = sqlite3_column_int64(st, 24);
  TXT(25, extra_json);
#undef TXT
  return in;
}

void bf_session_info_free(bf_session_info *info) { free(info); }

int bf_store_session_get(bf_store *s, int64_t id, bf_session_info **out) {
  *out = NULL;
  sqlite3_stmt *st = NULL;
  if (sqlite3_prepare_v2(s->db, "SELECT " SESSION_COLS_READ " FROM sessions WHERE id=?1", -1, &st, NULL) !=
      SQLITE_OK)
    return bfs_fail_sql(s, "prepare");
  sqlite3_bind_int64(st, 1, id);
  int rc = sqlite3_step(st);
  if (rc == SQLITE_ROW) {
    *out = session_from_row(st);
    rc = *out ? 0 : -ENOMEM;
  } else if (rc == SQLITE_DONE) {
    rc = bf_store_fail(s, -ENOENT, "no session %lld in '%s' (see `bifocal sessions`)", (long long)id, s->path);
  } else {
    rc = bfs_fail_sql(s, "read session");
  }
  sqlite3_finalize(st);
  return rc;
}

int bf_store_session_resolve(bf_store *s, const char *arg, int64_t *id) {
  char *end = NULL;
  errno = 0;
  long long v = strtoll(arg, &end, 10);
  sqlite3_stmt *st = NULL;
  int rc;
  if (*arg && end && *end == 0 && errno == 0) {
    if (sqlite3_prepare_v2(s->db, "SELECT id FROM sessions WHERE id=?1", -1, &st, NULL) != SQLITE_OK)
      return bfs_fail_sql(s, "prepare");
    sqlite3_bind_int64(st, 1, v);
  } else {
    if (sqlite3_prepare_v2(s->db, "SELECT id FROM sessions WHERE label=?1 ORDER BY id DESC LIMIT 1", -1, &st,
                           NULL) != SQLITE_OK)
      return bfs_fail_sql(s, "prepare");
    sqlite3_bind_text(st, 1, arg, -1, SQLITE_TRANSIENT);
  }
  rc = sqlite3_step(st);
  if (rc == SQLITE_ROW) {
    *id = sqlite3_column_int64(st, 0);
    rc = 0;
  } else if (rc == SQLITE_DONE) {
    rc = bf_store_fail(s, -ENOENT, "no session '%s' in '%s' (see `bifocal sessions`)", arg, s->path);
  } else {
    rc = bfs_fail_sql(s, "find session");
  }
  sqlite3_finalize(st);
  return rc;
}

int bf_store_session_list(bf_store *s, bf_session_info ***out, size_t *n) {
  *out = NULL;
  *n = 0;
  sqlite3_stmt *st = NULL;
  if (sqlite3_prepare_v2(s->db, "SELECT " SESSION_COLS_READ " FROM sessions ORDER BY id", -1, &st, NULL) != SQLITE_OK)
    return bfs_fail_sql(s, "prepare");
  bf_session_info **arr = NULL;
  size_t len = 0, cap = 0;
  int rc;
  while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
    if (bf_vec_grow((void **)&arr, &cap, len + 1, sizeof *arr, 16)) goto oom;
    if (!(arr[len] = session_from_row(st))) goto oom;
    len++;
  }
  sqlite3_finalize(st);
  if (rc != SQLITE_DONE) {
    for (size_t i = 0; i < len; i++) free(arr[i]);
    free(arr);
    return bfs_fail_sql(s, "list sessions");
  }
  *out = arr;
  *n = len;
  return 0;
oom:
  sqlite3_finalize(st);
  for (size_t i = 0; i < len; i++) free(arr[i]);
  free(arr);
  return bf_store_fail(s, -ENOMEM, "out of memory");
}

int bf_store_session_delete(bf_store *s, int64_t id) {
  int rc = bf_store_flush(s);
  if (rc) return rc;
  if ((rc = bf_store_begin(s))) return rc;
  char sql[128];
  for (size_t i = 0; i < bfs_n_session_tables; i++) {
    snprintf(sql, sizeof sql, "DELETE FROM %s WHERE session_id=%lld", bfs_session_tables[i], (long long)id);
    if ((rc = bfs_exec(s, sql))) goto fail;
  }
  snprintf(sql, sizeof sql, "DELETE FROM sessions WHERE id=%lld", (long long)id);
  if ((rc = bfs_exec(s, sql))) goto fail;
  /* thread ids of the session may be cached */
  bf_map3_free(&s->th_map);
  return bf_store_commit(s);
fail:
  bf_store_rollback(s);
  return rc;
}
