/* fuzz_store.c — untrusted input into the store (#32), two targets:
 *  - import arithmetic: collapsed/austin text whose counts, metrics and
 *    headers sit near and past the bounds (10^15 counts, 10^18 ns, 18-digit
 *    durations) through bf_import_collapsed; every imported session must
 *    have non-negative weights whose sum fits int64, and a sane duration;
 *  - the database opener: a valid bifocal database altered by hostile SQL
 *    (views, triggers, generated columns, expression indexes, renamed and
 *    dropped tables) and then by flipped bytes, opened from memory with
 *    bf_store_open_image and read through (sessions, samples, threads,
 *    traced rows, integrity check); every open and read must finish fast.
 * Built two ways, as fuzz_sampler.c: with -DBF_LIBFUZZER a libFuzzer target;
 * otherwise main(N) runs N seeded inputs (the meson test `store_fuzz`; run
 * it under -Db_sanitize=address,undefined for the real check). */
#include <errno.h>
#include <sqlite3.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "import.h"
#include "store.h"

#define SLOW_S 2.0 /* an open or a read of a hostile image must end before this */

static char text_path[64];
static unsigned char *base_img;
static size_t base_len;

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + t.tv_nsec / 1e9;
}

static void fail(const char *what) {
  fprintf(stderr, "fuzz_store: %s\n", what);
  abort();
}

/* ---- 1: import arithmetic ---------------------------------------------------------- */

typedef struct sums {
  int64_t weight, count;
  int overflow, negative;
} sums;

static int add_sample(void *ud, const bf_sample *smp) {
  sums *s = ud;
  if (smp->weight < 0) s->negative = 1;
  if (__builtin_add_overflow(s->weight, smp->weight, &s->weight)) s->overflow = 1;
  if (__builtin_add_overflow(s->count, (int64_t)smp->count, &s->count)) s->overflow = 1;
  return 0;
}

static void run_import(const uint8_t *data, size_t n) {
  FILE *f = fopen(text_path, "wb");
  if (!f) fail("cannot write the input file");
  fwrite(data, 1, n, f);
  fclose(f);
  bf_store *s = NULL;
  bf_err msg = BF_ERR_INIT;
  if (bf_store_open_memory(&s, &msg)) fail("cannot open a memory database");
  int64_t id = 0;
  bf_import_opts io = {.label = "fuzz"};
  if (bf_import_collapsed(s, text_path, &io, &id) == 0) {
    sums t = {0};
    if (bf_store_samples_foreach(s, id, NULL, add_sample, &t)) fail("an imported session does not read back");
    if (t.overflow || t.negative) fail("imported weights overflow or are negative");
    bf_session_info *info = NULL;
    if (bf_store_session_get(s, id, &info) || !info) fail("the imported session has no row");
    if (info->duration_ns < 0 || info->samples < 0 || info->samples > 1000000000000000LL)
      fail("the imported session's duration or sample count is out of bounds");
    if (t.count != info->samples) fail("the session's sample count is not the sum of its samples");
    bf_session_info_free(info);
  } else if (!bf_store_errmsg(s)[0] || strchr(bf_store_errmsg(s), '\n')) {
    fail("a refused import has no one-line message");
  }
  bf_store_close(s);
}

static uint32_t rnd(uint64_t *rng) {
  *rng = *rng * 6364136223846793005ULL + 1442695040888963407ULL;
  return (uint32_t)(*rng >> 33);
}
#define RND() rnd(rng)

/* Text from random bytes: lines whose numbers sit near the bounds. */
static size_t gen_import(uint64_t *rng, char *buf, size_t cap) {
  static const char *const nums[] = {"0", "1", "100", "999999999999999", "1000000000000000", "1000000000000001",
                                     "4294967295", "4294967296", "9223372036854775", "9300000000000000",
                                     "999999999999999999", "123456789012345678", "-5", "1e30", "18446744073709551615"};
  static const char *const heads[] = {"# austin: 3.6.0\n", "# mode: cpu\n", "# mode: wall\n", "# interval: ",
                                      "# duration: ", "# python: 3.12.1\n", ""};
  size_t o = 0;
  int austin = RND() % 3; /* 0 FlameGraph, 1 austin 3, 2 austin 1.x (no header) */
  if (austin == 1) o += (size_t)snprintf(buf + o, cap - o, "# austin: 3.6.0\n");
  int lines = 1 + RND() % 12;
  for (int l = 0; l < lines && o + 256 < cap; l++) {
    const char *h = heads[RND() % (sizeof heads / sizeof heads[0])];
    if (RND() % 4 == 0 && h[0] && h[strlen(h) - 1] == ' ')
      o += (size_t)snprintf(buf + o, cap - o, "%s%s\n", h, nums[RND() % (sizeof nums / sizeof nums[0])]);
    const char *num = nums[RND() % (sizeof nums / sizeof nums[0])];
    if (austin == 2)
      o += (size_t)snprintf(buf + o, cap - o, "%sThread 7f%x;main (/a.py);L%u;f%u (/a.py:%u)%s %s%s\n",
                            RND() % 2 ? "Process 9;" : "", RND(), RND() % 9, RND() % 4, RND() % 9,
                            RND() % 3 ? "" : ";L7", num, RND() % 3 ? "" : " 12 0");
    else if (austin)
      o += (size_t)snprintf(buf + o, cap - o, "P1;T1;/a.py:main:1;/a.py:f%u:%u %s%s\n", RND() % 4, RND() % 9, num,
                            RND() % 3 ? "" : ",1,0");
    else
      o += (size_t)snprintf(buf + o, cap - o, "main (/a.py:1:2);f%u (/a.py:%u:%u) %s\n", RND() % 4, RND() % 9,
                            RND() % 9, num);
  }
  return o;
}

