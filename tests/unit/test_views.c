/* test_views.c — views and exports at their edges: empty sessions, empty
 * stacks, deep recursion, counts past 32 bits in pstats, the gzip/protobuf
 * framing of pprof, diff comparability, missing sessions. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include "check.h"
#include "diff.h"
#include "exports.h"
#include "scratch.h"
#include "store.h"
#include "views.h"

static char dir[256], path[512];
static bf_store *S;

static void reopen(void) {
  bf_err msg = BF_ERR_INIT;
  bf_store_close(S);
  if (bf_store_open(path, BF_STORE_CREATE, &S, &msg)) {
    fprintf(stderr, "reopen: %s\n", msg.msg);
    exit(1);
  }
}

typedef struct mem {
  char *buf;
  size_t len;
  FILE *f;
} mem;

static FILE *mem_open(mem *m) {
  m->buf = NULL;
  m->len = 0;
  m->f = open_memstream(&m->buf, &m->len);
  return m->f;
}

static void mem_close(mem *m) {
  fclose(m->f);
}

static int64_t new_session(const char *kind, const char *clock, double rate) {
  bf_session_info in = {.kind = kind, .clock = clock, .mode = "all", .rate_hz = rate, .status = "complete"};
  int64_t sid;
  CHECK_EQ_INT(bf_store_session_begin(S, &in, &sid), 0);
  return sid;
}

typedef int (*view_fn)(bf_store *, int64_t, const bf_view_opts *, FILE *);
typedef int (*export_fn)(bf_store *, int64_t, const bf_sample_filter *, FILE *);

static void test_empty_session(void) {
  int64_t sid = new_session("sampled", "wall", 1000);
  static const struct {
    const char *name;
    view_fn fn;
    int rc;
  } views[] = {{"functions", bf_view_functions, 0}, {"flame", bf_view_flame, 0},
               {"heatmap", bf_view_heatmap, -ENODATA}, {"gil", bf_view_gil, -ENODATA},
               {"stack", bf_view_stack, 0}};
  for (size_t i = 0; i < sizeof views / sizeof views[0]; i++) {
    mem m;
    bf_view_opts o = {0};
    int rc = views[i].fn(S, sid, &o, mem_open(&m));
    mem_close(&m);
    if (rc != views[i].rc) fprintf(stderr, "view %s: rc %d (%s)\n", views[i].name, rc, bf_store_errmsg(S));
    CHECK_EQ_INT(rc, views[i].rc);
    free(m.buf);
  }
  static const struct {
    const char *name;
    export_fn fn;
    int rc;
  } exports[] = {{"collapsed", bf_export_collapsed, 0}, {"speedscope", bf_export_speedscope, 0},
                 {"pstats", bf_export_pstats, 0},       {"pprof", bf_export_pprof, 0},
                 {"chrome", bf_export_chrome, 0}}; /* sampled: an empty timeline */
  for (size_t i = 0; i < sizeof exports / sizeof exports[0]; i++) {
    mem m;
    int rc = exports[i].fn(S, sid, NULL, mem_open(&m));
    mem_close(&m);
    CHECK_EQ_INT(rc, exports[i].rc);
    if (strcmp(exports[i].name, "pstats") == 0) CHECK(m.len == 2 && memcmp(m.buf, "{0", 2) == 0);
    if (strcmp(exports[i].name, "pprof") == 0) CHECK(m.len > 10 && (unsigned char)m.buf[0] == 0x1f);
    free(m.buf);
  }
  mem m;
  CHECK_EQ_INT(bf_view_functions(S, 9999, NULL, mem_open(&m)), -ENOENT);
  mem_close(&m);
  free(m.buf);
}

