/* store.c — the SQLite store: schema and migrations, interning with in-memory
 * caches, batched compact sample chunks, traced data, call records, audit.
 *
 * Writes happen inside one open transaction that is committed every few
 * chunks (and on flush/close), so a crash loses at most the last batch and the
 * database stays consistent (WAL).
 */
#include <errno.h>
#include <fcntl.h>
#include <sqlite3.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "store.h"
#include "store_int.h"

#define BF_APP_ID 0x42466f63 /* 'BFoc' */
#define CHUNK_RECORDS 8192
#define COMMIT_SAMPLES 200000

/* ---- small utilities ------------------------------------------------------ */

struct bf_map3_slot {
  int64_t a, b, c, v;
  int used;
};

uint64_t bf_hash_str(const char *s, size_t n) {
  uint64_t h = 1469598103934665603ULL;
  for (size_t i = 0; i < n; i++) {
    h ^= (unsigned char)s[i];
    h *= 1099511628211ULL;
  }
  return h;
}

uint64_t bf_hash3(int64_t a, int64_t b, int64_t c) {
  uint64_t h = (uint64_t)a * 0x9E3779B97F4A7C15ULL;
  h ^= (uint64_t)b + 0x7F4A7C159E3779B9ULL + (h << 6) + (h >> 2);
  h ^= (uint64_t)c * 0xC2B2AE3D27D4EB4FULL + (h << 6) + (h >> 2);
  h ^= h >> 31;
  h *= 0xBF58476D1CE4E5B9ULL;
  h ^= h >> 29;
  return h;
}

void bf_map3_free(bf_map3 *m) {
  free(m->slots);
  m->slots = NULL;
  m->cap = m->len = 0;
}

int64_t *bf_map3_get(const bf_map3 *m, int64_t a, int64_t b, int64_t c) {
  if (!m->cap) return NULL;
  size_t mask = m->cap - 1, i = bf_hash3(a, b, c) & mask;
  for (;;) {
    struct bf_map3_slot *s = &m->slots[i];
    if (!s->used) return NULL;
    if (s->a == a && s->b == b && s->c == c) return &s->v;
    i = (i + 1) & mask;
  }
}

static int map3_grow(bf_map3 *m) {
  size_t ncap = m->cap ? m->cap * 2 : 1024;
  struct bf_map3_slot *ns = calloc(ncap, sizeof *ns);
  if (!ns) return -ENOMEM;
  for (size_t j = 0; j < m->cap; j++) {
    struct bf_map3_slot *o = &m->slots[j];
    if (!o->used) continue;
    size_t i = bf_hash3(o->a, o->b, o->c) & (ncap - 1);
    while (ns[i].used) i = (i + 1) & (ncap - 1);
    ns[i] = *o;
  }
  free(m->slots);
  m->slots = ns;
  m->cap = ncap;
  return 0;
}

int bf_map3_put(bf_map3 *m, int64_t a, int64_t b, int64_t c, int64_t v) {
  if ((m->len + 1) * 4 >= m->cap * 3) {
    int rc = map3_grow(m);
    if (rc) return rc;
  }
  size_t mask = m->cap - 1, i = bf_hash3(a, b, c) & mask;
  for (;;) {
    struct bf_map3_slot *s = &m->slots[i];
    if (!s->used) {
      s->used = 1;
      s->a = a;
      s->b = b;
      s->c = c;
      s->v = v;
      m->len++;
      return 0;
    }
    if (s->a == a && s->b == b && s->c == c) {
      s->v = v;
      return 0;
    }
    i = (i + 1) & mask;
  }
}

size_t bf_varint_put(uint8_t *buf, uint64_t v) {
  size_t n = 0;
  while (v >= 0x80) {
    buf[n++] = (uint8_t)(v | 0x80);
    v >>= 7;
  }
  buf[n++] = (uint8_t)v;
  return n;
}

size_t bf_varint_get(const uint8_t *buf, size_t len, uint64_t *v) {
  uint64_t r = 0;
  for (size_t i = 0; i < len && i < 10; i++) {
    r |= (uint64_t)(buf[i] & 0x7f) << (7 * i);
    if (!(buf[i] & 0x80)) {
      *v = r;
      return i + 1;
    }
  }
  return 0;
}

static int64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* ---- the handle ------------------------------------------------------------ */

/* String interning: hash of content → id, content kept for reverse lookup. */
typedef struct str_slot {
  uint64_t hash;
  int64_t id;
  char *s;
} str_slot;

typedef struct thread_buf {
  int64_t session_id, thread_id;
  bf_sample *recs;
  size_t n, cap;
  int idle_flushes; /* flushes since its last sample: freed after two (a thread that is gone) */
} thread_buf;

/* Reverse caches indexed by rowid (dense from 1). */
typedef struct fn_row {
  int64_t file_id, qual_id, firstlineno;
  int loaded;
} fn_row;
typedef struct pair_row {
  int64_t a, b;
  int loaded;
} pair_row;

enum {
  ST_STR_FIND, ST_STR_INS,
  ST_FN_FIND, ST_FN_INS,
  ST_FR_FIND, ST_FR_INS,
  ST_STK_FIND, ST_STK_INS,
  ST_TH_FIND, ST_TH_INS, ST_TH_NAME,
  ST_CHUNK_INS,
  ST_TF_PUT, ST_TE_PUT, ST_CR_INS,
  ST__N
};

