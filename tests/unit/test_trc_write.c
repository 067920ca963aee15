/* test_trc_write.c — the tracer's store writer: same-identity functions and
 * edges are merged, focus records give percentiles, threads and metadata land. */
#include <errno.h>
#include <stdio.h>
#include <sqlite3.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "check_db.h"
#include "scratch.h"
#include "store.h"
#include "trace_memory.h"
#include "trc_int.h"

typedef struct {
  int n;
  bf_trace_func f[8];
} funcs_seen;

static int on_func(void *ud, const bf_trace_func *tf) {
  funcs_seen *s = ud;
  if (s->n < 8) s->f[s->n++] = *tf;
  return 0;
}

static int on_edge(void *ud, const bf_trace_edge *te) {
  int *n = ud;
  (*n)++;
  CHECK(te->callee_function_id > 0);
  if (te->caller_function_id != 0) CHECK_EQ_INT(te->calls, 7); /* 3 + 4 merged */
  return 0;
}

typedef struct {
  int n;
  bf_trace_memory m[8];
} mem_seen;

static int on_mem(void *ud, const bf_trace_memory *m) {
  mem_seen *s = ud;
  if (s->n < 8) s->m[s->n++] = *m;
  return 0;
}

static int on_top(void *ud, const bf_trace_memory_top *t) {
  int *n = ud;
  (*n)++;
  if (t->rank == 1) {
    CHECK_EQ_INT(t->size_bytes, 4000);
    CHECK_EQ_INT(t->nstack, 2);
    if (t->nstack == 2) CHECK(t->stack[1] == t->function_id);
  } else {
    CHECK_EQ_INT(t->nstack, 0);
  }
  return 0;
}

static int on_top_any(void *ud, const bf_trace_memory_top *t) {
  (void)t;
  (*(int *)ud)++;
  return 0;
}

