/* handle.c — the store handle: open (file, memory, image), close, errors,
 * cached statements and transactions.
 *
 * Writes happen inside one open transaction that is committed every few
 * chunks (and on flush/close), so a crash loses at most the last batch and the
 * database stays consistent (WAL).
 */
#include <fcntl.h>
#include <stdarg.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "store_impl.h"

const char *const bfs_stmt_sql[ST__N] = {
    [ST_STR_FIND] = "SELECT id FROM strings WHERE s=?1",
    [ST_STR_INS] = "INSERT INTO strings(s) VALUES(?1)",
    [ST_FN_FIND] = "SELECT id FROM functions WHERE file_id=?1 AND qualname_id=?2 AND firstlineno=?3",
    [ST_FN_INS] = "INSERT INTO functions(file_id,qualname_id,firstlineno) VALUES(?1,?2,?3)",
    [ST_FR_FIND] = "SELECT id FROM frames WHERE function_id=?1 AND line=?2",
    [ST_FR_INS] = "INSERT INTO frames(function_id,line) VALUES(?1,?2)",
    [ST_STK_FIND] = "SELECT id FROM stacks WHERE parent_id=?1 AND frame_id=?2",
    [ST_STK_INS] = "INSERT INTO stacks(parent_id,frame_id) VALUES(?1,?2)",
    [ST_TH_FIND] = "SELECT id, name FROM threads WHERE session_id=?1 AND native_tid=?2",
    [ST_TH_INS] = "INSERT INTO threads(session_id,native_tid,name) VALUES(?1,?2,?3)",
    [ST_TH_NAME] = "UPDATE threads SET name=?2 WHERE id=?1",
    [ST_CHUNK_INS] = "INSERT INTO sample_chunks(session_id,thread_id,first_ts_ns,last_ts_ns,"
                     "n_records,n_samples,data) VALUES(?1,?2,?3,?4,?5,?6,?7)",
    [ST_TF_PUT] = "INSERT OR REPLACE INTO trace_functions(session_id,function_id,calls,"
                  "primitive_calls,resumes,self_ns,total_ns,p50_ns,p90_ns,p99_ns,max_ns,"
                  "records_kept,records_dropped) VALUES(?1,?2,?3,?4,?5,?6,?7,?8,?9,?10,?11,?12,?13)",
    [ST_TE_PUT] = "INSERT OR REPLACE INTO trace_edges(session_id,caller_id,callee_id,calls,"
                  "primitive_calls,self_ns,total_ns) VALUES(?1,?2,?3,?4,?5,?6,?7)",
    [ST_CR_INS] = "INSERT INTO call_records(session_id,function_id,thread_id,start_ns,"
                  "duration_ns,depth,parent_function_id) VALUES(?1,?2,?3,?4,?5,?6,?7)",
};

void bfs_bind_text(sqlite3_stmt *st, int i, const char *v) {
  if (v)
    sqlite3_bind_text(st, i, v, -1, SQLITE_TRANSIENT);
  else
    sqlite3_bind_null(st, i);
}

int bf_store_fail(bf_store *s, int rc, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(s->err, sizeof s->err, fmt, ap);
  va_end(ap);
  return rc;
}

int bfs_fail_sql(bf_store *s, const char *what) {
  int code = sqlite3_errcode(s->db);
  if (code == SQLITE_INTERRUPT) return bfs_fail_interrupt(s, what);
  if (code == SQLITE_FULL)
    return bf_store_fail(s, -ENOSPC, "database '%s': %s: the disk is full; free some space",
                         s->path, strncmp(what, "BEGIN", 5) == 0 ? "write" : what);
  if (code == SQLITE_BUSY || code == SQLITE_LOCKED)
    return bf_store_fail(s, -EBUSY,
                         "database '%s' is locked by another process (waited %d ms to %s); try again when "
                         "that process is done",
                         s->path, s->busy_ms, strncmp(what, "BEGIN", 5) == 0 ? "write" : what);
  int rc = (code == SQLITE_FULL) ? -ENOSPC : (code == SQLITE_READONLY || code == SQLITE_PERM) ? -EACCES
           : (code == SQLITE_BUSY || code == SQLITE_LOCKED) ? -EBUSY : (code == SQLITE_CORRUPT || code == SQLITE_NOTADB) ? -EINVAL : -EIO;
  return bf_store_fail(s, rc, "database '%s': %s: %s", s->path, what, sqlite3_errmsg(s->db));
}