static const char *const stmt_sql[ST__N] = {
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

struct bf_store {
  sqlite3 *db;
  char *path;
  int readonly;
  char err[512];
  sqlite3_stmt *st[ST__N];
  int txn_depth; /* explicit bf_store_begin nesting */
  int busy_ms;   /* busy timeout */
  int txn_open;  /* a transaction is open (explicit or implicit) */
  int64_t uncommitted_samples;
  int64_t txn_started_ns, last_flush_ns; /* monotonic */
  unsigned add_counter;
  /* interning caches */
  str_slot *strs;
  size_t strs_cap, strs_len;
  bf_map3 fn_map, fr_map, stk_map, th_map;
  /* reverse caches */
  char **str_by_id;
  size_t str_by_id_cap;
  fn_row *fn_by_id;
  size_t fn_by_id_cap;
  pair_row *fr_by_id, *stk_by_id;
  int64_t str_max, fn_max, fr_max, stk_max; /* highest id loaded into each reverse cache */
  size_t fr_by_id_cap, stk_by_id_cap;
  /* sample buffers, one per (session, thread) */
  thread_buf *bufs;
  size_t nbufs, bufs_cap;
  size_t last_buf;
  uint8_t *enc;
  size_t enc_cap;
};

static __thread char open_err[512];

int bf_store_fail(bf_store *s, int rc, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(s->err, sizeof s->err, fmt, ap);
  va_end(ap);
  return rc;
}

static int fail_sql(bf_store *s, const char *what) {
  int code = sqlite3_errcode(s->db);
  if (code == SQLITE_FULL)
    return bf_store_fail(s, -ENOSPC, "database '%s': %s: the disk is full; free some space (or use another -d)",
                         s->path, strncmp(what, "BEGIN", 5) == 0 ? "write" : what);
  if (code == SQLITE_BUSY || code == SQLITE_LOCKED)
    return bf_store_fail(s, -EBUSY,
                         "database '%s' is locked by another process (waited %d ms to %s); try again when "
                         "that process is done, or use another -d",
                         s->path, s->busy_ms, strncmp(what, "BEGIN", 5) == 0 ? "write" : what);
  int rc = (code == SQLITE_FULL) ? -ENOSPC : (code == SQLITE_READONLY || code == SQLITE_PERM) ? -EACCES
           : (code == SQLITE_BUSY || code == SQLITE_LOCKED) ? -EBUSY : (code == SQLITE_CORRUPT || code == SQLITE_NOTADB) ? -EINVAL : -EIO;
  return bf_store_fail(s, rc, "database '%s': %s: %s", s->path, what, sqlite3_errmsg(s->db));
}

const char *bf_store_errmsg(const bf_store *s) { return s ? s->err : open_err; }
const char *bf_store_path(const bf_store *s) { return s->path; }
struct sqlite3 *bf_store_db(bf_store *s) { return s->db; }

static sqlite3_stmt *stmt(bf_store *s, int which) {
  if (!s->st[which]) {
    if (sqlite3_prepare_v3(s->db, stmt_sql[which], -1, SQLITE_PREPARE_PERSISTENT, &s->st[which], NULL) !=
        SQLITE_OK) {
      fail_sql(s, "prepare");
      return NULL;
    }
  }
  sqlite3_reset(s->st[which]);
  sqlite3_clear_bindings(s->st[which]);
  return s->st[which];
}

static int exec(bf_store *s, const char *sql) {
  char *msg = NULL;
  if (sqlite3_exec(s->db, sql, NULL, NULL, &msg) != SQLITE_OK) {
    /* name the statement, not the error twice (fail_sql adds the error) */
    char what[40];
    snprintf(what, sizeof what, "%.*s", (int)strcspn(sql, "(;"), sql);
    int rc = fail_sql(s, what);
    sqlite3_free(msg);
    return rc;
  }
  return 0;
}

/* ---- schema ------------------------------------------------------------------ */

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

/* Migrations: migrations[v] upgrades from user_version v to v+1. */
static const char *const migrations[] = {schema_v1};
#define N_MIGRATIONS ((int)(sizeof migrations / sizeof migrations[0]))

static int pragma_int(bf_store *s, const char *sql, int64_t *out) {
  sqlite3_stmt *st = NULL;
  if (sqlite3_prepare_v2(s->db, sql, -1, &st, NULL) != SQLITE_OK) return fail_sql(s, "read header");
  int rc = sqlite3_step(st);
  if (rc == SQLITE_ROW) {
    *out = sqlite3_column_int64(st, 0);
    rc = 0;
  } else {
    rc = fail_sql(s, "read header");
  }
  sqlite3_finalize(st);
  return rc;
}

static int check_and_migrate(bf_store *s) {
  int64_t appid = 0, ver = 0, ntables = 0;
  int rc;
  if ((rc = pragma_int(s, "PRAGMA application_id", &appid))) return rc;
  if ((rc = pragma_int(s, "PRAGMA user_version", &ver))) return rc;
  if ((rc = pragma_int(s, "SELECT count(*) FROM sqlite_master", &ntables))) return rc;
  if (appid != BF_APP_ID) {
    if (appid != 0 || ntables != 0 || ver != 0)
      return bf_store_fail(s, -EINVAL,
                           "'%s' is a SQLite database but not a bifocal one; choose another file with --db",
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
  if (ver == BF_STORE_SCHEMA_VERSION) return 0;
  if (s->readonly)
    return bf_store_fail(s, -EPROTO, "'%s' has old schema %lld; open it writable once to migrate", s->path,
                         (long long)ver);
  if ((rc = exec(s, "BEGIN IMMEDIATE"))) return rc;
  /* another process may have migrated while we waited for the write lock */
  if ((rc = pragma_int(s, "PRAGMA user_version", &ver))) {
    exec(s, "ROLLBACK");
    return rc;
  }
  if (ver == BF_STORE_SCHEMA_VERSION) return exec(s, "COMMIT");
  for (int v = (int)ver; v < N_MIGRATIONS; v++) {
    if ((rc = exec(s, migrations[v]))) {
      exec(s, "ROLLBACK");
      return rc;
    }
  }
  char sql[128];
  snprintf(sql, sizeof sql, "PRAGMA application_id=%d; PRAGMA user_version=%d", BF_APP_ID,
           BF_STORE_SCHEMA_VERSION);
  if ((rc = exec(s, sql))) {
    exec(s, "ROLLBACK");
    return rc;
  }
  return exec(s, "COMMIT");
}

int bf_store_open(const char *path, int flags, bf_store **out, const char **errmsg) {
  *out = NULL;
  if (errmsg) *errmsg = open_err;
  open_err[0] = 0;
  if (!path || !*path) {
    snprintf(open_err, sizeof open_err, "no database path given");
    return -EINVAL;
  }
  int readonly = (flags & BF_STORE_READONLY) != 0;
  struct stat stbuf;
  int exists = stat(path, &stbuf) == 0;
  if (exists && S_ISDIR(stbuf.st_mode)) {
    snprintf(open_err, sizeof open_err, "'%s' is a directory, not a database file", path);
    return -EISDIR;
  }
  if (!exists) {
    if (readonly || !(flags & BF_STORE_CREATE)) {
      snprintf(open_err, sizeof open_err, "database '%s' does not exist (record or import something first, or pass --db)", path);
      return -ENOENT;
    }
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0 && errno != EEXIST) {
      int e = errno;
      snprintf(open_err, sizeof open_err, "cannot create database '%s': %s", path, strerror(e));
      return -e;
    }
    if (fd >= 0) close(fd);
  } else if (stbuf.st_size > 0) {
    /* Refuse non-SQLite files before SQLite sees them: nothing gets written. */
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      int e = errno;
      snprintf(open_err, sizeof open_err, "cannot open database '%s': %s", path, strerror(e));
      return -e;
    }
    char hdr[16] = {0};
    ssize_t n = read(fd, hdr, sizeof hdr);
    close(fd);
    if (n != 16 || memcmp(hdr, "SQLite format 3\0", 16) != 0) {
      snprintf(open_err, sizeof open_err, "'%s' is not a SQLite database (not a bifocal file)", path);
      return -EINVAL;
    }
  } else if (readonly) {
    snprintf(open_err, sizeof open_err, "database '%s' is empty (record or import something first)", path);
    return -ENOENT;
  }

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
    snprintf(open_err, sizeof open_err,
             "cannot write database '%.150s': its directory '%.150s' is not writable (%s) and SQLite keeps "
             "its '-wal' journal there; move the database to a writable directory",
             path, dir, strerror(dir_errno));
    return -dir_errno;
  }
  bf_store *s = calloc(1, sizeof *s);
  if (!s) return -ENOMEM;
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
  int rc;
  int orc = sqlite3_open_v2(uri ? uri : path, &s->db, oflags | SQLITE_OPEN_NOMUTEX, NULL);
  free(uri);
  if (orc != SQLITE_OK) {
    rc = -EIO;
    snprintf(open_err, sizeof open_err, "cannot open database '%s': %s", path,
             s->db ? sqlite3_errmsg(s->db) : "out of memory");
    goto fail;
  }
  s->busy_ms = 5000;
  sqlite3_busy_timeout(s->db, s->busy_ms);
  sqlite3_extended_result_codes(s->db, 0);
  rc = check_and_migrate(s);
  if (rc) {
    snprintf(open_err, sizeof open_err, "%s", s->err);
    goto fail;
  }
  if (!readonly) {
    if ((rc = exec(s, "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL; PRAGMA foreign_keys=OFF"))) {
      snprintf(open_err, sizeof open_err, "%s", s->err);
      goto fail;
    }
  }
  *out = s;
  return 0;
fail:
  bf_store_close(s);
  return rc;
}

int bf_store_open_memory(bf_store **out, const char **errmsg) {
  *out = NULL;
  if (errmsg) *errmsg = open_err;
  open_err[0] = 0;
  bf_store *s = calloc(1, sizeof *s);
  if (!s) return -ENOMEM;
  s->path = strdup("(memory)");
  int rc;
  if (sqlite3_open_v2(":memory:", &s->db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX, NULL) != SQLITE_OK) {
    rc = -ENOMEM;
    snprintf(open_err, sizeof open_err, "cannot open a database in memory: %s",
             s->db ? sqlite3_errmsg(s->db) : "out of memory");
    goto fail;
  }
  sqlite3_extended_result_codes(s->db, 0);
  if ((rc = check_and_migrate(s))) {
    snprintf(open_err, sizeof open_err, "%s", s->err);
    goto fail;
  }
  *out = s;
  return 0;
fail:
  bf_store_close(s);
  return rc;
}

int bf_store_open_image(unsigned char *image, size_t len, const char *name, bf_store **out,
                        const char **errmsg) {
  *out = NULL;
  if (errmsg) *errmsg = open_err;
  open_err[0] = 0;
  if (len < 100 || memcmp(image, "SQLite format 3\0", 16) != 0) {
    sqlite3_free(image);
    snprintf(open_err, sizeof open_err, "'%s' is not a SQLite database (not a bifocal file)", name);
    return -EINVAL;
  }
  image[18] = image[19] = 1; /* a WAL-mode header cannot be read from memory; nothing is pending */
  bf_store *s = calloc(1, sizeof *s);
  if (!s) {
    sqlite3_free(image);
    return -ENOMEM;
  }
  s->path = strdup(name);
  s->readonly = 1;
  int rc;
  if (sqlite3_open_v2(":memory:", &s->db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX, NULL) != SQLITE_OK ||
      sqlite3_deserialize(s->db, "main", image, (sqlite3_int64)len, (sqlite3_int64)len,
                          SQLITE_DESERIALIZE_FREEONCLOSE | SQLITE_DESERIALIZE_READONLY) != SQLITE_OK) {
    if (!s->db) sqlite3_free(image);
    rc = -EIO;
    snprintf(open_err, sizeof open_err, "cannot open '%s': %s", name,
             s->db ? sqlite3_errmsg(s->db) : "out of memory");
    goto fail;
  }
  sqlite3_extended_result_codes(s->db, 0);
  if ((rc = check_and_migrate(s))) {
    snprintf(open_err, sizeof open_err, "%s", s->err);
    goto fail;
  }
  *out = s;
  return 0;
fail:
  bf_store_close(s);
  return rc;
}

static void bufs_free(bf_store *s) {
  for (size_t i = 0; i < s->nbufs; i++) free(s->bufs[i].recs);
  free(s->bufs);
  s->bufs = NULL;
  s->nbufs = s->bufs_cap = 0;
}

