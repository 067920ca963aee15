/* trace_memory.c — the rows `trace --memory` writes and what reads them back:
 * per-function and per-edge allocation totals, the largest live blocks. */
#include "trace_memory.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store_impl.h"

#define TM_MAX_STACK 4096 /* frames kept per top block; longer stacks are refused on read */

static int tm_put(bf_store *s, const char *sql, const int64_t *v, int n, const char *what) {
  int rc = bfs_ensure_txn(s);
  if (rc) return rc;
  sqlite3_stmt *st = NULL;
  if (sqlite3_prepare_v2(s->db, sql, -1, &st, NULL) != SQLITE_OK) return bfs_fail_sql(s, what);
  for (int i = 0; i < n; i++) sqlite3_bind_int64(st, i + 1, v[i]);
  rc = sqlite3_step(st) == SQLITE_DONE ? 0 : bfs_fail_sql(s, what);
  sqlite3_finalize(st);
  return rc;
}

int bf_store_trace_memory_put(bf_store *s, int64_t session_id, const bf_trace_memory *m) {
  int64_t v[] = {session_id, m->function_id, m->allocs, m->alloc_bytes, m->frees,
                 m->freed_bytes, m->live_count, m->live_bytes};
  return tm_put(s,
                "INSERT OR REPLACE INTO trace_memory(session_id,function_id,allocs,alloc_bytes,frees,"
                "freed_bytes,live_count,live_bytes) VALUES(?1,?2,?3,?4,?5,?6,?7,?8)",
                v, 8, "write traced memory");
}

int bf_store_trace_memory_edge_put(bf_store *s, int64_t session_id, const bf_trace_memory *m) {
  int64_t v[] = {session_id, m->caller_function_id, m->function_id, m->allocs, m->alloc_bytes,
                 m->frees, m->freed_bytes, m->live_count, m->live_bytes};
  return tm_put(s,
                "INSERT OR REPLACE INTO trace_memory_edges(session_id,caller_id,callee_id,allocs,"
                "alloc_bytes,frees,freed_bytes,live_count,live_bytes) VALUES(?1,?2,?3,?4,?5,?6,?7,?8,?9)",
                v, 9, "write traced memory edge");
}

int bf_store_trace_memory_top_put(bf_store *s, int64_t session_id, const bf_trace_memory_top *t) {
  int rc = bfs_ensure_txn(s);
  if (rc) return rc;
  size_t n = t->nstack > TM_MAX_STACK ? TM_MAX_STACK : t->nstack;
  char *text = malloc(n * 21 + 1);
  if (!text) return -ENOMEM;
  size_t o = 0;
  text[0] = 0;
  for (size_t i = 0; i < n; i++)
    o += (size_t)snprintf(text + o, 22, "%s%lld", i ? "," : "", (long long)t->stack[i]);
  sqlite3_stmt *st = NULL;
  if (sqlite3_prepare_v2(s->db,
                         "INSERT OR REPLACE INTO trace_memory_top(session_id,rank,size_bytes,function_id,"
                         "stack) VALUES(?1,?2,?3,?4,?5)",
                         -1, &st, NULL) != SQLITE_OK) {
    free(text);
    return bfs_fail_sql(s, "write traced memory block");
  }
  int64_t v[] = {session_id, t->rank, t->size_bytes, t->function_id};
  for (int i = 0; i < 4; i++) sqlite3_bind_int64(st, i + 1, v[i]);
  sqlite3_bind_text(st, 5, text, (int)o, SQLITE_TRANSIENT);
  rc = sqlite3_step(st) == SQLITE_DONE ? 0 : bfs_fail_sql(s, "write traced memory block");
  sqlite3_finalize(st);
  free(text);
  return rc;
}

static int tm_rows(bf_store *s, int64_t session_id, const char *sql, int edges, bf_trace_memory_fn fn,
                   void *ud) {
  sqlite3_stmt *st = NULL;
  if (sqlite3_prepare_v2(s->db, sql, -1, &st, NULL) != SQLITE_OK) return bfs_fail_sql(s, "prepare");
  sqlite3_bind_int64(st, 1, session_id);
  int rc;
  while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
    bf_trace_memory m = {0};
    int c = 0;
    if (edges) m.caller_function_id = sqlite3_column_int64(st, c++);
    int64_t *f[] = {&m.function_id, &m.allocs, &m.alloc_bytes, &m.frees, &m.freed_bytes,
                    &m.live_count, &m.live_bytes};
    for (int i = 0; i < 7; i++) *f[i] = sqlite3_column_int64(st, c++);
    int r = fn(ud, &m);
    if (r) {
      sqlite3_finalize(st);
      return r;
    }
  }
  sqlite3_finalize(st);
  return rc == SQLITE_DONE ? 0 : bfs_fail_sql(s, "read traced memory");
}

