/* schema.c — the schema, its version in PRAGMA user_version, migrations,
 * and the registry of per-session tables. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store_impl.h"

static const char schema_v1[] =
    "CREATE TABLE sessions(id INTEGER PRIMARY KEY, kind TEXT NOT NULL, clock TEXT, mode TEXT,"
    " rate_hz REAL, achieved_rate_hz REAL, start_ns INTEGER, duration_ns INTEGER, host TEXT,"
    " pid INTEGER, command TEXT, python_version TEXT, python_build TEXT, profiler_version TEXT,"
    " commit_id TEXT, label TEXT, samples INTEGER DEFAULT 0, missed INTEGER DEFAULT 0,"
    " invalid INTEGER DEFAULT 0, profiler_cpu_ns INTEGER DEFAULT 0, status TEXT NOT NULL,"
    " expires_at_ns INTEGER DEFAULT 0, parent_id INTEGER DEFAULT 0, redacted INTEGER DEFAULT 0,"
    " created_ns INTEGER NOT NULL, extra_json TEXT);"
    "CREATE INDEX sessions_label ON sessions(label);"
    "CREATE TABLE strings(id INTEGER PRIMARY KEY, s TEXT NOT NULL UNIQUE);"
    "CREATE TABLE functions(id INTEGER PRIMARY KEY, file_id INTEGER NOT NULL,"
    " qualname_id INTEGER NOT NULL, firstlineno INTEGER NOT NULL,"
    " UNIQUE(file_id, qualname_id, firstlineno));"
    "CREATE TABLE frames(id INTEGER PRIMARY KEY, function_id INTEGER NOT NULL, line INTEGER NOT NULL,"
    " UNIQUE(function_id, line));"
    "CREATE TABLE stacks(id INTEGER PRIMARY KEY, parent_id INTEGER NOT NULL, frame_id INTEGER NOT NULL,"
    " UNIQUE(parent_id, frame_id));"
    "CREATE TABLE threads(id INTEGER PRIMARY KEY, session_id INTEGER NOT NULL,"
    " native_tid INTEGER NOT NULL, name TEXT, UNIQUE(session_id, native_tid));"
    /* Samples: one row per chunk of up to CHUNK_RECORDS records of one thread,
     * varint-encoded (see encode_chunk). */
    "CREATE TABLE sample_chunks(id INTEGER PRIMARY KEY, session_id INTEGER NOT NULL,"
    " thread_id INTEGER NOT NULL, first_ts_ns INTEGER NOT NULL, last_ts_ns INTEGER NOT NULL,"
    " n_records INTEGER NOT NULL, n_samples INTEGER NOT NULL, data BLOB NOT NULL);"
    "CREATE INDEX sample_chunks_session ON sample_chunks(session_id, thread_id, first_ts_ns);"
    "CREATE TABLE trace_functions(session_id INTEGER NOT NULL, function_id INTEGER NOT NULL,"
    " calls INTEGER, primitive_calls INTEGER, resumes INTEGER, self_ns INTEGER, total_ns INTEGER,"
    " p50_ns INTEGER, p90_ns INTEGER, p99_ns INTEGER, max_ns INTEGER, records_kept INTEGER,"
    " records_dropped INTEGER, PRIMARY KEY(session_id, function_id)) WITHOUT ROWID;"
    "CREATE TABLE trace_edges(session_id INTEGER NOT NULL, caller_id INTEGER NOT NULL,"
    " callee_id INTEGER NOT NULL, calls INTEGER, primitive_calls INTEGER, self_ns INTEGER,"
    " total_ns INTEGER, PRIMARY KEY(session_id, caller_id, callee_id)) WITHOUT ROWID;"
    "CREATE TABLE call_records(id INTEGER PRIMARY KEY, session_id INTEGER NOT NULL,"
    " function_id INTEGER NOT NULL, thread_id INTEGER, start_ns INTEGER, duration_ns INTEGER,"
    " depth INTEGER, parent_function_id INTEGER);"
    "CREATE INDEX call_records_session ON call_records(session_id, function_id);"
    "CREATE TABLE audit(id INTEGER PRIMARY KEY, time_ns INTEGER NOT NULL, user TEXT, uid INTEGER,"
    " target_pid INTEGER, target_uid INTEGER, command TEXT, argv TEXT, outcome TEXT,"
    " session_id INTEGER);"
    "CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT);";