void bf_store_close(bf_store *s) {
  if (!s) return;
  if (s->db && !s->readonly) {
    bf_store_flush(s);
    if (s->txn_open) exec(s, "COMMIT");
  }
  for (int i = 0; i < ST__N; i++) sqlite3_finalize(s->st[i]);
  if (s->db) sqlite3_close_v2(s->db);
  for (size_t i = 0; i < s->strs_cap; i++) free(s->strs[i].s);
  free(s->strs);
  free(s->str_by_id);
  free(s->fn_by_id);
  free(s->fr_by_id);
  free(s->stk_by_id);
  bf_map3_free(&s->fn_map);
  bf_map3_free(&s->fr_map);
  bf_map3_free(&s->stk_map);
  bf_map3_free(&s->th_map);
  bufs_free(s);
  free(s->enc);
  free(s->path);
  free(s);
}

/* ---- transactions -------------------------------------------------------------- */

static int64_t mono_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static int ensure_txn(bf_store *s) {
  if (s->readonly) return bf_store_fail(s, -EACCES, "database '%s' is open read-only", s->path);
  if (s->txn_open) return 0;
  int rc = exec(s, "BEGIN IMMEDIATE");
  if (rc == 0) {
    s->txn_open = 1;
    s->txn_started_ns = mono_ns();
  }
  return rc;
}

int bf_store_begin(bf_store *s) {
  int rc = ensure_txn(s);
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
    rc = exec(s, "COMMIT");
    if (rc == 0) s->txn_open = 0;
  }
  return rc;
}

static void drop_caches_after_rollback(bf_store *s) {
  /* Rolled-back rows may be cached: forget all interning caches. */
  for (size_t i = 0; i < s->strs_cap; i++) free(s->strs[i].s);
  free(s->strs);
  s->strs = NULL;
  s->strs_cap = s->strs_len = 0;
  bf_map3_free(&s->fn_map);
  bf_map3_free(&s->fr_map);
  bf_map3_free(&s->stk_map);
  bf_map3_free(&s->th_map);
  free(s->str_by_id);
  s->str_by_id = NULL;
  s->str_by_id_cap = 0;
  free(s->fn_by_id);
  s->fn_by_id = NULL;
  s->fn_by_id_cap = 0;
  free(s->fr_by_id);
  s->fr_by_id = NULL;
  s->fr_by_id_cap = 0;
  free(s->stk_by_id);
  s->stk_by_id = NULL;
  s->stk_by_id_cap = 0;
  s->str_max = s->fn_max = s->fr_max = s->stk_max = 0;
}

int bf_store_rollback(bf_store *s) {
  s->txn_depth = 0;
  for (size_t i = 0; i < s->nbufs; i++) s->bufs[i].n = 0;
  int rc = 0;
  if (s->txn_open) {
    rc = exec(s, "ROLLBACK");
    s->txn_open = 0;
  }
  drop_caches_after_rollback(s);
  return rc;
}

/* ---- sessions -------------------------------------------------------------------- */

static void bind_text(sqlite3_stmt *st, int i, const char *v) {
  if (v)
    sqlite3_bind_text(st, i, v, -1, SQLITE_TRANSIENT);
  else
    sqlite3_bind_null(st, i);
}

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
  bind_text(st, 2, in->kind ? in->kind : "sampled");
  bind_text(st, 3, in->clock);
  bind_text(st, 4, in->mode);
  sqlite3_bind_double(st, 5, in->rate_hz);
  sqlite3_bind_double(st, 6, in->achieved_rate_hz);
  sqlite3_bind_int64(st, 7, in->start_ns);
  sqlite3_bind_int64(st, 8, in->duration_ns);
  bind_text(st, 9, in->host);
  sqlite3_bind_int64(st, 10, in->pid);
  bind_text(st, 11, in->command);
  bind_text(st, 12, in->python_version);
  bind_text(st, 13, in->python_build);
  bind_text(st, 14, in->profiler_version);
  bind_text(st, 15, in->commit);
  bind_text(st, 16, in->label);
  sqlite3_bind_int64(st, 17, in->samples);
  sqlite3_bind_int64(st, 18, in->missed);
  sqlite3_bind_int64(st, 19, in->invalid);
  sqlite3_bind_int64(st, 20, in->profiler_cpu_ns);
  bind_text(st, 21, in->status ? in->status : "incomplete");
  sqlite3_bind_int64(st, 22, in->expires_at_ns);
  sqlite3_bind_int64(st, 23, in->parent_id);
  sqlite3_bind_int(st, 24, in->redacted);
  sqlite3_bind_int64(st, 25, created);
  bind_text(st, 26, in->extra_json);
}

int bf_store_session_begin(bf_store *s, const bf_session_info *info, int64_t *id) {
  if (s->readonly) return bf_store_fail(s, -EACCES, "database '%s' is open read-only", s->path);
  /* The session row is committed on its own so a crash leaves it visible as
   * "incomplete" rather than missing. */
  int was_open = s->txn_open;
  if (!was_open) {
    int rc = exec(s, "BEGIN IMMEDIATE");
    if (rc) return rc;
  }
  sqlite3_stmt *st = NULL;
  int rc = 0;
  if (sqlite3_prepare_v2(s->db, "INSERT INTO sessions(" SESSION_COLS ") VALUES(NULL,?2,?3,?4,?5,?6,?7,?8,?9,?10,"
                                "?11,?12,?13,?14,?15,?16,?17,?18,?19,?20,?21,?22,?23,?24,?25,?26)",
                         -1, &st, NULL) != SQLITE_OK) {
    rc = fail_sql(s, "prepare session");
    goto out;
  }
  int64_t created = info->created_ns ? info->created_ns : now_ns();
  bind_session(st, info, created);
  if (sqlite3_step(st) != SQLITE_DONE) {
    rc = fail_sql(s, "insert session");
    goto out;
  }
  *id = sqlite3_last_insert_rowid(s->db);
out:
  sqlite3_finalize(st);
  if (!was_open) {
    if (rc)
      exec(s, "ROLLBACK");
    else
      rc = exec(s, "COMMIT");
  }
  return rc;
}