static void test_deep_recursion_and_empty_stacks(void) {
  int64_t sid = new_session("sampled", "cpu", 100);
  int64_t fn, frame, th, stack = 0;
  CHECK_EQ_INT(bf_store_intern_function(S, "/r.py", "recurse", 1, &fn), 0);
  CHECK_EQ_INT(bf_store_intern_frame(S, fn, 2, &frame), 0);
  for (int i = 0; i < 3000; i++) CHECK_EQ_INT(bf_store_intern_stack(S, stack, frame, &stack), 0);
  CHECK_EQ_INT(bf_store_intern_thread(S, sid, 7, "T", &th), 0);
  for (int i = 0; i < 10; i++) {
    bf_sample smp = {.thread_id = th, .stack_id = i % 2 ? stack : 0, .ts_ns = i * 10000000LL,
                     .flags = BF_SAMPLE_ON_CPU | BF_SAMPLE_GIL, .count = 1, .weight = 10000000};
    CHECK_EQ_INT(bf_store_sample_add(S, sid, &smp), 0);
  }
  CHECK_EQ_INT(bf_store_flush(S), 0);
  view_fn views[] = {bf_view_functions, bf_view_flame, bf_view_heatmap, bf_view_gil, bf_view_stack};
  for (size_t i = 0; i < sizeof views / sizeof views[0]; i++) {
    mem m;
    bf_view_opts o = {.json = (int)(i % 2)};
    CHECK_EQ_INT(views[i](S, sid, &o, mem_open(&m)), 0);
    mem_close(&m);
    CHECK(m.len > 0);
    free(m.buf);
  }
  /* pstats: recursion counts the outermost activation once (cc) and every frame (nc) */
  mem m;
  CHECK_EQ_INT(bf_export_pstats(S, sid, NULL, mem_open(&m)), 0);
  mem_close(&m);
  /* cc = 5 samples ('i' 5), nc = 5 * 3000 ('i' 15000) follow the key */
  const unsigned char want[] = {'(', 5, 0, 0, 0, 'i', 5, 0, 0, 0, 'i', 0x98, 0x3a, 0, 0};
  CHECK(memmem(m.buf, m.len, want, sizeof want) != NULL);
  free(m.buf);
  /* pprof: gzip member whose protobuf starts with sample_type (field 1, bytes) */
  CHECK_EQ_INT(bf_export_pprof(S, sid, NULL, mem_open(&m)), 0);
  mem_close(&m);
  unsigned char out[1 << 16];
  z_stream z = {0};
  CHECK(inflateInit2(&z, 15 + 16) == Z_OK);
  z.next_in = (Bytef *)m.buf;
  z.avail_in = (uInt)m.len;
  z.next_out = out;
  z.avail_out = sizeof out;
  CHECK(inflate(&z, Z_FINISH) == Z_STREAM_END);
  CHECK(z.total_out > 3000 && out[0] == 0x0a);
  inflateEnd(&z);
  free(m.buf);
}

static void test_pstats_large_counts(void) {
  int64_t sid = new_session("traced", "wall", 0), fn;
  CHECK_EQ_INT(bf_store_intern_function(S, "/big.py", "hot", 3, &fn), 0);
  bf_trace_func tf = {.function_id = fn, .calls = 5000000000LL, .primitive_calls = 5000000000LL,
                      .self_ns = 1, .total_ns = 2, .p50_ns = -1, .p90_ns = -1, .p99_ns = -1, .max_ns = -1};
  CHECK_EQ_INT(bf_store_trace_func_put(S, sid, &tf), 0);
  /* Reopen: this handle's function cache was loaded before `hot` was interned,
   * and bf_store_function_get only reloads ids at or above the cache size. */
  reopen();
  mem m;
  int rc = bf_export_pstats(S, sid, NULL, mem_open(&m));
  if (rc) fprintf(stderr, "pstats: %s\n", bf_store_errmsg(S));
  CHECK_EQ_INT(rc, 0);
  mem_close(&m);
  /* 5e9 as marshal TYPE_LONG: 3 base-2^15 digits, least significant first */
  long long v = 5000000000LL;
  unsigned char want[11] = {'l', 3, 0, 0, 0};
  for (int i = 0; i < 3; i++) {
    want[5 + 2 * i] = (unsigned char)((v >> (15 * i)) & 0xff);
    want[6 + 2 * i] = (unsigned char)(((v >> (15 * i)) & 0x7fff) >> 8);
  }
  CHECK(memmem(m.buf, m.len, want, sizeof want) != NULL);
  free(m.buf);
}

static void test_diff_compatible(void) {
  int64_t a = new_session("sampled", "wall", 1000), b = new_session("sampled", "wall", 1000);
  int64_t c = new_session("sampled", "cpu", 250);
  bf_err why = BF_ERR_INIT;
  CHECK_EQ_INT(bf_diff_compatible(S, a, b, &why), BF_DIFF_COMPARABLE);
  CHECK(why.msg[0] == 0);
  CHECK_EQ_INT(bf_diff_compatible(S, a, c, &why), BF_DIFF_NOT_COMPARABLE);
  CHECK_EQ_INT(why.code, BF_DIFF_NOT_COMPARABLE);
  CHECK(strstr(why.msg, "clock differs (wall vs cpu)") && strstr(why.msg, "rate differs (1000 Hz vs 250 Hz)"));
  CHECK_EQ_INT(bf_diff_compatible(S, a, c, NULL), BF_DIFF_NOT_COMPARABLE);
  CHECK(bf_diff_compatible(S, a, 424242, &why) < 0);
}

int main(void) {
  snprintf(dir, sizeof dir, "/tmp/bf-test-views-XXXXXX");
  if (!mkdtemp(dir)) return 1;
  snprintf(path, sizeof path, "%s/v.db", dir);
  bf_err msg = BF_ERR_INIT;
  if (bf_store_open(path, BF_STORE_CREATE, &S, &msg)) return 1;
  test_empty_session();
  test_deep_recursion_and_empty_stacks();
  test_pstats_large_counts();
  test_diff_compatible();
  bf_store_close(S);
  unlink_db(path);
  rmdir(dir);
  return CHECK_DONE();
}