const char *bf_store_errmsg(const bf_store *s) { return s ? s->err : "no database handle"; }
const char *bf_store_path(const bf_store *s) { return s->path; }

sqlite3_stmt *bfs_stmt(bf_store *s, int which) {
  if (!s->st[which]) {
    if (sqlite3_prepare_v3(s->db, bfs_stmt_sql[which], -1, SQLITE_PREPARE_PERSISTENT, &s->st[which], NULL) !=
        SQLITE_OK) {
      bfs_fail_sql(s, "prepare");
      return NULL;
    }
  }
  sqlite3_reset(s->st[which]);
  sqlite3_clear_bindings(s->st[which]);
  return s->st[which];
}

int bfs_exec(bf_store *s, const char *sql) {
  char *msg = NULL;
  if (sqlite3_exec(s->db, sql, NULL, NULL, &msg) != SQLITE_OK) {
    /* name the statement, not the error twice (fail_sql adds the error) */
    char what[40];
    snprintf(what, sizeof what, "%.*s", (int)strcspn(sql, "(;"), sql);
    int rc = bfs_fail_sql(s, what);
    sqlite3_free(msg);
    return rc;
  }
  return 0;
}

/* Check the file before SQLite sees it: a directory, a missing file (created
 * mode 0600 when allowed), or something not SQLite. 0 or a negative errno
 * with err set. */
static int check_path(const char *path, int flags, int readonly, bf_err *err) {
  struct stat stbuf;
  int exists = stat(path, &stbuf) == 0;
  if (exists && S_ISDIR(stbuf.st_mode)) {
    bf_err_set(err, -EISDIR, "'%s' is a directory, not a database file", path);
    return -EISDIR;
  }
  if (!exists) {
    if (readonly || !(flags & BF_STORE_CREATE)) {
      bf_err_set(err, -ENOENT, "database '%s' does not exist yet", path);
      return -ENOENT;
    }
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0 && errno != EEXIST) {
      int e = errno;
      bf_err_set(err, -e, "cannot create database '%s': %s", path, strerror(e));
      return -e;
    }
    if (fd >= 0) close(fd);
  } else if (stbuf.st_size > 0) {
    /* Refuse non-SQLite files before SQLite sees them: nothing gets written. */
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      int e = errno;
      bf_err_set(err, -e, "cannot open database '%s': %s", path, strerror(e));
      return -e;
    }
    char hdr[16] = {0};
    ssize_t n = read(fd, hdr, sizeof hdr);
    close(fd);
    if (n != 16 || memcmp(hdr, "SQLite format 3\0", 16) != 0) {
      bf_err_set(err, -EINVAL, "'%s' is not a SQLite database (not a bifocal file)", path);
      return -EINVAL;
    }
  } else if (readonly) {
    bf_err_set(err, -ENOENT, "database '%s' is empty (record or import something first)", path);
    return -ENOENT;
  }

  return 0;
}