int bf_store_session_update(bf_store *s, const bf_session_info *info) {
  int rc = bf_store_flush(s);
  if (rc) return rc;
  int was_open = s->txn_open;
  if (!was_open && (rc = exec(s, "BEGIN IMMEDIATE"))) return rc;
  sqlite3_stmt *st = NULL;
  if (sqlite3_prepare_v2(s->db,
                         "UPDATE sessions SET kind=?2,clock=?3,mode=?4,rate_hz=?5,achieved_rate_hz=?6,"
                         "start_ns=?7,duration_ns=?8,host=?9,pid=?10,command=?11,python_version=?12,"
                         "python_build=?13,profiler_version=?14,commit_id=?15,label=?16,samples=?17,"
                         "missed=?18,invalid=?19,profiler_cpu_ns=?20,status=?21,expires_at_ns=?22,"
                         "parent_id=?23,redacted=?24,created_ns=coalesce(nullif(?25,0),created_ns),"
                         "extra_json=?26 WHERE id=?1",
                         -1, &st, NULL) != SQLITE_OK) {
    rc = fail_sql(s, "prepare session update");
    goto out;
  }
  sqlite3_bind_int64(st, 1, info->id);
  bind_session(st, info, info->created_ns);
  if (sqlite3_step(st) != SQLITE_DONE) {
    rc = fail_sql(s, "update session");
    goto out;
  }
  if (sqlite3_changes(s->db) == 0) rc = bf_store_fail(s, -ENOENT, "no session %lld", (long long)info->id);
out:
  sqlite3_finalize(st);
  if (!was_open) {
    if (rc)
      exec(s, "ROLLBACK");
    else
      rc = exec(s, "COMMIT");
  } else if (rc == 0 && s->txn_depth == 0) {
    rc = exec(s, "COMMIT");
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
    return fail_sql(s, "prepare");
  sqlite3_bind_int64(st, 1, id);
  int rc = sqlite3_step(st);
  if (rc == SQLITE_ROW) {
    *out = session_from_row(st);
    rc = *out ? 0 : -ENOMEM;
  } else if (rc == SQLITE_DONE) {
    rc = bf_store_fail(s, -ENOENT, "no session %lld in '%s' (see `bifocal sessions`)", (long long)id, s->path);
  } else {
    rc = fail_sql(s, "read session");
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
      return fail_sql(s, "prepare");
    sqlite3_bind_int64(st, 1, v);
  } else {
    if (sqlite3_prepare_v2(s->db, "SELECT id FROM sessions WHERE label=?1 ORDER BY id DESC LIMIT 1", -1, &st,
                           NULL) != SQLITE_OK)
      return fail_sql(s, "prepare");
    sqlite3_bind_text(st, 1, arg, -1, SQLITE_TRANSIENT);
  }
  rc = sqlite3_step(st);
  if (rc == SQLITE_ROW) {
    *id = sqlite3_column_int64(st, 0);
    rc = 0;
  } else if (rc == SQLITE_DONE) {
    rc = bf_store_fail(s, -ENOENT, "no session '%s' in '%s' (see `bifocal sessions`)", arg, s->path);
  } else {
    rc = fail_sql(s, "find session");
  }
  sqlite3_finalize(st);
  return rc;
}

int bf_store_session_list(bf_store *s, bf_session_info ***out, size_t *n) {
  *out = NULL;
  *n = 0;
  sqlite3_stmt *st = NULL;
  if (sqlite3_prepare_v2(s->db, "SELECT " SESSION_COLS_READ " FROM sessions ORDER BY id", -1, &st, NULL) != SQLITE_OK)
    return fail_sql(s, "prepare");
  bf_session_info **arr = NULL;
  size_t len = 0, cap = 0;
  int rc;
  while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
    if (len == cap) {
      cap = cap ? cap * 2 : 16;
      bf_session_info **na = realloc(arr, cap * sizeof *na);
      if (!na) goto oom;
      arr = na;
    }
    if (!(arr[len] = session_from_row(st))) goto oom;
    len++;
  }
  sqlite3_finalize(st);
  if (rc != SQLITE_DONE) {
    for (size_t i = 0; i < len; i++) free(arr[i]);
    free(arr);
    return fail_sql(s, "list sessions");
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
  static const char *const tables[] = {"sample_chunks", "threads", "trace_functions", "trace_edges",
                                       "call_records"};
  char sql[128];
  for (size_t i = 0; i < sizeof tables / sizeof tables[0]; i++) {
    snprintf(sql, sizeof sql, "DELETE FROM %s WHERE session_id=%lld", tables[i], (long long)id);
    if ((rc = exec(s, sql))) goto fail;
  }
  snprintf(sql, sizeof sql, "DELETE FROM sessions WHERE id=%lld", (long long)id);
  if ((rc = exec(s, sql))) goto fail;
  /* thread ids of the session may be cached */
  bf_map3_free(&s->th_map);
  return bf_store_commit(s);
fail:
  bf_store_rollback(s);
  return rc;
}

/* ---- interning ---------------------------------------------------------------------- */

static int step_id(bf_store *s, sqlite3_stmt *st, int64_t *id, int *found) {
  int rc = sqlite3_step(st);
  if (rc == SQLITE_ROW) {
    *id = sqlite3_column_int64(st, 0);
    *found = 1;
    return 0;
  }
  if (rc == SQLITE_DONE) {
    *found = 0;
    return 0;
  }
  return fail_sql(s, "lookup");
}

static int step_insert(bf_store *s, sqlite3_stmt *st, int64_t *id) {
  if (sqlite3_step(st) != SQLITE_DONE) return fail_sql(s, "insert");
  *id = sqlite3_last_insert_rowid(s->db);
  return 0;
}

static int strs_grow(bf_store *s) {
  size_t ncap = s->strs_cap ? s->strs_cap * 2 : 1024;
  str_slot *ns = calloc(ncap, sizeof *ns);
  if (!ns) return -ENOMEM;
  for (size_t i = 0; i < s->strs_cap; i++) {
    if (!s->strs[i].s) continue;
    size_t j = s->strs[i].hash & (ncap - 1);
    while (ns[j].s) j = (j + 1) & (ncap - 1);
    ns[j] = s->strs[i];
  }
  free(s->strs);
  s->strs = ns;
  s->strs_cap = ncap;
  return 0;
}

int bf_store_intern_string(bf_store *s, const char *str, int64_t *id) {
  if (!str) str = "";
  size_t len = strlen(str);
  uint64_t h = bf_hash_str(str, len);
  if (s->strs_cap) {
    size_t mask = s->strs_cap - 1;
    for (size_t i = h & mask; s->strs[i].s; i = (i + 1) & mask) {
      if (s->strs[i].hash == h && strcmp(s->strs[i].s, str) == 0) {
        *id = s->strs[i].id;
        return 0;
      }
    }
  }
  int rc = ensure_txn(s);
  if (rc) return rc;
  sqlite3_stmt *st = stmt(s, ST_STR_FIND);
  if (!st) return -EIO;
  sqlite3_bind_text(st, 1, str, (int)len, SQLITE_STATIC);
  int found = 0;
  int64_t v = 0;
  if ((rc = step_id(s, st, &v, &found))) return rc;
  sqlite3_reset(st);
  if (!found) {
    st = stmt(s, ST_STR_INS);
    if (!st) return -EIO;
    sqlite3_bind_text(st, 1, str, (int)len, SQLITE_STATIC);
    if ((rc = step_insert(s, st, &v))) return rc;
    sqlite3_reset(st);
  }
  if ((s->strs_len + 1) * 4 >= s->strs_cap * 3 && (rc = strs_grow(s))) return bf_store_fail(s, rc, "out of memory");
  char *copy = strdup(str);
  if (!copy) return bf_store_fail(s, -ENOMEM, "out of memory");
  size_t mask = s->strs_cap - 1, i = h & mask;
  while (s->strs[i].s) i = (i + 1) & mask;
  s->strs[i] = (str_slot){h, v, copy};
  s->strs_len++;
  *id = v;
  return 0;
}

/* Generic (a,b[,c]) → id interning through a map and two statements. */
static int intern3(bf_store *s, bf_map3 *map, int find, int ins, int nargs, int64_t a, int64_t b, int64_t c,
                   int64_t *id) {
  int64_t *hit = bf_map3_get(map, a, b, c);
  if (hit) {
    *id = *hit;
    return 0;
  }
  int rc = ensure_txn(s);
  if (rc) return rc;
  sqlite3_stmt *st = stmt(s, find);
  if (!st) return -EIO;
  sqlite3_bind_int64(st, 1, a);
  sqlite3_bind_int64(st, 2, b);
  if (nargs > 2) sqlite3_bind_int64(st, 3, c);
  int found = 0;
  int64_t v = 0;
  if ((rc = step_id(s, st, &v, &found))) return rc;
  sqlite3_reset(st);
  if (!found) {
    st = stmt(s, ins);
    if (!st) return -EIO;
    sqlite3_bind_int64(st, 1, a);
    sqlite3_bind_int64(st, 2, b);
    if (nargs > 2) sqlite3_bind_int64(st, 3, c);
    if ((rc = step_insert(s, st, &v))) return rc;
    sqlite3_reset(st);
  }
  if (bf_map3_put(map, a, b, c, v)) return bf_store_fail(s, -ENOMEM, "out of memory");
  *id = v;
  return 0;
}

int bf_store_intern_function(bf_store *s, const char *file, const char *qualname, int64_t firstlineno,
                             int64_t *id) {
  int64_t f, q;
  int rc;
  if ((rc = bf_store_intern_string(s, file ? file : "<unknown>", &f))) return rc;
  if ((rc = bf_store_intern_string(s, qualname ? qualname : "<unknown>", &q))) return rc;
  return intern3(s, &s->fn_map, ST_FN_FIND, ST_FN_INS, 3, f, q, firstlineno, id);
}

int bf_store_intern_frame(bf_store *s, int64_t function_id, int64_t line, int64_t *id) {
  return intern3(s, &s->fr_map, ST_FR_FIND, ST_FR_INS, 2, function_id, line, 0, id);
}

int bf_store_intern_stack(bf_store *s, int64_t parent, int64_t frame_id, int64_t *id) {
  return intern3(s, &s->stk_map, ST_STK_FIND, ST_STK_INS, 2, parent, frame_id, 0, id);
}

int bf_store_intern_thread(bf_store *s, int64_t session_id, int64_t native_tid, const char *name, int64_t *id) {
  /* The map value packs the id; names are only looked at on a miss or when
   * the caller now knows a name, so keep a flag "named" in key c=1. */
  int64_t *hit = bf_map3_get(&s->th_map, session_id, native_tid, 0);
  if (hit && (!name || bf_map3_get(&s->th_map, session_id, native_tid, 1))) {
    *id = *hit;
    return 0;
  }
  int rc = ensure_txn(s);
  if (rc) return rc;
  sqlite3_stmt *st = stmt(s, ST_TH_FIND);
  if (!st) return -EIO;
  sqlite3_bind_int64(st, 1, session_id);
  sqlite3_bind_int64(st, 2, native_tid);
  rc = sqlite3_step(st);
  int64_t v = 0;
  int named = 0;
  if (rc == SQLITE_ROW) {
    v = sqlite3_column_int64(st, 0);
    named = sqlite3_column_type(st, 1) != SQLITE_NULL;
    sqlite3_reset(st);
    if (!named && name) {
      sqlite3_stmt *up = stmt(s, ST_TH_NAME);
      if (!up) return -EIO;
      sqlite3_bind_int64(up, 1, v);
      sqlite3_bind_text(up, 2, name, -1, SQLITE_TRANSIENT);
      if (sqlite3_step(up) != SQLITE_DONE) return fail_sql(s, "name thread");
      sqlite3_reset(up);
      named = 1;
    }
  } else if (rc == SQLITE_DONE) {
    sqlite3_reset(st);
    st = stmt(s, ST_TH_INS);
    if (!st) return -EIO;
    sqlite3_bind_int64(st, 1, session_id);
    sqlite3_bind_int64(st, 2, native_tid);
    bind_text(st, 3, name);
    if ((rc = step_insert(s, st, &v))) return rc;
    sqlite3_reset(st);
    named = name != NULL;
  } else {
    return fail_sql(s, "lookup thread");
  }
  /* thread churn: the cache of thread ids is bounded (a miss is one indexed
   * lookup) */
  if (s->th_map.len >= 8192) bf_map3_free(&s->th_map);
  if (bf_map3_put(&s->th_map, session_id, native_tid, 0, v)) return bf_store_fail(s, -ENOMEM, "out of memory");
  if (named && bf_map3_put(&s->th_map, session_id, native_tid, 1, v))
    return bf_store_fail(s, -ENOMEM, "out of memory");
  *id = v;
  return 0;
}

/* ---- samples ----------------------------------------------------------------------------- */

/* Chunk encoding, per record:
 *   ctrl byte: bit0 same stack as previous, bit1 same flags, bit2 count==1,
 *              bit3 weight == delta ts, bit4 weight == previous weight
 *   varint delta_ts (from previous record; first from the chunk's first_ts)
 *   [varint stack] [byte flags] [varint count] [varint weight]
 * Typical wall-clock samples cost 5–7 bytes. */
enum { C_SAME_STACK = 1, C_SAME_FLAGS = 2, C_COUNT1 = 4, C_W_DTS = 8, C_W_PREV = 16 };

static int encode_chunk(bf_store *s, const bf_sample *r, size_t n, size_t *out_len) {
  size_t need = n * 42 + 16;
  if (s->enc_cap < need) {
    uint8_t *ne = realloc(s->enc, need);
    if (!ne) return -ENOMEM;
    s->enc = ne;
    s->enc_cap = need;
  }
  uint8_t *p = s->enc;
  int64_t prev_ts = r[0].ts_ns, prev_stack = -1, prev_w = -1;
  uint32_t prev_flags = 0xffffffffu;
  for (size_t i = 0; i < n; i++) {
    const bf_sample *x = &r[i];
    int64_t dts = x->ts_ns - prev_ts;
    if (dts < 0) dts = 0; /* non-decreasing by contract; clamp defensively */
    uint8_t ctrl = 0;
    if (x->stack_id == prev_stack) ctrl |= C_SAME_STACK;
    if (x->flags == prev_flags) ctrl |= C_SAME_FLAGS;
    if (x->count <= 1) ctrl |= C_COUNT1;
    if (x->weight == dts && dts > 0)
      ctrl |= C_W_DTS;
    else if (x->weight == prev_w)
      ctrl |= C_W_PREV;
    *p++ = ctrl;
    p += bf_varint_put(p, (uint64_t)dts);
    if (!(ctrl & C_SAME_STACK)) p += bf_varint_put(p, (uint64_t)x->stack_id);
    if (!(ctrl & C_SAME_FLAGS)) p += bf_varint_put(p, x->flags);
    if (!(ctrl & C_COUNT1)) p += bf_varint_put(p, x->count);
    if (!(ctrl & (C_W_DTS | C_W_PREV))) p += bf_varint_put(p, (uint64_t)(x->weight < 0 ? 0 : x->weight));
    prev_ts = prev_ts + dts;
    prev_stack = x->stack_id;
    prev_flags = x->flags;
    prev_w = x->weight < 0 ? 0 : x->weight;
  }
  *out_len = (size_t)(p - s->enc);
  return 0;
}

int bf_chunk_decode(const uint8_t *d, size_t len, int64_t thread_id, int64_t first_ts, const bf_sample_filter *f,
                    bf_sample_fn fn, void *ud) {
  size_t i = 0;
  bf_sample x = {.thread_id = thread_id, .ts_ns = first_ts, .stack_id = -1, .flags = 0, .weight = 0};
  int have_prev = 0;
  while (i < len) {
    uint8_t ctrl = d[i++];
    uint64_t v;
    size_t k;
    if (ctrl & ~31u) return -EBADMSG;
    if (!(k = bf_varint_get(d + i, len - i, &v)) || v > (1ULL << 62)) return -EBADMSG;
    i += k;
    int64_t dts = (int64_t)v;
    x.ts_ns += dts;
    if (!(ctrl & C_SAME_STACK)) {
      if (!(k = bf_varint_get(d + i, len - i, &v)) || v > (1ULL << 62)) return -EBADMSG;
      i += k;
      x.stack_id = (int64_t)v;
    } else if (!have_prev) {
      return -EBADMSG;
    }
    if (!(ctrl & C_SAME_FLAGS)) {
      if (!(k = bf_varint_get(d + i, len - i, &v)) || v > 0xffffffffu) return -EBADMSG;
      i += k;
      x.flags = (uint32_t)v;
    } else if (!have_prev) {
      return -EBADMSG;
    }
    if (!(ctrl & C_COUNT1)) {
      if (!(k = bf_varint_get(d + i, len - i, &v)) || v > 0xffffffffu) return -EBADMSG;
      i += k;
      x.count = (uint32_t)v;
    } else {
      x.count = 1;
    }
    if (ctrl & C_W_DTS) {
      x.weight = dts;
    } else if (ctrl & C_W_PREV) {
      if (!have_prev) return -EBADMSG;
    } else {
      if (!(k = bf_varint_get(d + i, len - i, &v)) || v > (1ULL << 62)) return -EBADMSG;
      i += k;
      x.weight = (int64_t)v;
    }
    have_prev = 1;
    if (f) {
      if (f->since_ns && x.ts_ns < f->since_ns) continue;
      if (f->until_ns > 0 && x.ts_ns >= f->until_ns) continue;
    }
    int r = fn(ud, &x);
    if (r) return r;
  }
  return 0;
}

static int write_chunk(bf_store *s, thread_buf *b) {
  if (!b->n) return 0;
  int rc = ensure_txn(s);
  if (rc) return rc;
  size_t len = 0;
  if ((rc = encode_chunk(s, b->recs, b->n, &len))) return bf_store_fail(s, rc, "out of memory");
  int64_t nsamples = 0;
  for (size_t i = 0; i < b->n; i++) nsamples += b->recs[i].count ? b->recs[i].count : 1;
  sqlite3_stmt *st = stmt(s, ST_CHUNK_INS);
  if (!st) return -EIO;
  sqlite3_bind_int64(st, 1, b->session_id);
  sqlite3_bind_int64(st, 2, b->thread_id);
  sqlite3_bind_int64(st, 3, b->recs[0].ts_ns);
  sqlite3_bind_int64(st, 4, b->recs[b->n - 1].ts_ns);
  sqlite3_bind_int64(st, 5, (int64_t)b->n);
  sqlite3_bind_int64(st, 6, nsamples);
  sqlite3_bind_blob(st, 7, s->enc, (int)len, SQLITE_STATIC);
  if (sqlite3_step(st) != SQLITE_DONE) return fail_sql(s, "write samples");
  sqlite3_reset(st);
  s->uncommitted_samples += nsamples;
  b->n = 0;
  return 0;
}

static int maybe_commit(bf_store *s) {
  if (s->txn_depth == 0 && s->txn_open && s->uncommitted_samples >= COMMIT_SAMPLES) {
    int rc = exec(s, "COMMIT");
    if (rc) return rc;
    s->txn_open = 0;
    s->uncommitted_samples = 0;
  }
  return 0;
}

void bf_store_set_busy_timeout(bf_store *s, int ms) {
  s->busy_ms = ms;
  sqlite3_busy_timeout(s->db, ms);
}

int bf_store_sample_add(bf_store *s, int64_t session_id, const bf_sample *smp) {
  thread_buf *b = NULL;
  if (s->last_buf < s->nbufs && s->bufs[s->last_buf].thread_id == smp->thread_id &&
      s->bufs[s->last_buf].session_id == session_id) {
    b = &s->bufs[s->last_buf];
  } else if (s->last_buf + 1 < s->nbufs && s->bufs[s->last_buf + 1].thread_id == smp->thread_id &&
             s->bufs[s->last_buf + 1].session_id == session_id) { /* threads in tick order */
    b = &s->bufs[++s->last_buf];
  } else {
    for (size_t i = 0; i < s->nbufs; i++)
      if (s->bufs[i].thread_id == smp->thread_id && s->bufs[i].session_id == session_id) {
        b = &s->bufs[i];
        s->last_buf = i;
        break;
      }
    if (!b) {
      if (s->readonly) return bf_store_fail(s, -EACCES, "database '%s' is open read-only", s->path);
      if (s->nbufs == s->bufs_cap) {
        size_t nc = s->bufs_cap ? s->bufs_cap * 2 : 8;
        thread_buf *nb = realloc(s->bufs, nc * sizeof *nb);
        if (!nb) return bf_store_fail(s, -ENOMEM, "out of memory");
        s->bufs = nb;
        s->bufs_cap = nc;
      }
      b = &s->bufs[s->nbufs];
      *b = (thread_buf){.session_id = session_id, .thread_id = smp->thread_id};
      s->last_buf = s->nbufs++;
    }
  }
  if (b->n && smp->ts_ns < b->recs[b->n - 1].ts_ns)
    return bf_store_fail(s, -EINVAL, "sample timestamps must not go backwards within a thread");
  if (b->n >= CHUNK_RECORDS) { /* an earlier write failed (e.g. the database was locked): retry it */
    int rc = write_chunk(s, b);
    if (rc) return rc; /* this sample was not added */
  }
  if (b->n == b->cap) {
    size_t nc = b->cap ? b->cap * 2 : 16; /* small at first: short-lived threads are common */
    if (nc > CHUNK_RECORDS) nc = CHUNK_RECORDS;
    bf_sample *nr = realloc(b->recs, nc * sizeof *nr);
    if (!nr) return bf_store_fail(s, -ENOMEM, "out of memory");
    b->recs = nr;
    b->cap = nc;
  }
  b->recs[b->n++] = *smp;
  b->idle_flushes = 0;
  /* from here on the sample is kept: a locked database only delays it */
  if (b->n >= CHUNK_RECORDS) {
    int rc = write_chunk(s, b);
    if (!rc) rc = maybe_commit(s);
    if (rc) return rc == -EBUSY ? 0 : rc;
  }
  /* A long capture must neither hold the write lock (other writers, e.g. a
   * tracer sharing the file, wait on it) nor keep its samples only in memory:
   * commit every 250 ms and write buffered chunks every second. */
  if ((++s->add_counter & 63) == 0) {
    int rc = bf_store_checkpoint(s);
    return rc == -EBUSY ? 0 : rc;
  }
  return 0;
}

int bf_store_checkpoint(bf_store *s) {
  if (s->readonly || s->txn_depth > 0) return 0;
  int64_t now = mono_ns();
  if (!s->last_flush_ns) s->last_flush_ns = now;
  if (now - s->last_flush_ns > 1000000000LL) {
    s->last_flush_ns = now;
    return bf_store_flush(s);
  }
  if (s->txn_open && now - s->txn_started_ns > 250000000LL) {
    int rc = exec(s, "COMMIT");
    if (rc) return rc;
    s->txn_open = 0;
    s->uncommitted_samples = 0;
  }
  return 0;
}

int bf_store_flush(bf_store *s) {
  if (s->readonly) return 0;
  for (size_t i = 0; i < s->nbufs; i++) {
    int rc = write_chunk(s, &s->bufs[i]);
    if (rc) return rc;
  }
  /* free the buffers of threads that stopped sending samples (thread churn
   * must not grow memory) */
  for (size_t i = 0; i < s->nbufs;) {
    if (++s->bufs[i].idle_flushes <= 1) {
      i++;
      continue;
    }
    free(s->bufs[i].recs);
    s->bufs[i] = s->bufs[--s->nbufs];
    s->last_buf = 0;
  }
  if (s->txn_depth == 0 && s->txn_open) {
    int rc = exec(s, "COMMIT");
    if (rc) return rc;
    s->txn_open = 0;
    s->uncommitted_samples = 0;
  }
  return 0;
}

int bf_store_samples_foreach(bf_store *s, int64_t session_id, const bf_sample_filter *f, bf_sample_fn fn,
                             void *ud) {
  int rc = bf_store_flush(s);
  if (rc) return rc;
  sqlite3_stmt *st = NULL;
  /* tree: the session and every descendant (record --subprocesses) as one */
#define TREE_SQL                                                                                  \
  "WITH RECURSIVE tree(id) AS (SELECT ?1 UNION SELECT s.id FROM sessions s JOIN tree ON s.parent_id=tree.id) " \
  "SELECT thread_id, first_ts_ns, last_ts_ns, data FROM sample_chunks WHERE session_id IN (SELECT id FROM tree) "
  const char *sql = (f && f->tree)
                        ? ((f->thread_id) ? TREE_SQL "AND thread_id=?2 ORDER BY thread_id, first_ts_ns, id"
                                          : TREE_SQL "ORDER BY thread_id, first_ts_ns, id")
                    : (f && f->thread_id)
                        ? "SELECT thread_id, first_ts_ns, last_ts_ns, data FROM sample_chunks WHERE session_id=?1 "
                          "AND thread_id=?2 ORDER BY thread_id, first_ts_ns, id"
                        : "SELECT thread_id, first_ts_ns, last_ts_ns, data FROM sample_chunks WHERE session_id=?1 "
                          "ORDER BY thread_id, first_ts_ns, id";
#undef TREE_SQL
  if (sqlite3_prepare_v2(s->db, sql, -1, &st, NULL) != SQLITE_OK) return fail_sql(s, "prepare");
  sqlite3_bind_int64(st, 1, session_id);
  if (f && f->thread_id) sqlite3_bind_int64(st, 2, f->thread_id);
  while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
    int64_t tid = sqlite3_column_int64(st, 0);
    int64_t first = sqlite3_column_int64(st, 1), last = sqlite3_column_int64(st, 2);
    if (f && f->until_ns > 0 && first >= f->until_ns) continue;
    if (f && f->since_ns && last < f->since_ns) continue;
    const uint8_t *d = sqlite3_column_blob(st, 3);
    size_t len = (size_t)sqlite3_column_bytes(st, 3);
    int r = bf_chunk_decode(d, len, tid, first, f, fn, ud);
    if (r == -EBADMSG) {
      sqlite3_finalize(st);
      return bf_store_fail(s, -EBADMSG,
                           "database '%s': a sample chunk of session %lld is corrupt (the file was changed "
                           "outside bifocal); its other sessions are intact: record or import this one again",
                           s->path, (long long)session_id);
    }
    if (r) {
      sqlite3_finalize(st);
      return r;
    }
  }
  sqlite3_finalize(st);
  if (rc != SQLITE_DONE) return fail_sql(s, "read samples");
  return 0;
}

