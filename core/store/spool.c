/* spool.c — the push_spool table behind record --push (see spool.h): short
 * statements, each its own transaction, so the recorder writing the same file
 * never waits long for the lock. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "spool.h"
#include "clock.h"
#include "store_impl.h"

/* One statement, bound by the caller's fn, stepped once. */
static int run1(bf_store *s, const char *sql, sqlite3_stmt **out, const char *what) {
  if (s->readonly) return bf_store_fail(s, -EACCES, "database '%s' is open read-only", s->path);
  if (sqlite3_prepare_v2(s->db, sql, -1, out, NULL) != SQLITE_OK) return bfs_fail_sql(s, what);
  return 0;
}

static int done(bf_store *s, sqlite3_stmt *st, const char *what) {
  int rc = sqlite3_step(st) == SQLITE_DONE ? 0 : bfs_fail_sql(s, what);
  sqlite3_finalize(st);
  return rc;
}

int bf_spool_add(bf_store *s, const bf_spool_row *r, const void *payload, size_t len) {
  sqlite3_stmt *st;
  int rc = run1(s,
                "INSERT OR IGNORE INTO push_spool(session_id, seq, window_start_ns, window_end_ns, target, url_suffix,"
                " content_type, state, attempts, next_try_ns, last_status, bytes, created_ns, sent_ns, payload)"
                " VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, 'pending', 0, 0, 0, ?8, ?9, 0, ?10)",
                &st, "spool a window");
  if (rc) return rc;
  sqlite3_bind_int64(st, 1, r->session_id);
  sqlite3_bind_int64(st, 2, r->seq);
  sqlite3_bind_int64(st, 3, r->window_start_ns);
  sqlite3_bind_int64(st, 4, r->window_end_ns);
  sqlite3_bind_text(st, 5, r->target, -1, SQLITE_STATIC);
  sqlite3_bind_text(st, 6, r->url_suffix, -1, SQLITE_STATIC);
  sqlite3_bind_text(st, 7, r->content_type, -1, SQLITE_STATIC);
  sqlite3_bind_int64(st, 8, (int64_t)len);
  sqlite3_bind_int64(st, 9, bf_wall_ns());
  sqlite3_bind_blob64(st, 10, payload, len, SQLITE_STATIC);
  return done(s, st, "spool a window");
}

static void text_col(sqlite3_stmt *st, int i, char *buf, size_t len) {
  const unsigned char *t = sqlite3_column_text(st, i);
  snprintf(buf, len, "%s", t ? (const char *)t : "");
}

int bf_spool_first(bf_store *s, const char *target, int64_t session_id, int with_refused, int with_payload,
                   bf_spool_row *r) {
  sqlite3_stmt *st;
  const char *sql =
      "SELECT id, session_id, seq, window_start_ns, window_end_ns, target, url_suffix, content_type, state, attempts,"
      " next_try_ns, last_status, bytes, sent_ns, CASE WHEN ?4 THEN payload END FROM push_spool"
      " WHERE target=?1 AND (?2=0 OR session_id=?2) AND (state='pending' OR (?3 AND state='refused'))"
      " ORDER BY session_id, seq LIMIT 1";
  if (sqlite3_prepare_v2(s->db, sql, -1, &st, NULL) != SQLITE_OK) return bfs_fail_sql(s, "read the push spool");
  sqlite3_bind_text(st, 1, target, -1, SQLITE_STATIC);
  sqlite3_bind_int64(st, 2, session_id);
  sqlite3_bind_int(st, 3, with_refused);
  sqlite3_bind_int(st, 4, with_payload);
  int step = sqlite3_step(st), rc = 0;
  if (step == SQLITE_ROW) {
    memset(r, 0, sizeof *r);
    r->id = sqlite3_column_int64(st, 0);
    r->session_id = sqlite3_column_int64(st, 1);
    r->seq = sqlite3_column_int64(st, 2);
    r->window_start_ns = sqlite3_column_int64(st, 3);
    r->window_end_ns = sqlite3_column_int64(st, 4);
    text_col(st, 5, r->target, sizeof r->target);
    text_col(st, 6, r->url_suffix, sizeof r->url_suffix);
    text_col(st, 7, r->content_type, sizeof r->content_type);
    text_col(st, 8, r->state, sizeof r->state);
    r->attempts = sqlite3_column_int64(st, 9);
    r->next_try_ns = sqlite3_column_int64(st, 10);
    r->last_status = sqlite3_column_int64(st, 11);
    r->bytes = sqlite3_column_int64(st, 12);
    r->sent_ns = sqlite3_column_int64(st, 13);
    int n = sqlite3_column_bytes(st, 14);
    const void *b = sqlite3_column_blob(st, 14);
    if (b && n > 0) {
      if (!(r->payload = malloc((size_t)n))) {
        rc = bf_store_fail(s, -ENOMEM, "out of memory");
      } else {
        memcpy(r->payload, b, (size_t)n);
        r->payload_len = (size_t)n;
      }
    }
    if (!rc) rc = 1;
  } else if (step != SQLITE_DONE) {
    rc = bfs_fail_sql(s, "read the push spool");
  }
  sqlite3_finalize(st);
  return rc;
}

int bf_spool_sent(bf_store *s, int64_t id, long status) {
  sqlite3_stmt *st;
  int rc = run1(s,
                "UPDATE push_spool SET state='sent', payload=NULL, attempts=attempts+1, last_status=?2, sent_ns=?3"
                " WHERE id=?1",
                &st, "mark a window sent");
  if (rc) return rc;
  sqlite3_bind_int64(st, 1, id);
  sqlite3_bind_int64(st, 2, status);
  sqlite3_bind_int64(st, 3, bf_wall_ns());
  return done(s, st, "mark a window sent");
}

