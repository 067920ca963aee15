/* store_impl.h — the store's one internal header: the handle, its cached
 * statements and caches, and the helpers the store's files share (SQL error
 * mapping, statements, transactions). Only the files in core/store/ include it. */
#ifndef BF_STORE_IMPL_H
#define BF_STORE_IMPL_H

#include <sqlite3.h>
#include <stdint.h>

#include "store.h"
#include "store_int.h"

#define BF_APP_ID 0x42466f63 /* 'BFoc' */
#define CHUNK_RECORDS 8192
#define COMMIT_SAMPLES 200000

/* An interned string: its id and the one copy (owned) that both caches use.
 * The forward cache maps (content hash, k, 0) to an index into strs; k counts
 * the strings that share a hash (0 for the first). */
typedef struct str_ent {
  int64_t id;
  char *s;
} str_ent;

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

/* The cached statements' SQL (handle.c), prepared on first use. */
extern const char *const bfs_stmt_sql[ST__N];

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
  str_ent *strs;
  size_t strs_cap, strs_len;
  bf_map3 str_map;
  bf_map3 fn_map, fr_map, stk_map, th_map;
  /* kernel-lens leaf pseudo-functions (bf_store_kleaf_id): id → name */
  bf_map3 kleaf_map;
  char **kleaf_names;
  size_t kleaf_n, kleaf_cap;
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
  /* the progress guard (guard.c) */
  int64_t stmt_budget_ns;         /* a read may run this long without a row; <0 none */
  unsigned long progress_events;  /* statements started + rows produced */
  unsigned long progress_seen;    /* progress_events at progress_mark_ns */
  int64_t progress_mark_ns;       /* monotonic */
  int cur_write;                  /* the last statement started writes (not budgeted) */
  int budget_hit;                 /* the guard stopped a read for its budget */
};

/* Default budget of one read without progress (BF_STORE_STMT_BUDGET_NS). */
#define BF_STORE_STMT_BUDGET_NS (30LL * 1000000000LL)

/* ---- shared helpers (handle.c unless noted) ---- */

/* Map the connection's last SQLite error to an errno and a message naming the
 * database and `what`; returns the errno. */
int bfs_fail_sql(bf_store *s, const char *what);
/* A cached statement, reset and unbound; NULL (message set) on failure. */
sqlite3_stmt *bfs_stmt(bf_store *s, int which);
/* Run SQL without results; 0 or a negative errno (message set). */
int bfs_exec(bf_store *s, const char *sql);
/* Open the implicit write transaction unless one is open. */
int bfs_ensure_txn(bf_store *s);
/* A write committed on its own unless a transaction is already open:
 * begin (OUT: *was_open), then end with the write's rc (ROLLBACK when it
 * failed, else COMMIT; nothing when a transaction was open). */
int bfs_own_begin(bf_store *s, int *was_open);
int bfs_own_end(bf_store *s, int was_open, int rc);
/* Bind text, or NULL for a NULL string. */
void bfs_bind_text(sqlite3_stmt *st, int i, const char *v);

/* guard.c: make a new connection defensive (no triggers, views or trusted
 * schema; no extensions) and install the progress guard. 0 or -ENOTSUP. */
int bfs_harden(bf_store *s);
/* guard.c: 0 when bifocal's tables are plain tables with exactly the expected
 * columns and no expression or partial index; else -EINVAL, message naming
 * the table. */
int bfs_check_schema(bf_store *s);
/* guard.c: the message of a statement the guard ended (interrupt: -EINTR;
 * budget: -ETIMEDOUT); returns the errno. */
int bfs_fail_interrupt(bf_store *s, const char *what);

/* schema.c: check the file is a bifocal database and migrate it. */
int bfs_check_and_migrate(bf_store *s);
/* schema.c: the tables holding rows of one session (delete and gc use it). */
extern const char *const bfs_session_tables[];
extern const size_t bfs_n_session_tables;

/* intern.c: free and forget every interning and reverse cache (rollback, close). */
void bfs_drop_caches(bf_store *s);
/* chunk.c: free the sample buffers (close). */
void bfs_bufs_free(bf_store *s);

#endif