/* ---- reverse lookups ----------------------------------------------------------------------- */

static int load_strings(bf_store *s, int64_t need) {
  /* Load from the missing id onward: ids below it may be known already, and
   * rows created after the last load can sit below the array's size. */
  size_t start = (size_t)s->str_max + 1;
  (void)0;
  sqlite3_stmt *st = NULL;
  if (sqlite3_prepare_v2(s->db, "SELECT id, s FROM strings WHERE id>=?1 ORDER BY id", -1, &st, NULL) != SQLITE_OK)
    return fail_sql(s, "prepare");
  sqlite3_bind_int64(st, 1, (int64_t)start);
  int rc;
  while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
    int64_t id = sqlite3_column_int64(st, 0);
    if (id < 0) continue;
    if (id > s->str_max) s->str_max = id;
    if ((size_t)id >= s->str_by_id_cap) {
      size_t nc = s->str_by_id_cap ? s->str_by_id_cap : 256;
      while (nc <= (size_t)id) nc *= 2;
      char **na = realloc(s->str_by_id, nc * sizeof *na);
      if (!na) {
        sqlite3_finalize(st);
        return bf_store_fail(s, -ENOMEM, "out of memory");
      }
      memset(na + s->str_by_id_cap, 0, (nc - s->str_by_id_cap) * sizeof *na);
      s->str_by_id = na;
      s->str_by_id_cap = nc;
    }
    if (!s->str_by_id[id]) {
      /* Intern into the forward cache too so both share one copy. */
      int64_t same;
      const char *t = (const char *)sqlite3_column_text(st, 1);
      if (!t) t = "";
      size_t len = strlen(t);
      uint64_t h = bf_hash_str(t, len);
      char *found = NULL;
      if (s->strs_cap) {
        size_t mask = s->strs_cap - 1;
        for (size_t i = h & mask; s->strs[i].s; i = (i + 1) & mask)
          if (s->strs[i].hash == h && strcmp(s->strs[i].s, t) == 0) {
            found = s->strs[i].s;
            break;
          }
      }
      if (!found) {
        if ((s->strs_len + 1) * 4 >= s->strs_cap * 3 && strs_grow(s)) {
          sqlite3_finalize(st);
          return bf_store_fail(s, -ENOMEM, "out of memory");
        }
        found = strdup(t);
        if (!found) {
          sqlite3_finalize(st);
          return bf_store_fail(s, -ENOMEM, "out of memory");
        }
        size_t mask = s->strs_cap - 1, i = h & mask;
        while (s->strs[i].s) i = (i + 1) & mask;
        s->strs[i] = (str_slot){h, id, found};
        s->strs_len++;
      }
      (void)same;
      s->str_by_id[id] = found;
    }
  }
  sqlite3_finalize(st);
  if (rc != SQLITE_DONE) return fail_sql(s, "read strings");
  if (need >= 0 && ((size_t)need >= s->str_by_id_cap || !s->str_by_id[need]))
    return bf_store_fail(s, -ENOENT, "database '%s': missing string %lld", s->path, (long long)need);
  return 0;
}

