/* maint.c — maintenance the store does for gc, extract and share: secure
 * delete, compaction, the orphan sweep, images of a whole database, and the
 * check of a database from outside. Sample chunks hold stack ids inside their
 * encoded blobs, so the sweep finds live stacks by decoding the live sessions.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store_impl.h"

/* Run SQL; a failure's message is "database '<path>': <note><sqlite's message>". */
static int exec_noted(bf_store *s, const char *note, const char *sql, const char *fallback) {
  char *msg = NULL;
  if (sqlite3_exec(s->db, sql, NULL, NULL, &msg) != SQLITE_OK) {
    int rc = bf_store_fail(s, -EIO, "database '%s': %s%s", s->path, note, msg ? msg : fallback);
    sqlite3_free(msg);
    return rc;
  }
  return 0;
}

int bf_store_secure_delete(bf_store *s) { return exec_noted(s, "", "PRAGMA secure_delete=ON", "exec failed"); }

int bf_store_mark_redacted(bf_store *s) {
  return exec_noted(s, "", "INSERT OR REPLACE INTO meta(key,value) VALUES('redacted','1')", "exec failed");
}

int bf_store_compact(bf_store *s, int flags) {
  return exec_noted(s, "",
                    (flags & BF_STORE_COMPACT_STANDALONE)
                        ? "VACUUM; PRAGMA wal_checkpoint(TRUNCATE); PRAGMA journal_mode=DELETE"
                        : "VACUUM; PRAGMA wal_checkpoint(TRUNCATE)",
                    "exec failed");
}

/* ---- the orphan sweep ---- */

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
  if (sqlite3_step(m->ins) != SQLITE_DONE) return bf_store_fail(m->s, -EIO, "gc: %s", sqlite3_errmsg(m->s->db));
  return 0;
}

static int sweep_one(bf_store *s, const char *sql, int64_t *count) {
  int rc = exec_noted(s, "gc: ", sql, "failed");
  if (!rc) *count += sqlite3_changes(s->db);
  return rc;
}

/* Fill the temp table gc_keep with every stack a sample of live[] uses. */
static int mark_live(bf_store *s, const int64_t *live, size_t n) {
  marker m = {.s = s};
  int rc = exec_noted(s, "gc: ", "CREATE TEMP TABLE IF NOT EXISTS gc_keep(id INTEGER PRIMARY KEY); DELETE FROM gc_keep",
                      "failed");
  if (rc) return rc;
  if (sqlite3_prepare_v2(s->db, "INSERT OR IGNORE INTO gc_keep(id) VALUES(?1)", -1, &m.ins, NULL) != SQLITE_OK)
    return bf_store_fail(s, -EIO, "gc: %s", sqlite3_errmsg(s->db));
  for (size_t i = 0; i < n && !rc; i++) rc = bf_store_samples_foreach(s, live[i], NULL, mark_stack, &m);
  sqlite3_finalize(m.ins);
  bf_map3_free(&m.seen);
  return rc;
}

int bf_store_sweep(bf_store *s, const int64_t *live, size_t n, bf_store_sweep_counts *out) {
  int rc = mark_live(s, live, n);
  if (rc) return rc;
  /* Rows of sessions that no longer exist (an interrupted delete), then the
   * interning tables from the leaves down. */
  char sql[160];
  int64_t dummy = 0;
  for (size_t i = 0; i < bfs_n_session_tables; i++) {
    snprintf(sql, sizeof sql, "DELETE FROM %s WHERE session_id NOT IN (SELECT id FROM sessions)",
             bfs_session_tables[i]);
    if ((rc = sweep_one(s, sql, &dummy))) return rc;
  }
  if ((rc = sweep_one(s,
                      "WITH RECURSIVE live(id) AS (SELECT id FROM gc_keep UNION SELECT stack_id FROM memory_samples"
                      " UNION SELECT st.parent_id FROM stacks st"
                      " JOIN live ON st.id=live.id WHERE st.parent_id<>0)"
                      " DELETE FROM stacks WHERE id NOT IN (SELECT id FROM live)",
                      &out->stacks)))
    return rc;
  if ((rc = sweep_one(s, "DELETE FROM frames WHERE id NOT IN (SELECT frame_id FROM stacks)", &out->frames)))
    return rc;
  if ((rc = sweep_one(s,
                      "DELETE FROM functions WHERE id NOT IN (SELECT function_id FROM frames"
                      " UNION SELECT function_id FROM trace_functions UNION SELECT caller_id FROM trace_edges"
                      " UNION SELECT callee_id FROM trace_edges UNION SELECT function_id FROM call_records"
                      " UNION SELECT parent_function_id FROM call_records)",
                      &out->functions)))
    return rc;
  if ((rc = sweep_one(s,
                      "DELETE FROM strings WHERE id NOT IN (SELECT file_id FROM functions"
                      " UNION SELECT qualname_id FROM functions)",
                      &out->strings)))
    return rc;
  return exec_noted(s, "gc: ", "DROP TABLE gc_keep", "failed");
}

/* ---- whole-database images ---- */

int bf_store_image(bf_store *s, size_t max_len, unsigned char **image, size_t *len) {
  *image = NULL;
  *len = 0;
  sqlite3_int64 sz = 0;
  unsigned char *img = sqlite3_exec(s->db, "VACUUM", NULL, NULL, NULL) == SQLITE_OK
                           ? sqlite3_serialize(s->db, "main", &sz, 0)
                           : NULL;
  if (img && sz > 0 && (uint64_t)sz > max_len) {
    explicit_bzero(img, (size_t)sz);
    sqlite3_free(img);
    return bf_store_fail(s, -EFBIG, "the database is larger than %zu bytes", max_len);
  }
  unsigned char *copy = img && sz > 0 ? malloc((size_t)sz) : NULL;
  if (copy) memcpy(copy, img, (size_t)sz);
  if (img) explicit_bzero(img, sz > 0 ? (size_t)sz : 0);
  sqlite3_free(img);
  if (!copy) return bf_store_fail(s, -ENOMEM, "out of memory");
  *image = copy;
  *len = (size_t)sz;
  return 0;
}

unsigned char *bf_store_image_buf_alloc(size_t len) { return sqlite3_malloc64(len); }

void bf_store_image_buf_free(unsigned char *buf) { sqlite3_free(buf); }

int bf_store_check_untrusted(bf_store *s) {
  sqlite3_db_config(s->db, SQLITE_DBCONFIG_DEFENSIVE, 1, NULL);
  sqlite3_db_config(s->db, SQLITE_DBCONFIG_TRUSTED_SCHEMA, 0, NULL);
  sqlite3_stmt *st = NULL;
  int ok = 0;
  if (sqlite3_prepare_v2(s->db, "PRAGMA integrity_check", -1, &st, NULL) == SQLITE_OK &&
      sqlite3_step(st) == SQLITE_ROW) {
    const char *r = (const char *)sqlite3_column_text(st, 0);
    ok = r && strcmp(r, "ok") == 0;
  }
  sqlite3_finalize(st);
  return ok ? 0 : -EBADMSG;
}