/* ---- 2: the database opener ---------------------------------------------------------- */

static const char *const hostile_sql[] = {
    "ALTER TABLE sessions RENAME TO s_real; CREATE VIEW sessions AS WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL "
    "SELECT x+1 FROM c) SELECT s_real.* FROM s_real, c WHERE c.x<0;",
    "ALTER TABLE strings RENAME TO t_real; CREATE VIEW strings AS WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL "
    "SELECT x+1 FROM c) SELECT t_real.* FROM t_real, c WHERE c.x<0;",
    "CREATE TRIGGER t1 AFTER INSERT ON audit BEGIN DELETE FROM sessions; END;",
    "ALTER TABLE meta ADD COLUMN g TEXT GENERATED ALWAYS AS (printf('%.*c', 100000000, 'x')) VIRTUAL;",
    "CREATE INDEX e1 ON stacks(abs(frame_id));",
    "CREATE INDEX e2 ON frames(line) WHERE line > 0;",
    "ALTER TABLE threads ADD COLUMN x INTEGER;",
    "ALTER TABLE audit DROP COLUMN argv;",
    "DROP TABLE call_records;",
    "ALTER TABLE frames RENAME TO frames2; CREATE TABLE frames(id, function_id, line);",
    "UPDATE stacks SET parent_id = id;",
    "UPDATE sample_chunks SET data = randomblob(64);",
    "UPDATE sample_chunks SET n_records = 2000000000, n_samples = -1;",
    "UPDATE sessions SET extra_json = '{\"a\":' || replace(hex(zeroblob(2000)), '00', '[') ;",
    "INSERT INTO sessions(kind, status, created_ns) VALUES('sampled', 'complete', 1);",
    "UPDATE functions SET file_id = 999999, qualname_id = -3;",
    "PRAGMA user_version = 7;",
    "PRAGMA application_id = 0;",
    "DELETE FROM strings;",
    "CREATE TABLE evil(x); CREATE TRIGGER t2 BEFORE DELETE ON sessions BEGIN SELECT RAISE(IGNORE); END;",
};
#define N_SQL (sizeof hostile_sql / sizeof hostile_sql[0])

/* The base image altered by the statements picked by data, then by flipped
 * bytes. OUT: *out (sqlite3_malloc'd), *len. 0 or -1. */
static int mutate(const uint8_t *data, size_t n, unsigned char **out, size_t *len) {
  sqlite3 *db = NULL;
  if (sqlite3_open(":memory:", &db) != SQLITE_OK) return -1;
  unsigned char *copy = sqlite3_malloc64(base_len);
  if (!copy) return -1;
  memcpy(copy, base_img, base_len);
  if (sqlite3_deserialize(db, "main", copy, (sqlite3_int64)base_len, (sqlite3_int64)base_len,
                          SQLITE_DESERIALIZE_FREEONCLOSE | SQLITE_DESERIALIZE_RESIZEABLE) != SQLITE_OK) {
    sqlite3_close(db);
    return -1;
  }
  size_t i = 0;
  for (; i < n && i < 4 && data[i] < 2 * N_SQL; i++)
    if (data[i] < N_SQL) sqlite3_exec(db, hostile_sql[data[i]], NULL, NULL, NULL);
  sqlite3_int64 sz = 0;
  unsigned char *img = sqlite3_serialize(db, "main", &sz, 0);
  sqlite3_close(db);
  if (!img || sz < 100) {
    sqlite3_free(img);
    return -1;
  }
  /* then pairs (offset, xor) over the file */
  for (; i + 2 < n; i += 3) {
    size_t off = ((size_t)data[i] << 8 | data[i + 1]) % (size_t)sz;
    img[off] ^= data[i + 2];
  }
  *out = img;
  *len = (size_t)sz;
  return 0;
}

static int count_sample(void *ud, const bf_sample *smp) {
  (void)smp;
  ++*(int64_t *)ud;
  return 0;
}

static int count_tf(void *ud, const bf_trace_func *tf) {
  (void)tf;
  ++*(int64_t *)ud;
  return 0;
}