static const char *string_get(bf_store *s, int64_t id) {
  if (id < 0) return NULL;
  if ((size_t)id < s->str_by_id_cap && s->str_by_id[id]) return s->str_by_id[id];
  if (load_strings(s, id)) return NULL;
  return s->str_by_id[id];
}

/* Load rows of a (id, a, b[, c]) table with id >= from into a dense array. */
static int load_rows(bf_store *s, const char *sql, int64_t *maxid, void **arr, size_t *cap, size_t elem,
                     int ncols) {
  sqlite3_stmt *st = NULL;
  if (sqlite3_prepare_v2(s->db, sql, -1, &st, NULL) != SQLITE_OK) return fail_sql(s, "prepare");
  /* ids are dense and only grow: everything up to *maxid is loaded already */
  sqlite3_bind_int64(st, 1, *maxid + 1);
  int rc;
  while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
    int64_t id = sqlite3_column_int64(st, 0);
    if (id < 0) continue;
    if (id > *maxid) *maxid = id;
    if ((size_t)id >= *cap) {
      size_t nc = *cap ? *cap : 256;
      while (nc <= (size_t)id) nc *= 2;
      char *na = realloc(*arr, nc * elem);
      if (!na) {
        sqlite3_finalize(st);
        return bf_store_fail(s, -ENOMEM, "out of memory");
      }
      memset(na + *cap * elem, 0, (nc - *cap) * elem);
      *arr = na;
      *cap = nc;
    }
    if (ncols == 3) {
      fn_row *r = (fn_row *)*arr + id;
      r->file_id = sqlite3_column_int64(st, 1);
      r->qual_id = sqlite3_column_int64(st, 2);
      r->firstlineno = sqlite3_column_int64(st, 3);
      r->loaded = 1;
    } else {
      pair_row *r = (pair_row *)*arr + id;
      r->a = sqlite3_column_int64(st, 1);
      r->b = sqlite3_column_int64(st, 2);
      r->loaded = 1;
    }
  }
  sqlite3_finalize(st);
  if (rc != SQLITE_DONE) return fail_sql(s, "read table");
  return 0;
}