int bf_store_open(const char *path, int flags, bf_store **out, bf_err *err) {
  *out = NULL;
  bf_err_clear(err);
  if (!path || !*path) {
    bf_err_set(err, -EINVAL, "no database path given");
    return -EINVAL;
  }
  int readonly = (flags & BF_STORE_READONLY) != 0;
  int rc = check_path(path, flags, readonly, err);
  if (rc) return rc;

  /* SQLite keeps -wal/-shm files beside the database: its directory must be
   * writable for any writer, and for a reader when they do not exist yet */
  char dir[4096];
  const char *slash = strrchr(path, '/');
  snprintf(dir, sizeof dir, "%.*s", slash ? (int)(slash - path) + (slash == path) : 1, slash ? path : ".");
  int dir_w = access(dir, W_OK) == 0, dir_errno = errno;
  char side[4200];
  snprintf(side, sizeof side, "%s-wal", path);
  int wal_exists = access(side, F_OK) == 0;
  if (!dir_w && !readonly) {
    bf_err_set(err, -dir_errno,
             "cannot write database '%.150s': its directory '%.150s' is not writable (%s) and SQLite keeps "
             "its '-wal' journal there; move the database to a writable directory",
             path, dir, strerror(dir_errno));
    return -dir_errno;
  }
  bf_store *s = calloc(1, sizeof *s);
  if (!s) return bf_err_set(err, -ENOMEM, "out of memory");
  s->path = strdup(path);
  s->readonly = readonly;
  /* A reader opens read-write when it may (bifocal never writes through it):
   * then closing it removes the -wal/-shm it made, as a writer's close does.
   * A reader that may not write reads a fully checkpointed file (no -wal) as
   * immutable, so nothing needs creating beside it. */
  int oflags = SQLITE_OPEN_READWRITE;
  char *uri = NULL;
  if (readonly && (!dir_w || access(path, W_OK) != 0)) {
    oflags = SQLITE_OPEN_READONLY;
    if (!wal_exists) {
      size_t n = strlen(path);
      uri = malloc(n * 3 + 32);
      if (uri) {
        char *u = stpcpy(uri, "file:");
        for (const char *c = path; *c; c++) {
          if (*c == '%' || *c == '?' || *c == '#') u += sprintf(u, "%%%02X", (unsigned char)*c);
          else *u++ = *c;
        }
        strcpy(u, "?immutable=1");
        oflags |= SQLITE_OPEN_URI;
      }
    }
  }
  int orc = sqlite3_open_v2(uri ? uri : path, &s->db, oflags | SQLITE_OPEN_NOMUTEX, NULL);
  free(uri);
  if (orc != SQLITE_OK) {
    rc = -EIO;
    bf_err_set(err, rc, "cannot open database '%s': %s", path,
             s->db ? sqlite3_errmsg(s->db) : "out of memory");
    goto fail;
  }
  s->busy_ms = 5000;
  sqlite3_busy_timeout(s->db, s->busy_ms);
  sqlite3_extended_result_codes(s->db, 0);
  rc = bfs_harden(s);
  if (!rc) rc = bfs_check_and_migrate(s);
  if (rc) {
    bf_err_set(err, rc, "%s", s->err);
    goto fail;
  }
  if (!readonly) {
    if ((rc = bfs_exec(s, "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL; PRAGMA foreign_keys=OFF"))) {
      bf_err_set(err, rc, "%s", s->err);
      goto fail;
    }
  }
  *out = s;
  return 0;
fail:
  bf_store_close(s);
  return rc;
}

/* A handle on a new in-memory database; NULL when out of memory. s->db is
 * NULL when SQLite could not open one (s->err then says why; the caller
 * closes s). */
static bf_store *memory_handle(const char *name, int readonly) {
  bf_store *s = calloc(1, sizeof *s);
  if (!s) return NULL;
  s->path = strdup(name);
  s->readonly = readonly;
  if (sqlite3_open_v2(":memory:", &s->db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX, NULL) != SQLITE_OK) {
    snprintf(s->err, sizeof s->err, "%s", s->db ? sqlite3_errmsg(s->db) : "out of memory");
    sqlite3_close(s->db);
    s->db = NULL;
  }
  return s;
}

/* The common end of opening a memory database or an image: check and
 * migrate, then hand the handle out (or close it). */
static int finish_open(bf_store *s, bf_store **out, bf_err *err) {
  sqlite3_extended_result_codes(s->db, 0);
  int rc = bfs_harden(s);
  if (!rc) rc = bfs_check_and_migrate(s);
  if (rc) {
    bf_err_set(err, rc, "%s", s->err);
    bf_store_close(s);
    return rc;
  }
  *out = s;
  return 0;
}

int bf_store_open_memory(bf_store **out, bf_err *err) {
  *out = NULL;
  bf_err_clear(err);
  bf_store *s = memory_handle("(memory)", 0);
  if (!s) return bf_err_set(err, -ENOMEM, "out of memory");
  int rc;
  if (!s->db) {
    rc = -ENOMEM;
    bf_err_set(err, rc, "cannot open a database in memory: %.400s", s->err);
    goto fail;
  }
  return finish_open(s, out, err);
fail:
  bf_store_close(s);
  return rc;
}