static void timed(double t0, const char *what) {
  if (now_s() - t0 > SLOW_S) {
    fprintf(stderr, "fuzz_store: %s of a hostile image took %.1f s\n", what, now_s() - t0);
    abort();
  }
}

static void run_opener(const uint8_t *data, size_t n) {
  unsigned char *img = NULL;
  size_t len = 0;
  if (mutate(data, n, &img, &len)) return;
  unsigned char *buf = bf_store_image_buf_alloc(len);
  if (!buf) fail("out of memory");
  memcpy(buf, img, len);
  sqlite3_free(img);
  bf_store *s = NULL;
  bf_err msg = BF_ERR_INIT;
  double t0 = now_s();
  int rc = bf_store_open_image(buf, len, "fuzz.bfs", &s, &msg);
  timed(t0, "the open");
  if (rc) {
    if (!msg.msg[0] || strchr(msg.msg, '\n')) fail("a refused open has no one-line message");
    return;
  }
  bf_session_info **list = NULL;
  size_t ns = 0;
  t0 = now_s();
  if (bf_store_session_list(s, &list, &ns) == 0) {
    for (size_t k = 0; k < ns && k < 4; k++) {
      int64_t c = 0;
      bf_store_samples_foreach(s, list[k]->id, NULL, count_sample, &c);
      bf_store_trace_funcs_foreach(s, list[k]->id, count_tf, &c);
      bf_thread_ref *t = NULL;
      size_t nt = 0;
      if (bf_store_threads(s, list[k]->id, &t, &nt) == 0) bf_thread_refs_free(t, nt);
    }
    for (size_t k = 0; k < ns; k++) bf_session_info_free(list[k]);
    free(list);
  }
  timed(t0, "reading");
  t0 = now_s();
  bf_store_check_untrusted(s);
  timed(t0, "the integrity check");
  bf_store_close(s);
}

/* ---- setup ------------------------------------------------------------------------ */

static void setup(void) {
  snprintf(text_path, sizeof text_path, "/tmp/bf-fuzz-store-%d.txt", (int)getpid());
  bf_store *s = NULL;
  bf_err msg = BF_ERR_INIT;
  if (bf_store_open_memory(&s, &msg)) fail("cannot open a memory database");
  bf_session_info si = {.kind = "sampled", .clock = "wall", .mode = "all", .status = "complete",
                        .extra_json = "{\"a\":1}"};
  int64_t sid, fn, fr, st, th;
  if (bf_store_session_begin(s, &si, &sid) || bf_store_intern_function(s, "/srv/app.py", "work", 10, &fn) ||
      bf_store_intern_frame(s, fn, 12, &fr) || bf_store_intern_stack(s, 0, fr, &st) ||
      bf_store_intern_thread(s, sid, 100, "main", &th))
    fail("cannot fill the base database");
  for (int i = 0; i < 50; i++) {
    bf_sample smp = {.thread_id = th, .stack_id = st, .ts_ns = 1000 * i, .count = 1, .weight = 1};
    if (bf_store_sample_add(s, sid, &smp)) fail("cannot add a sample");
  }
  bf_trace_func tf = {.function_id = fn, .calls = 3, .primitive_calls = 3, .self_ns = 10, .total_ns = 20};
  if (bf_store_trace_func_put(s, sid, &tf) || bf_store_flush(s)) fail("cannot add a traced row");
  unsigned char *img = NULL;
  if (bf_store_image(s, (size_t)1 << 30, &img, &base_len)) fail("cannot image the base database");
  bf_store_close(s);
  base_img = img;
}

static void one(const uint8_t *data, size_t n) {
  if (n == 0) return;
  if (data[0] & 1)
    run_opener(data + 1, n - 1);
  else
    run_import(data + 1, n - 1);
}

#ifdef BF_LIBFUZZER
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t n) {
  static int ready;
  if (!ready) {
    setup();
    ready = 1;
  }
  one(data, n);
  return 0;
}
#else
int main(int argc, char **argv) {
  long iters = argc > 1 ? atol(argv[1]) : 500;
  setup();
  uint64_t seed = 0x5eed32, *rng = &seed;
  static char text[8192];
  uint8_t bytes[64];
  for (long k = 0; k < iters; k++) {
    if (k % 2 == 0) {
      text[0] = 0; /* selector: import */
      size_t n = gen_import(rng, text + 1, sizeof text - 1);
      one((const uint8_t *)text, n + 1);
    } else {
      bytes[0] = 1; /* selector: opener */
      size_t n = 1 + RND() % (sizeof bytes - 1);
      for (size_t i = 1; i < n; i++) bytes[i] = (uint8_t)RND();
      /* most inputs: one to three hostile statements, few flips */
      for (size_t i = 1; i < 4 && i < n; i++) bytes[i] = (uint8_t)(RND() % (N_SQL + N_SQL / 2));
      one(bytes, n);
    }
  }
  unlink(text_path);
  free(base_img);
  printf("fuzz_store: %ld inputs\n", iters);
  return 0;
}
#endif