int bf_store_function_get(bf_store *s, int64_t function_id, bf_function_ref *out) {
  if (function_id <= 0) return bf_store_fail(s, -ENOENT, "no function %lld", (long long)function_id);
  if ((size_t)function_id >= s->fn_by_id_cap || !s->fn_by_id[function_id].loaded) {
    int rc = load_rows(s, "SELECT id, file_id, qualname_id, firstlineno FROM functions WHERE id>=?1", &s->fn_max,
                       (void **)&s->fn_by_id, &s->fn_by_id_cap, sizeof(fn_row), 3);
    if (rc) return rc;
    if ((size_t)function_id >= s->fn_by_id_cap || !s->fn_by_id[function_id].loaded)
      return bf_store_fail(s, -ENOENT, "database '%s': no function %lld", s->path, (long long)function_id);
  }
  fn_row *r = &s->fn_by_id[function_id];
  const char *file = string_get(s, r->file_id);
  const char *qual = string_get(s, r->qual_id);
  if (!file || !qual) return -ENOENT;
  out->id = function_id;
  out->file = file;
  out->qualname = qual;
  out->firstlineno = r->firstlineno;
  return 0;
}

int bf_store_frame_get(bf_store *s, int64_t frame_id, int64_t *function_id, int64_t *line) {
  if (frame_id <= 0) return bf_store_fail(s, -ENOENT, "no frame %lld", (long long)frame_id);
  if ((size_t)frame_id >= s->fr_by_id_cap || !s->fr_by_id[frame_id].loaded) {
    int rc = load_rows(s, "SELECT id, function_id, line FROM frames WHERE id>=?1", &s->fr_max, (void **)&s->fr_by_id,
                       &s->fr_by_id_cap, sizeof(pair_row), 2);
    if (rc) return rc;
    if ((size_t)frame_id >= s->fr_by_id_cap || !s->fr_by_id[frame_id].loaded)
      return bf_store_fail(s, -ENOENT, "database '%s': no frame %lld", s->path, (long long)frame_id);
  }
  *function_id = s->fr_by_id[frame_id].a;
  *line = s->fr_by_id[frame_id].b;
  return 0;
}

int bf_store_stack_get(bf_store *s, int64_t stack_id, int64_t *parent, int64_t *frame_id) {
  if (stack_id <= 0) return bf_store_fail(s, -ENOENT, "no stack %lld", (long long)stack_id);
  if ((size_t)stack_id >= s->stk_by_id_cap || !s->stk_by_id[stack_id].loaded) {
    int rc = load_rows(s, "SELECT id, parent_id, frame_id FROM stacks WHERE id>=?1", &s->stk_max, (void **)&s->stk_by_id,
                       &s->stk_by_id_cap, sizeof(pair_row), 2);
    if (rc) return rc;
    if ((size_t)stack_id >= s->stk_by_id_cap || !s->stk_by_id[stack_id].loaded)
      return bf_store_fail(s, -ENOENT, "database '%s': no stack %lld", s->path, (long long)stack_id);
  }
  *parent = s->stk_by_id[stack_id].a;
  *frame_id = s->stk_by_id[stack_id].b;
  return 0;
}

int bf_store_stack_frames(bf_store *s, int64_t stack_id, int64_t **frames, size_t *n) {
  *frames = NULL;
  *n = 0;
  size_t len = 0, cap = 32;
  int64_t *arr = malloc(cap * sizeof *arr);
  if (!arr) return bf_store_fail(s, -ENOMEM, "out of memory");
  int64_t cur = stack_id;
  while (cur > 0) {
    int64_t parent, frame;
    int rc = bf_store_stack_get(s, cur, &parent, &frame);
    if (rc) {
      free(arr);
      return rc;
    }
    if (len == cap) {
      cap *= 2;
      int64_t *na = realloc(arr, cap * sizeof *na);
      if (!na) {
        free(arr);
        return bf_store_fail(s, -ENOMEM, "out of memory");
      }
      arr = na;
    }
    arr[len++] = frame;
    if (len > 100000 || parent >= cur) { /* parents are interned first: a loop is corruption */
      free(arr);
      return bf_store_fail(s, -EBADMSG, "database '%s': corrupt stack %lld", s->path, (long long)stack_id);
    }
    cur = parent;
  }
  for (size_t i = 0; i < len / 2; i++) {
    int64_t t = arr[i];
    arr[i] = arr[len - 1 - i];
    arr[len - 1 - i] = t;
  }
  *frames = arr;
  *n = len;
  return 0;
}

int bf_store_threads(bf_store *s, int64_t session_id, bf_thread_ref **out, size_t *n) {
  *out = NULL;
  *n = 0;
  int rc = bf_store_flush(s);
  if (rc) return rc;
  sqlite3_stmt *st = NULL;
  if (sqlite3_prepare_v2(s->db, "SELECT id, native_tid, name FROM threads WHERE session_id=?1 ORDER BY id", -1,
                         &st, NULL) != SQLITE_OK)
    return fail_sql(s, "prepare");
  sqlite3_bind_int64(st, 1, session_id);
  bf_thread_ref *arr = NULL;
  size_t len = 0, cap = 0;
  while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
    if (len == cap) {
      cap = cap ? cap * 2 : 8;
      bf_thread_ref *na = realloc(arr, cap * sizeof *na);
      if (!na) {
        sqlite3_finalize(st);
        bf_thread_refs_free(arr, len);
        return bf_store_fail(s, -ENOMEM, "out of memory");
      }
      arr = na;
    }
    arr[len].id = sqlite3_column_int64(st, 0);
    arr[len].native_tid = sqlite3_column_int64(st, 1);
    const char *nm = (const char *)sqlite3_column_text(st, 2);
    arr[len].name = nm ? strdup(nm) : NULL;
    len++;
  }
  sqlite3_finalize(st);
  if (rc != SQLITE_DONE) {
    bf_thread_refs_free(arr, len);
    return fail_sql(s, "read threads");
  }
  *out = arr;
  *n = len;
  return 0;
}

void bf_thread_refs_free(bf_thread_ref *t, size_t n) {
  if (!t) return;
  for (size_t i = 0; i < n; i++) free(t[i].name);
  free(t);
}

/* ---- traced data ------------------------------------------------------------------------------ */

int bf_store_trace_func_put(bf_store *s, int64_t session_id, const bf_trace_func *tf) {
  int rc = ensure_txn(s);
  if (rc) return rc;
  sqlite3_stmt *st = stmt(s, ST_TF_PUT);
  if (!st) return -EIO;
  int64_t v[] = {session_id, tf->function_id, tf->calls, tf->primitive_calls, tf->resumes, tf->self_ns,
                 tf->total_ns, tf->p50_ns, tf->p90_ns, tf->p99_ns, tf->max_ns, tf->records_kept,
                 tf->records_dropped};
  for (int i = 0; i < 13; i++) sqlite3_bind_int64(st, i + 1, v[i]);
  if (sqlite3_step(st) != SQLITE_DONE) return fail_sql(s, "write traced function");
  sqlite3_reset(st);
  return 0;
}