int bf_store_open_image(unsigned char *image, size_t len, const char *name, bf_store **out,
                        bf_err *err) {
  *out = NULL;
  bf_err_clear(err);
  if (len < 100 || memcmp(image, "SQLite format 3\0", 16) != 0) {
    sqlite3_free(image);
    bf_err_set(err, -EINVAL, "'%s' is not a SQLite database (not a bifocal file)", name);
    return -EINVAL;
  }
  image[18] = image[19] = 1; /* a WAL-mode header cannot be read from memory; nothing is pending */
  bf_store *s = memory_handle(name, 1);
  if (!s) {
    sqlite3_free(image);
    return bf_err_set(err, -ENOMEM, "out of memory");
  }
  int rc;
  if (!s->db ||
      sqlite3_deserialize(s->db, "main", image, (sqlite3_int64)len, (sqlite3_int64)len,
                          SQLITE_DESERIALIZE_FREEONCLOSE | SQLITE_DESERIALIZE_READONLY) != SQLITE_OK) {
    if (!s->db) sqlite3_free(image);
    rc = -EIO;
    bf_err_set(err, rc, "cannot open '%s': %.400s", name,
             s->db ? sqlite3_errmsg(s->db) : s->err);
    goto fail;
  }
  return finish_open(s, out, err);
fail:
  bf_store_close(s);
  return rc;
}

void bf_store_close(bf_store *s) {
  if (!s) return;
  if (s->db && !s->readonly) {
    bf_store_flush(s);
    if (s->txn_open) bfs_exec(s, "COMMIT");
  }
  for (int i = 0; i < ST__N; i++) sqlite3_finalize(s->st[i]);
  if (s->db) sqlite3_close_v2(s->db);
  bfs_drop_caches(s);
  bfs_bufs_free(s);
  for (size_t i = 0; i < s->kleaf_n; i++) free(s->kleaf_names[i]);
  free(s->kleaf_names);
  bf_map3_free(&s->kleaf_map);
  free(s->enc);
  free(s->path);
  free(s);
}

/* ---- transactions -------------------------------------------------------------- */

int bfs_ensure_txn(bf_store *s) {
  if (s->readonly) return bf_store_fail(s, -EACCES, "database '%s' is open read-only", s->path);
  if (s->txn_open) return 0;
  int rc = bfs_exec(s, "BEGIN IMMEDIATE");
  if (rc == 0) {
    s->txn_open = 1;
    s->txn_started_ns = bf_mono_ns();
  }
  return rc;
}

int bf_store_begin(bf_store *s) {
  int rc = bfs_ensure_txn(s);
  if (rc) return rc;
  s->txn_depth++;
  return 0;
}

int bf_store_commit(bf_store *s) {
  if (s->txn_depth > 0) s->txn_depth--;
  if (s->txn_depth > 0) return 0;
  int rc = bf_store_flush(s);
  if (rc) return rc;
  if (s->txn_open) {
    rc = bfs_exec(s, "COMMIT");
    if (rc == 0) s->txn_open = 0;
  }
  return rc;
}

int bf_store_rollback(bf_store *s) {
  s->txn_depth = 0;
  for (size_t i = 0; i < s->nbufs; i++) s->bufs[i].n = 0;
  int rc = 0;
  if (s->txn_open) {
    rc = bfs_exec(s, "ROLLBACK");
    s->txn_open = 0;
  }
  bfs_drop_caches(s);
  return rc;
}

int bfs_own_begin(bf_store *s, int *was_open) {
  *was_open = s->txn_open;
  return *was_open ? 0 : bfs_exec(s, "BEGIN IMMEDIATE");
}

int bfs_own_end(bf_store *s, int was_open, int rc) {
  if (was_open) return rc;
  if (rc) {
    bfs_exec(s, "ROLLBACK");
    return rc;
  }
  return bfs_exec(s, "COMMIT");
}