/* record --push (core/spool.h): one row per window of a session that was
 * pushed or waits to be, with its encoded request while it waits (payload
 * NULL once sent or dropped). target is the destination as messages show it
 * (no user information); url_suffix what follows it in the request (the
 * Pyroscope query); neither ever holds a credential. */
static const char schema_push30[] =
    "CREATE TABLE push_spool(id INTEGER PRIMARY KEY, session_id INTEGER NOT NULL, seq INTEGER NOT NULL,"
    " window_start_ns INTEGER NOT NULL, window_end_ns INTEGER NOT NULL, target TEXT NOT NULL,"
    " url_suffix TEXT NOT NULL, content_type TEXT NOT NULL, state TEXT NOT NULL, attempts INTEGER NOT NULL,"
    " next_try_ns INTEGER NOT NULL, last_status INTEGER NOT NULL, bytes INTEGER NOT NULL,"
    " created_ns INTEGER NOT NULL, sent_ns INTEGER NOT NULL, payload BLOB,"
    " UNIQUE(session_id, target, seq));"
    "CREATE INDEX push_spool_state ON push_spool(state, target, id);";

/* v3 (record --memory): memory changes charged to stacks, and the process's
 * memory over time (core/store/memory.c). */
static const char schema_memfar[] =
    "CREATE TABLE memory_samples(session_id INTEGER NOT NULL, thread_id INTEGER NOT NULL,"
    " stack_id INTEGER NOT NULL, ts_ns INTEGER NOT NULL, rss_delta INTEGER NOT NULL,"
    " anon_delta INTEGER NOT NULL, py_delta INTEGER NOT NULL);"
    "CREATE INDEX memory_samples_session ON memory_samples(session_id, ts_ns);"
    "CREATE TABLE memory_timeline(session_id INTEGER NOT NULL, ts_ns INTEGER NOT NULL,"
    " rss_bytes INTEGER NOT NULL, anon_bytes INTEGER NOT NULL, py_bytes INTEGER NOT NULL);"
    "CREATE INDEX memory_timeline_session ON memory_timeline(session_id, ts_ns);";

/* v4, trace --memory (memnear29): exact allocations per function and edge, and
 * the largest blocks live at the end (core/trace_memory.h). IF NOT EXISTS: a
 * file whose version was set back by hand (tests do) migrates again. */
static const char schema_memnear29[] =
    "CREATE TABLE IF NOT EXISTS trace_memory(session_id INTEGER NOT NULL, function_id INTEGER NOT NULL,"
    " allocs INTEGER, alloc_bytes INTEGER, frees INTEGER, freed_bytes INTEGER, live_count INTEGER,"
    " live_bytes INTEGER, PRIMARY KEY(session_id, function_id)) WITHOUT ROWID;"
    "CREATE TABLE IF NOT EXISTS trace_memory_edges(session_id INTEGER NOT NULL, caller_id INTEGER NOT NULL,"
    " callee_id INTEGER NOT NULL, allocs INTEGER, alloc_bytes INTEGER, frees INTEGER,"
    " freed_bytes INTEGER, live_count INTEGER, live_bytes INTEGER,"
    " PRIMARY KEY(session_id, caller_id, callee_id)) WITHOUT ROWID;"
    "CREATE TABLE IF NOT EXISTS trace_memory_top(session_id INTEGER NOT NULL, rank INTEGER NOT NULL,"
    " size_bytes INTEGER NOT NULL, function_id INTEGER NOT NULL, stack TEXT NOT NULL,"
    " PRIMARY KEY(session_id, rank)) WITHOUT ROWID;";

/* v5, the kernel lens (record --kernel): no new table, but sample chunks may
 * set control bits 5-6 (chunk.c), which a v4 build would read as a corrupt
 * chunk; the version makes it say "newer than this bifocal; upgrade". */
static const char schema_kernel27[] = "SELECT 1;";

/* Migrations: migrations[v] upgrades from user_version v to v+1. */
static const char *const migrations[] = {schema_v1, schema_push30, schema_memfar, schema_memnear29,
                                         schema_kernel27};
#define N_MIGRATIONS ((int)(sizeof migrations / sizeof migrations[0]))