int bf_spool_failed(bf_store *s, int64_t id, long status, int refused, int64_t next_try_ns) {
  sqlite3_stmt *st;
  int rc = run1(s,
                "UPDATE push_spool SET state=CASE WHEN ?3 THEN 'refused' ELSE 'pending' END, attempts=attempts+1,"
                " last_status=?2, next_try_ns=?4 WHERE id=?1 AND state IN ('pending', 'refused')",
                &st, "note a failed push");
  if (rc) return rc;
  sqlite3_bind_int64(st, 1, id);
  sqlite3_bind_int64(st, 2, status);
  sqlite3_bind_int(st, 3, refused);
  sqlite3_bind_int64(st, 4, next_try_ns);
  return done(s, st, "note a failed push");
}

/* SELECT of one integer (bound to target), into *out. */
static int one_int(bf_store *s, const char *sql, const char *target, int64_t *out) {
  sqlite3_stmt *st;
  if (sqlite3_prepare_v2(s->db, sql, -1, &st, NULL) != SQLITE_OK) return bfs_fail_sql(s, "read the push spool");
  sqlite3_bind_text(st, 1, target, -1, SQLITE_STATIC);
  int step = sqlite3_step(st), rc = 0;
  if (step == SQLITE_ROW)
    *out = sqlite3_column_int64(st, 0);
  else
    rc = bfs_fail_sql(s, "read the push spool");
  sqlite3_finalize(st);
  return rc;
}

int bf_spool_trim(bf_store *s, const char *target, int64_t max_bytes, int64_t *dropped, int64_t *first_seq,
                  int64_t *last_seq) {
  *dropped = 0;
  *first_seq = *last_seq = -1;
  int64_t total = 0;
  int rc = one_int(s, "SELECT coalesce(sum(bytes), 0) FROM push_spool WHERE target=?1 AND state IN ('pending', 'refused')",
                   target, &total);
  while (!rc && total > max_bytes) {
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(s->db,
                           "SELECT id, seq, bytes FROM push_spool WHERE target=?1 AND state IN ('pending', 'refused')"
                           " ORDER BY session_id, seq LIMIT 1",
                           -1, &st, NULL) != SQLITE_OK)
      return bfs_fail_sql(s, "read the push spool");
    sqlite3_bind_text(st, 1, target, -1, SQLITE_STATIC);
    if (sqlite3_step(st) != SQLITE_ROW) {
      sqlite3_finalize(st);
      break;
    }
    int64_t id = sqlite3_column_int64(st, 0), seq = sqlite3_column_int64(st, 1), b = sqlite3_column_int64(st, 2);
    sqlite3_finalize(st);
    char sql[160];
    snprintf(sql, sizeof sql, "UPDATE push_spool SET state='dropped', payload=NULL WHERE id=%lld", (long long)id);
    if ((rc = bfs_exec(s, sql))) break;
    total -= b;
    if (*first_seq < 0) *first_seq = seq;
    *last_seq = seq;
    (*dropped)++;
  }
  return rc;
}

int bf_spool_counts_get(bf_store *s, int64_t session_id, const char *target, bf_spool_counts *out) {
  memset(out, 0, sizeof *out);
  sqlite3_stmt *st;
  if (sqlite3_prepare_v2(s->db,
                         "SELECT count(*), coalesce(sum(state='sent'), 0), coalesce(sum(state='pending'), 0),"
                         " coalesce(sum(state='refused'), 0), coalesce(sum(state='dropped'), 0),"
                         " coalesce(sum(CASE WHEN state IN ('pending', 'refused') THEN bytes END), 0)"
                         " FROM push_spool WHERE session_id=?1 AND target=?2",
                         -1, &st, NULL) != SQLITE_OK)
    return bfs_fail_sql(s, "read the push spool");
  sqlite3_bind_int64(st, 1, session_id);
  sqlite3_bind_text(st, 2, target, -1, SQLITE_STATIC);
  int rc = 0;
  if (sqlite3_step(st) == SQLITE_ROW) {
    out->windows = sqlite3_column_int64(st, 0);
    out->sent = sqlite3_column_int64(st, 1);
    out->pending = sqlite3_column_int64(st, 2);
    out->refused = sqlite3_column_int64(st, 3);
    out->dropped = sqlite3_column_int64(st, 4);
    out->waiting_bytes = sqlite3_column_int64(st, 5);
  } else {
    rc = bfs_fail_sql(s, "read the push spool");
  }
  sqlite3_finalize(st);
  return rc;
}

int bf_spool_note_session(bf_store *s, int64_t session_id, const char *json) {
  sqlite3_stmt *st;
  int rc = run1(s,
                "UPDATE sessions SET extra_json=json_set(CASE WHEN json_valid(extra_json) THEN extra_json ELSE '{}' END,"
                " '$.push', json(?2)) WHERE id=?1",
                &st, "note the push in the session");
  if (rc) return rc;
  sqlite3_bind_int64(st, 1, session_id);
  sqlite3_bind_text(st, 2, json, -1, SQLITE_STATIC);
  return done(s, st, "note the push in the session");
}

void bf_spool_row_clear(bf_spool_row *r) {
  free(r->payload);
  r->payload = NULL;
  r->payload_len = 0;
}