int bf_store_trace_memory_foreach(bf_store *s, int64_t session_id, bf_trace_memory_fn fn, void *ud) {
  return tm_rows(s, session_id,
                 "SELECT function_id,allocs,alloc_bytes,frees,freed_bytes,live_count,live_bytes FROM "
                 "trace_memory WHERE session_id=?1 ORDER BY function_id",
                 0, fn, ud);
}

int bf_store_trace_memory_edges_foreach(bf_store *s, int64_t session_id, bf_trace_memory_fn fn, void *ud) {
  return tm_rows(s, session_id,
                 "SELECT caller_id,callee_id,allocs,alloc_bytes,frees,freed_bytes,live_count,live_bytes "
                 "FROM trace_memory_edges WHERE session_id=?1 ORDER BY caller_id,callee_id",
                 1, fn, ud);
}

/* Parse "id,id,..." (untrusted text) into v[0..cap). OUT: *n. -EINVAL when malformed. */
static int tm_parse_stack(const unsigned char *text, int len, int64_t *v, size_t cap, size_t *n) {
  size_t k = 0;
  int i = 0;
  while (i < len) {
    if (k == cap) return -EINVAL;
    int64_t x = 0;
    int digits = 0;
    while (i < len && text[i] >= '0' && text[i] <= '9' && digits < 18) x = x * 10 + (text[i++] - '0'), digits++;
    if (!digits) return -EINVAL;
    v[k++] = x;
    if (i < len && text[i++] != ',') return -EINVAL;
    if (i == len && text[len - 1] == ',') return -EINVAL;
  }
  *n = k;
  return 0;
}

int bf_store_trace_memory_top_foreach(bf_store *s, int64_t session_id, bf_trace_memory_top_fn fn,
                                      void *ud) {
  sqlite3_stmt *st = NULL;
  if (sqlite3_prepare_v2(s->db,
                         "SELECT rank,size_bytes,function_id,stack FROM trace_memory_top WHERE "
                         "session_id=?1 ORDER BY rank",
                         -1, &st, NULL) != SQLITE_OK)
    return bfs_fail_sql(s, "prepare");
  sqlite3_bind_int64(st, 1, session_id);
  int64_t *frames = malloc(TM_MAX_STACK * sizeof *frames);
  if (!frames) {
    sqlite3_finalize(st);
    return -ENOMEM;
  }
  int rc;
  while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
    bf_trace_memory_top t = {0};
    t.rank = sqlite3_column_int64(st, 0);
    t.size_bytes = sqlite3_column_int64(st, 1);
    t.function_id = sqlite3_column_int64(st, 2);
    const unsigned char *text = sqlite3_column_text(st, 3);
    int len = sqlite3_column_bytes(st, 3);
    if (text && tm_parse_stack(text, len, frames, TM_MAX_STACK, &t.nstack) < 0) {
      rc = bf_store_fail(s, -EINVAL,
                         "database '%s': trace_memory_top of session %lld rank %lld: the stack is not "
                         "a list of function ids (the file was altered outside bifocal)",
                         s->path, (long long)session_id, (long long)t.rank);
      goto out;
    }
    t.stack = frames;
    int r = fn(ud, &t);
    if (r) {
      rc = r;
      goto out;
    }
  }
  rc = rc == SQLITE_DONE ? 0 : bfs_fail_sql(s, "read traced memory blocks");
out:
  sqlite3_finalize(st);
  free(frames);
  return rc;
}

int bf_store_trace_memory_has(bf_store *s, int64_t session_id) {
  sqlite3_stmt *st = NULL;
  if (sqlite3_prepare_v2(s->db, "SELECT 1 FROM trace_memory WHERE session_id=?1 LIMIT 1", -1, &st,
                         NULL) != SQLITE_OK)
    return bfs_fail_sql(s, "prepare");
  sqlite3_bind_int64(st, 1, session_id);
  int rc = sqlite3_step(st);
  int out = rc == SQLITE_ROW ? 1 : rc == SQLITE_DONE ? 0 : bfs_fail_sql(s, "read traced memory");
  sqlite3_finalize(st);
  return out;
}