static int pragma_int(bf_store *s, const char *sql, int64_t *out) {
  sqlite3_stmt *st = NULL;
  if (sqlite3_prepare_v2(s->db, sql, -1, &st, NULL) != SQLITE_OK) return bfs_fail_sql(s, "read header");
  int rc = sqlite3_step(st);
  if (rc == SQLITE_ROW) {
    *out = sqlite3_column_int64(st, 0);
    rc = 0;
  } else {
    rc = bfs_fail_sql(s, "read header");
  }
  sqlite3_finalize(st);
  return rc;
}

int bfs_check_and_migrate(bf_store *s) {
  int64_t appid = 0, ver = 0, ntables = 0;
  int rc;
  if ((rc = pragma_int(s, "PRAGMA application_id", &appid))) return rc;
  if ((rc = pragma_int(s, "PRAGMA user_version", &ver))) return rc;
  if ((rc = pragma_int(s, "SELECT count(*) FROM sqlite_master", &ntables))) return rc;
  if (appid != BF_APP_ID) {
    if (appid != 0 || ntables != 0 || ver != 0)
      return bf_store_fail(s, -EINVAL,
                           "'%s' is a SQLite database but not a bifocal one",
                           s->path);
    if (s->readonly)
      return bf_store_fail(s, -EINVAL, "'%s' is an empty database, not a bifocal one", s->path);
  }
  /* version 0 means "no tables yet": with tables (or below 0) it was changed
   * by hand, and migrating would fail half-way */
  if (ver < 0 || (ver == 0 && ntables > 0))
    return bf_store_fail(s, -EINVAL,
                         "'%s' has schema version %lld but holds bifocal tables (the version was changed "
                         "outside bifocal); if it is intact, restore it with: sqlite3 '%s' 'PRAGMA "
                         "user_version=%d'",
                         s->path, (long long)ver, s->path, BF_STORE_SCHEMA_VERSION);
  if (ver > BF_STORE_SCHEMA_VERSION)
    return bf_store_fail(s, -EPROTO,
                         "'%s' has schema version %lld, newer than this bifocal (%d); upgrade bifocal",
                         s->path, (long long)ver, BF_STORE_SCHEMA_VERSION);
  if (ver == BF_STORE_SCHEMA_VERSION) return bfs_check_schema(s);
  /* A reader of an older file migrates it when its connection may write (the
   * migrations only add tables): else every read after an upgrade would fail
   * until something wrote. A file it may not write, or an image, is refused. */
  const char *fname = sqlite3_db_filename(s->db, "main");
  if (s->readonly && (sqlite3_db_readonly(s->db, "main") != 0 || !fname || !*fname))
    return bf_store_fail(s, -EPROTO,
                         "'%s' has old schema %lld; open it writable once to migrate (e.g. bifocal --db '%s' gc)",
                         s->path, (long long)ver, s->path);
  if ((rc = bfs_exec(s, "BEGIN IMMEDIATE"))) return rc;
  /* another process may have migrated while we waited for the write lock */
  if ((rc = pragma_int(s, "PRAGMA user_version", &ver))) {
    bfs_exec(s, "ROLLBACK");
    return rc;
  }
  if (ver == BF_STORE_SCHEMA_VERSION) return (rc = bfs_exec(s, "COMMIT")) ? rc : bfs_check_schema(s);
  for (int v = (int)ver; v < N_MIGRATIONS; v++) {
    if ((rc = bfs_exec(s, migrations[v]))) {
      bfs_exec(s, "ROLLBACK");
      return rc;
    }
  }
  char sql[128];
  snprintf(sql, sizeof sql, "PRAGMA application_id=%d; PRAGMA user_version=%d", BF_APP_ID,
           BF_STORE_SCHEMA_VERSION);
  if ((rc = bfs_exec(s, sql))) {
    bfs_exec(s, "ROLLBACK");
    return rc;
  }
  return (rc = bfs_exec(s, "COMMIT")) ? rc : bfs_check_schema(s);
}

/* The tables that hold rows of one session, by session_id (delete and gc). */
const char *const bfs_session_tables[] = {"sample_chunks", "threads", "trace_functions", "trace_edges",
                                          "call_records", "push_spool", "memory_samples", "memory_timeline",
                                          "trace_memory", "trace_memory_edges", "trace_memory_top"};
const size_t bfs_n_session_tables = sizeof bfs_session_tables / sizeof bfs_session_tables[0];