static void test_percentile(void) {
  int64_t v[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
  CHECK_EQ_INT(bf_trc_percentile(v, 10, 0.5), 5);
  CHECK_EQ_INT(bf_trc_percentile(v, 10, 0.9), 9);
  CHECK_EQ_INT(bf_trc_percentile(v, 10, 0.99), 10);
  CHECK_EQ_INT(bf_trc_percentile(v, 1, 0.5), 1);
  CHECK_EQ_INT(bf_trc_percentile(v, 0, 0.5), -1);
}

static void test_write(const char *path) {
  bf_trc_func funcs[4];
  memset(funcs, 0, sizeof funcs);
  /* 1 and 2: two code objects with one identity; 3: a focused builtin-free fn */
  funcs[1] = (bf_trc_func){.file = "<string>", .qualname = "<module>", .firstlineno = 1,
                           .calls = 2, .primitive_calls = 2, .self_ns = 100, .total_ns = 150};
  funcs[2] = (bf_trc_func){.file = "<string>", .qualname = "<module>", .firstlineno = 1,
                           .calls = 3, .primitive_calls = 3, .self_ns = 10, .total_ns = 20};
  funcs[3] = (bf_trc_func){.file = "/app/x.py", .qualname = "C.parse", .firstlineno = 10,
                           .calls = 7, .primitive_calls = 7, .self_ns = 700, .total_ns = 900,
                           .focus = 1, .records_kept = 4, .records_dropped = 3};
  bf_trc_edge edges[4];
  memset(edges, 0, sizeof edges);
  edges[1] = (bf_trc_edge){.caller = 0, .callee = 1, .calls = 2, .primitive_calls = 2};
  edges[2] = (bf_trc_edge){.caller = 1, .callee = 3, .calls = 3, .primitive_calls = 3};
  edges[3] = (bf_trc_edge){.caller = 2, .callee = 3, .calls = 4, .primitive_calls = 4};
  bf_trc_rec recs[4] = {{3, 1, 0, 5, 40}, {3, 1, 0, 9, 10}, {3, 2, 1, 20, 30}, {3, 2, 1, 50, 20}};
  bf_trc_thread_info threads[2] = {{1000, "MainThread"}, {1001, NULL}};
  /* trace --memory: 1 and 2 (one identity) sum; edges 2 and 3 share a callee
   * but not a caller; root (0) allocations keep function id 0 */
  bf_trc_memstat mf[4] = {{1, 10, 0, 0}, {2, 200, 1, 100}, {3, 30, 3, 30}, {5, 5000, 1, 1000}};
  bf_trc_memstat me[4] = {{0, 0, 0, 0}, {2, 20, 0, 0}, {4, 4000, 1, 1000}, {1, 1000, 0, 0}};
  uint32_t top_stack[2] = {1, 3};
  bf_trc_memtop top[2] = {{4000, 3, 2, top_stack}, {16, 1, 0, NULL}};
  bf_trc_mem mem = {mf, 4, me, 4, top, 2};
  bf_trc_result res = {funcs, 4, edges, 4, recs, 4, threads, 2, &mem};
  bf_trc_meta meta = {0};
  meta.clock = "wall";
  meta.mode = "focus";
  meta.status = "complete";
  meta.start_ns = 1;
  meta.duration_ns = 1000;
  meta.extra_json = "{\"mismatches\":0}";
  int64_t sid = 0;
  bf_err err = BF_ERR_INIT;
  CHECK_EQ_INT(bf_trc_write(path, &res, &meta, &sid, &err), 0);
  CHECK(sid > 0);

  bf_store *s = NULL;
  CHECK_EQ_INT(bf_store_open(path, BF_STORE_READONLY, &s, NULL), 0);
  if (!s) return;
  funcs_seen seen = {0};
  CHECK_EQ_INT(bf_store_trace_funcs_foreach(s, sid, on_func, &seen), 0);
  CHECK_EQ_INT(seen.n, 2);
  for (int i = 0; i < seen.n; i++) {
    bf_function_ref ref;
    CHECK_EQ_INT(bf_store_function_get(s, seen.f[i].function_id, &ref), 0);
    if (strcmp(ref.qualname, "<module>") == 0) {
      CHECK_EQ_INT(seen.f[i].calls, 5);
      CHECK_EQ_INT(seen.f[i].self_ns, 110);
      CHECK_EQ_INT(seen.f[i].p50_ns, -1);
    } else {
      CHECK(strcmp(ref.qualname, "C.parse") == 0);
      CHECK_EQ_INT(seen.f[i].p50_ns, 20);
      CHECK_EQ_INT(seen.f[i].p90_ns, 40);
      CHECK_EQ_INT(seen.f[i].max_ns, 40);
      CHECK_EQ_INT(seen.f[i].records_kept, 4);
      CHECK_EQ_INT(seen.f[i].records_dropped, 3);
    }
  }
  mem_seen ms = {0};
  CHECK_EQ_INT(bf_store_trace_memory_foreach(s, sid, on_mem, &ms), 0);
  CHECK_EQ_INT(ms.n, 3); /* root, <module> (1+2 summed), C.parse */
  CHECK_EQ_INT(ms.m[0].function_id, 0);
  CHECK_EQ_INT(ms.m[0].allocs, 1);
  for (int i = 1; i < ms.n; i++) {
    bf_function_ref ref;
    CHECK_EQ_INT(bf_store_function_get(s, ms.m[i].function_id, &ref), 0);
    if (strcmp(ref.qualname, "<module>") == 0) {
      CHECK_EQ_INT(ms.m[i].allocs, 5);
      CHECK_EQ_INT(ms.m[i].alloc_bytes, 230);
      CHECK_EQ_INT(ms.m[i].live_count, 1);
      CHECK_EQ_INT(ms.m[i].live_bytes, 100);
    } else {
      CHECK_EQ_INT(ms.m[i].live_bytes, 4000);
      CHECK_EQ_INT(ms.m[i].live_count, 4);
    }
  }
  ms.n = 0;
  CHECK_EQ_INT(bf_store_trace_memory_edges_foreach(s, sid, on_mem, &ms), 0);
  CHECK_EQ_INT(ms.n, 2); /* root-><module>; <module>->C.parse (edges 2 and 3: one identity pair) */
  if (ms.n == 2) CHECK_EQ_INT(ms.m[1].allocs, 5);
  int ntop = 0;
  CHECK_EQ_INT(bf_store_trace_memory_top_foreach(s, sid, on_top, &ntop), 0);
  CHECK_EQ_INT(ntop, 2);
  CHECK_EQ_INT(bf_store_trace_memory_has(s, sid), 1);
  CHECK_EQ_INT(bf_store_trace_memory_has(s, sid + 1), 0);
  int nedges = 0;
  CHECK_EQ_INT(bf_store_trace_edges_foreach(s, sid, on_edge, &nedges), 0);
  CHECK_EQ_INT(nedges, 2);
  bf_thread_ref *th = NULL;
  size_t nth = 0;
  CHECK_EQ_INT(bf_store_threads(s, sid, &th, &nth), 0);
  CHECK_EQ_INT(nth, 2);
  bf_thread_refs_free(th, nth);
  bf_session_info *info = NULL;
  CHECK_EQ_INT(bf_store_session_get(s, sid, &info), 0);
  if (info) {
    CHECK(strcmp(info->kind, "traced") == 0 && strcmp(info->mode, "focus") == 0);
    CHECK(strcmp(info->status, "complete") == 0);
  }
  bf_session_info_free(info);
  bf_store_close(s);

  /* a stack text altered outside bifocal is refused, not misread */
  static const char *const bad[] = {"1,,2", "x", "1,", ",1", "99999999999999999999"};
  for (size_t k = 0; k < sizeof bad / sizeof *bad; k++) {
    sqlite3 *db = NULL;
    CHECK_EQ_INT(sqlite3_open(path, &db), SQLITE_OK);
    char sql[128];
    snprintf(sql, sizeof sql, "UPDATE trace_memory_top SET stack='%s' WHERE rank=1", bad[k]);
    CHECK_EQ_INT(sqlite3_exec(db, sql, NULL, NULL, NULL), SQLITE_OK);
    sqlite3_close(db);
    CHECK_EQ_INT(bf_store_open(path, BF_STORE_READONLY, &s, NULL), 0);
    if (!s) break;
    int nt = 0;
    CHECK_EQ_INT(bf_store_trace_memory_top_foreach(s, sid, on_top_any, &nt), -EINVAL);
    CHECK(strstr(bf_store_errmsg(s), "not a list of function ids") != NULL);
    bf_store_close(s);
  }

  /* a missing directory fails cleanly with a message */
  CHECK(bf_trc_write("/nonexistent/dir/x.db", &res, &meta, &sid, &err) < 0);
  CHECK(err.code < 0 && strstr(err.msg, "/nonexistent/dir/x.db: ") == err.msg);

  check_integrity(path);
}

int main(void) {
  char path[] = "/tmp/bf_test_trc_XXXXXX";
  int fd = mkstemp(path);
  if (fd < 0) return 1;
  close(fd);
  unlink(path);
  test_percentile();
  test_write(path);
  unlink_db(path);
  return CHECK_DONE();
}
