/* gc.c — expiry and orphan sweep. Sample chunks hold stack ids inside their
 * encoded blobs, so the live stacks are found by decoding every remaining
 * session; everything else is plain SQL over the interning tables.
 */
#include <errno.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gc.h"
#include "query.h"
#include "store_int.h"

static int exec_s(bf_store *s, const char *sql) {
  char *msg = NULL;
  if (sqlite3_exec(bf_store_db(s), sql, NULL, NULL, &msg) != SQLITE_OK) {
    int rc = bf_store_fail(s, -EIO, "database '%s': gc: %s", bf_store_path(s), msg ? msg : "failed");
    sqlite3_free(msg);
    return rc;
  }
  return 0;
}

typedef struct marker {
  bf_store *s;
  bf_map3 seen;
  sqlite3_stmt *ins;
} marker;

static int mark_stack(void *ud, const bf_sample *smp) {
  marker *m = ud;
  if (smp->stack_id == 0 || bf_map3_get(&m->seen, smp->stack_id, 0, 0)) return 0;
  if (bf_map3_put(&m->seen, smp->stack_id, 0, 0, 1)) return bf_store_fail(m->s, -ENOMEM, "out of memory");
  sqlite3_reset(m->ins);
  sqlite3_bind_int64(m->ins, 1, smp->stack_id);
  if (sqlite3_step(m->ins) != SQLITE_DONE)
    return bf_store_fail(m->s, -EIO, "gc: %s", sqlite3_errmsg(bf_store_db(m->s)));
  return 0;
}

static int sweep_one(bf_store *s, const char *sql, int64_t *count) {
  int rc = exec_s(s, sql);
  if (!rc) *count += sqlite3_changes(bf_store_db(s));
  return rc;
}

static int sweep(bf_store *s, const int64_t *live, size_t n, bf_gc_stats *st) {
  marker m = {.s = s};
  int rc = exec_s(s, "CREATE TEMP TABLE IF NOT EXISTS gc_keep(id INTEGER PRIMARY KEY); DELETE FROM gc_keep");
  if (rc) return rc;
  if (sqlite3_prepare_v2(bf_store_db(s), "INSERT OR IGNORE INTO gc_keep(id) VALUES(?1)", -1, &m.ins, NULL) !=
      SQLITE_OK)
    return bf_store_fail(s, -EIO, "gc: %s", sqlite3_errmsg(bf_store_db(s)));
  for (size_t i = 0; i < n && !rc; i++) rc = bf_q_timeline_foreach(s, live[i], NULL, mark_stack, &m);
  sqlite3_finalize(m.ins);
  bf_map3_free(&m.seen);
  if (rc) return rc;
  /* Rows of sessions that no longer exist (an interrupted delete), then the
   * interning tables from the leaves down. */
  static const char *const by_session[] = {"sample_chunks", "threads", "trace_functions", "trace_edges",
                                           "call_records"};
  char sql[160];
  int64_t dummy = 0;
  for (size_t i = 0; i < sizeof by_session / sizeof by_session[0]; i++) {
    snprintf(sql, sizeof sql, "DELETE FROM %s WHERE session_id NOT IN (SELECT id FROM sessions)", by_session[i]);
    if ((rc = sweep_one(s, sql, &dummy))) return rc;
  }
  if ((rc = sweep_one(s,
                      "WITH RECURSIVE live(id) AS (SELECT id FROM gc_keep UNION SELECT st.parent_id FROM stacks st"
                      " JOIN live ON st.id=live.id WHERE st.parent_id<>0)"
                      " DELETE FROM stacks WHERE id NOT IN (SELECT id FROM live)",
                      &st->stacks)))
    return rc;
  if ((rc = sweep_one(s, "DELETE FROM frames WHERE id NOT IN (SELECT frame_id FROM stacks)", &st->frames)))
    return rc;
  if ((rc = sweep_one(s,
                      "DELETE FROM functions WHERE id NOT IN (SELECT function_id FROM frames"
                      " UNION SELECT function_id FROM trace_functions UNION SELECT caller_id FROM trace_edges"
                      " UNION SELECT callee_id FROM trace_edges UNION SELECT function_id FROM call_records"
                      " UNION SELECT parent_function_id FROM call_records)",
                      &st->functions)))
    return rc;
  if ((rc = sweep_one(s,
                      "DELETE FROM strings WHERE id NOT IN (SELECT file_id FROM functions"
                      " UNION SELECT qualname_id FROM functions)",
                      &st->strings)))
    return rc;
  return exec_s(s, "DROP TABLE gc_keep");
}

int bf_gc(bf_store *s, int64_t now_ns, int force, bf_gc_stats *out) {
  bf_gc_stats st = {0};
  bf_session_info **list = NULL;
  int64_t *live = NULL;
  size_t n = 0, nlive = 0;
  int rc = exec_s(s, "PRAGMA secure_delete=ON");
  if (rc) return rc;
  if ((rc = bf_store_begin(s))) return rc;
  if ((rc = bf_store_session_list(s, &list, &n))) goto fail;
  if (n && !(live = calloc(n, sizeof *live))) {
    rc = bf_store_fail(s, -ENOMEM, "out of memory");
    goto fail;
  }
  int busy = 0;
  for (size_t i = 0; i < n; i++) {
    bf_session_info *in = list[i];
    int writing = in->status && strcmp(in->status, "incomplete") == 0 &&
                  now_ns - in->created_ns < BF_GC_BUSY_WINDOW_NS;
    if (writing) busy = 1;
    if (in->expires_at_ns > 0 && in->expires_at_ns <= now_ns) {
      if (writing && !force) {
        st.sessions_busy++;
      } else {
        if ((rc = bf_store_session_delete(s, in->id))) goto fail;
        st.sessions_deleted++;
        continue;
      }
    }
    live[nlive++] = in->id;
  }
  if (!busy || force) {
    if ((rc = sweep(s, live, nlive, &st))) goto fail;
    st.swept = 1;
  }
  if ((rc = bf_store_commit(s))) goto fail;
  /* Deleted rows may sit in the interning caches: a begin/rollback pair
   * drops them (nothing is open, so nothing is undone). */
  if (bf_store_begin(s) == 0) bf_store_rollback(s);
  /* VACUUM rewrites the file without the freed pages; the TRUNCATE checkpoint
   * moves it into the main file and empties the WAL, which held old pages. */
  if ((rc = exec_s(s, "VACUUM"))) goto out;
  if ((rc = exec_s(s, "PRAGMA wal_checkpoint(TRUNCATE)"))) goto out;
  if (out) *out = st;
  goto out;
fail:
  bf_store_rollback(s);
out:
  for (size_t i = 0; i < n; i++) bf_session_info_free(list[i]);
  free(list);
  free(live);
  return rc;
}
