/* copy.h — copy one session from one store into another, with fresh ids and an
 * optional rewrite of what it reveals (used by redact, sealed export/import).
 */
#ifndef BF_COPY_H
#define BF_COPY_H

#include "store.h"

typedef struct bf_copy_opts {
  /* Rewrite a function's file name. Returns a malloc'd string (the caller of
   * the hook frees it) or NULL on out-of-memory. NULL hook = keep as is. */
  char *(*map_file)(void *ud, const char *file);
  /* Rewrite a function's qualname (same contract as map_file). */
  char *(*map_qualname)(void *ud, const char *qualname);
  /* Rewrite the session's extra_json (malloc'd result, NULL = out of memory).
   * NULL hook = keep as is. */
  char *(*map_json)(void *ud, const char *json);
  void *ud;
  int drop_host_command; /* store host and command line as unknown */
  int mark_redacted;     /* set the copy's redacted flag */
  const char *label;     /* non-NULL: replaces the label */
  int64_t expires_at_ns; /* non-zero: replaces the expiry */
} bf_copy_opts;

/* Copy session_id of src (samples, threads, traced functions and edges, call
 * records, metadata) into dst as a new session; every number is kept, ids are
 * re-interned in dst, parent links are dropped. All or nothing: on error dst is
 * rolled back and the message is on dst's handle (or copied there from src).
 * o may be NULL. OUT: *new_id. */
int bf_session_copy(bf_store *src, int64_t session_id, bf_store *dst, const bf_copy_opts *o,
                    int64_t *new_id);


/* Write session_id of src into a new database file at out_path that holds
 * that session only (via bf_session_copy with o). The file is built in a
 * temporary beside out_path (mode 0600), compacted with secure_delete and
 * VACUUM, left in rollback-journal mode (no -wal/-shm files), then linked into
 * place: out_path must not exist, and nothing is left behind on failure.
 * When meta_redacted is set, the file's meta table says redacted=1.
 * Errors go on src's handle. OUT: *new_id (may be NULL). */
int bf_session_extract(bf_store *src, int64_t session_id, const char *out_path, const bf_copy_opts *o,
                       int64_t *new_id);

#endif