int bf_store_trace_edge_put(bf_store *s, int64_t session_id, const bf_trace_edge *te) {
  int rc = ensure_txn(s);
  if (rc) return rc;
  sqlite3_stmt *st = stmt(s, ST_TE_PUT);
  if (!st) return -EIO;
  int64_t v[] = {session_id, te->caller_function_id, te->callee_function_id, te->calls, te->primitive_calls,
                 te->self_ns, te->total_ns};
  for (int i = 0; i < 7; i++) sqlite3_bind_int64(st, i + 1, v[i]);
  if (sqlite3_step(st) != SQLITE_DONE) return fail_sql(s, "write traced edge");
  sqlite3_reset(st);
  return 0;
}

int bf_store_trace_funcs_foreach(bf_store *s, int64_t session_id, bf_trace_func_fn fn, void *ud) {
  sqlite3_stmt *st = NULL;
  if (sqlite3_prepare_v2(s->db,
                         "SELECT function_id,calls,primitive_calls,resumes,self_ns,total_ns,p50_ns,p90_ns,p99_ns,"
                         "max_ns,records_kept,records_dropped FROM trace_functions WHERE session_id=?1 "
                         "ORDER BY function_id",
                         -1, &st, NULL) != SQLITE_OK)
    return fail_sql(s, "prepare");
  sqlite3_bind_int64(st, 1, session_id);
  int rc;
  while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
    bf_trace_func tf;
    int64_t *f[] = {&tf.function_id, &tf.calls, &tf.primitive_calls, &tf.resumes, &tf.self_ns, &tf.total_ns,
                    &tf.p50_ns, &tf.p90_ns, &tf.p99_ns, &tf.max_ns, &tf.records_kept, &tf.records_dropped};
    for (int i = 0; i < 12; i++) *f[i] = sqlite3_column_int64(st, i);
    int r = fn(ud, &tf);
    if (r) {
      sqlite3_finalize(st);
      return r;
    }
  }
  sqlite3_finalize(st);
  return rc == SQLITE_DONE ? 0 : fail_sql(s, "read traced functions");
}

int bf_store_trace_edges_foreach(bf_store *s, int64_t session_id, bf_trace_edge_fn fn, void *ud) {
  sqlite3_stmt *st = NULL;
  if (sqlite3_prepare_v2(s->db,
                         "SELECT caller_id,callee_id,calls,primitive_calls,self_ns,total_ns FROM trace_edges "
                         "WHERE session_id=?1 ORDER BY caller_id, callee_id",
                         -1, &st, NULL) != SQLITE_OK)
    return fail_sql(s, "prepare");
  sqlite3_bind_int64(st, 1, session_id);
  int rc;
  while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
    bf_trace_edge te;
    int64_t *f[] = {&te.caller_function_id, &te.callee_function_id, &te.calls, &te.primitive_calls, &te.self_ns,
                    &te.total_ns};
    for (int i = 0; i < 6; i++) *f[i] = sqlite3_column_int64(st, i);
    int r = fn(ud, &te);
    if (r) {
      sqlite3_finalize(st);
      return r;
    }
  }
  sqlite3_finalize(st);
  return rc == SQLITE_DONE ? 0 : fail_sql(s, "read traced edges");
}

int bf_store_call_record_add(bf_store *s, int64_t session_id, const bf_call_record *r) {
  int rc = ensure_txn(s);
  if (rc) return rc;
  sqlite3_stmt *st = stmt(s, ST_CR_INS);
  if (!st) return -EIO;
  sqlite3_bind_int64(st, 1, session_id);
  sqlite3_bind_int64(st, 2, r->function_id);
  sqlite3_bind_int64(st, 3, r->thread_id);
  sqlite3_bind_int64(st, 4, r->start_ns);
  sqlite3_bind_int64(st, 5, r->duration_ns);
  sqlite3_bind_int(st, 6, r->depth);
  sqlite3_bind_int64(st, 7, r->parent_function_id);
  if (sqlite3_step(st) != SQLITE_DONE) return fail_sql(s, "write call record");
  sqlite3_reset(st);
  return 0;
}

int bf_store_call_records_foreach(bf_store *s, int64_t session_id, bf_call_record_fn fn, void *ud) {
  sqlite3_stmt *st = NULL;
  if (sqlite3_prepare_v2(s->db,
                         "SELECT function_id,thread_id,start_ns,duration_ns,depth,parent_function_id FROM "
                         "call_records WHERE session_id=?1 ORDER BY start_ns, id",
                         -1, &st, NULL) != SQLITE_OK)
    return fail_sql(s, "prepare");
  sqlite3_bind_int64(st, 1, session_id);
  int rc;
  while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
    bf_call_record r;
    r.function_id = sqlite3_column_int64(st, 0);
    r.thread_id = sqlite3_column_int64(st, 1);
    r.start_ns = sqlite3_column_int64(st, 2);
    r.duration_ns = sqlite3_column_int64(st, 3);
    r.depth = sqlite3_column_int(st, 4);
    r.parent_function_id = sqlite3_column_int64(st, 5);
    int x = fn(ud, &r);
    if (x) {
      sqlite3_finalize(st);
      return x;
    }
  }
  sqlite3_finalize(st);
  return rc == SQLITE_DONE ? 0 : fail_sql(s, "read call records");
}

/* ---- audit ---------------------------------------------------------------------------------------- */

int bf_store_audit_add(bf_store *s, const bf_audit_entry *e, int64_t *id) {
  if (s->readonly) return bf_store_fail(s, -EACCES, "database '%s' is open read-only", s->path);
  int was_open = s->txn_open;
  int rc = 0;
  if (!was_open && (rc = exec(s, "BEGIN IMMEDIATE"))) return rc;
  sqlite3_stmt *st = NULL;
  if (sqlite3_prepare_v2(s->db,
                         "INSERT INTO audit(time_ns,user,uid,target_pid,target_uid,command,argv,outcome,"
                         "session_id) VALUES(?1,?2,?3,?4,?5,?6,?7,?8,?9)",
                         -1, &st, NULL) != SQLITE_OK) {
    rc = fail_sql(s, "prepare");
    goto out;
  }
  sqlite3_bind_int64(st, 1, e->time_ns ? e->time_ns : now_ns());
  bind_text(st, 2, e->user);
  sqlite3_bind_int64(st, 3, e->uid);
  sqlite3_bind_int64(st, 4, e->target_pid);
  sqlite3_bind_int64(st, 5, e->target_uid);
  bind_text(st, 6, e->command);
  bind_text(st, 7, e->argv);
  bind_text(st, 8, e->outcome);
  sqlite3_bind_int64(st, 9, e->session_id);
  if (sqlite3_step(st) != SQLITE_DONE) {
    rc = fail_sql(s, "write audit");
    goto out;
  }
  if (id) *id = sqlite3_last_insert_rowid(s->db);
out:
  sqlite3_finalize(st);
  if (!was_open) {
    if (rc)
      exec(s, "ROLLBACK");
    else
      rc = exec(s, "COMMIT");
  }
  return rc;
}

int bf_store_audit_update(bf_store *s, int64_t id, const char *outcome, int64_t session_id) {
  int was_open = s->txn_open;
  int rc = 0;
  if (!was_open && (rc = exec(s, "BEGIN IMMEDIATE"))) return rc;
  sqlite3_stmt *st = NULL;
  if (sqlite3_prepare_v2(s->db, "UPDATE audit SET outcome=?2, session_id=?3 WHERE id=?1", -1, &st, NULL) !=
      SQLITE_OK) {
    rc = fail_sql(s, "prepare");
    goto out;
  }
  sqlite3_bind_int64(st, 1, id);
  bind_text(st, 2, outcome);
  sqlite3_bind_int64(st, 3, session_id);
  if (sqlite3_step(st) != SQLITE_DONE) rc = fail_sql(s, "update audit");
out:
  sqlite3_finalize(st);
  if (!was_open) {
    if (rc)
      exec(s, "ROLLBACK");
    else
      rc = exec(s, "COMMIT");
  }
  return rc;
}

int bf_store_audit_foreach(bf_store *s, bf_audit_fn fn, void *ud) {
  sqlite3_stmt *st = NULL;
  if (sqlite3_prepare_v2(s->db,
                         "SELECT id,time_ns,user,uid,target_pid,target_uid,command,argv,outcome,session_id "
                         "FROM audit ORDER BY id",
                         -1, &st, NULL) != SQLITE_OK)
    return fail_sql(s, "prepare");
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
  return rc == SQLITE_DONE ? 0 : fail_sql(s, "read audit");
}
