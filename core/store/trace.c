/* trace.c — traced rows: per-function and per-edge totals, focus-mode call
 * records. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store_impl.h"

int bf_store_trace_func_put(bf_store *s, int64_t session_id, const bf_trace_func *tf) {
  int rc = bfs_ensure_txn(s);
  if (rc) return rc;
  sqlite3_stmt *st = bfs_stmt(s, ST_TF_PUT);
  if (!st) return -EIO;
  int64_t v[] = {session_id, tf->function_id, tf->calls, tf->primitive_calls, tf->resumes, tf->self_ns,
                 tf->total_ns, tf->p50_ns, tf->p90_ns, tf->p99_ns, tf->max_ns, tf->records_kept,
                 tf->records_dropped};
  for (int i = 0; i < 13; i++) sqlite3_bind_int64(st, i + 1, v[i]);
  if (sqlite3_step(st) != SQLITE_DONE) return bfs_fail_sql(s, "write traced function");
  sqlite3_reset(st);
  return 0;
}

int bf_store_trace_edge_put(bf_store *s, int64_t session_id, const bf_trace_edge *te) {
  int rc = bfs_ensure_txn(s);
  if (rc) return rc;
  sqlite3_stmt *st = bfs_stmt(s, ST_TE_PUT);
  if (!st) return -EIO;
  int64_t v[] = {session_id, te->caller_function_id, te->callee_function_id, te->calls, te->primitive_calls,
                 te->self_ns, te->total_ns};
  for (int i = 0; i < 7; i++) sqlite3_bind_int64(st, i + 1, v[i]);
  if (sqlite3_step(st) != SQLITE_DONE) return bfs_fail_sql(s, "write traced edge");
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
    return bfs_fail_sql(s, "prepare");
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
  return rc == SQLITE_DONE ? 0 : bfs_fail_sql(s, "read traced functions");
}

int bf_store_trace_edges_foreach(bf_store *s, int64_t session_id, bf_trace_edge_fn fn, void *ud) {
  sqlite3_stmt *st = NULL;
  if (sqlite3_prepare_v2(s->db,
                         "SELECT caller_id,callee_id,calls,primitive_calls,self_ns,total_ns FROM trace_edges "
                         "WHERE session_id=?1 ORDER BY caller_id, callee_id",
                         -1, &st, NULL) != SQLITE_OK)
    return bfs_fail_sql(s, "prepare");
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
  return rc == SQLITE_DONE ? 0 : bfs_fail_sql(s, "read traced edges");
}

int bf_store_call_record_add(bf_store *s, int64_t session_id, const bf_call_record *r) {
  int rc = bfs_ensure_txn(s);
  if (rc) return rc;
  sqlite3_stmt *st = bfs_stmt(s, ST_CR_INS);
  if (!st) return -EIO;
  sqlite3_bind_int64(st, 1, session_id);
  sqlite3_bind_int64(st, 2, r->function_id);
  sqlite3_bind_int64(st, 3, r->thread_id);
  sqlite3_bind_int64(st, 4, r->start_ns);
  sqlite3_bind_int64(st, 5, r->duration_ns);
  sqlite3_bind_int(st, 6, r->depth);
  sqlite3_bind_int64(st, 7, r->parent_function_id);
  if (sqlite3_step(st) != SQLITE_DONE) return bfs_fail_sql(s, "write call record");
  sqlite3_reset(st);
  return 0;
}

int bf_store_call_records_foreach(bf_store *s, int64_t session_id, bf_call_record_fn fn, void *ud) {
  sqlite3_stmt *st = NULL;
  if (sqlite3_prepare_v2(s->db,
                         "SELECT function_id,thread_id,start_ns,duration_ns,depth,parent_function_id FROM "
                         "call_records WHERE session_id=?1 ORDER BY start_ns, id",
                         -1, &st, NULL) != SQLITE_OK)
    return bfs_fail_sql(s, "prepare");
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
  return rc == SQLITE_DONE ? 0 : bfs_fail_sql(s, "read call records");
}
