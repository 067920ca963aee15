/* test_spool.c — record --push's spool (core/spool.h): a window spooled
 * twice is kept once, the oldest waiting window comes first across sessions,
 * sent/failed/refused states, the bound drops the oldest waiting rows only,
 * counts, and the session note that keeps the rest of extra_json;
 * PRAGMA integrity_check at the end. */
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "check_db.h"
#include "scratch.h"
#include "spool.h"
#include "store.h"

static const char T[] = "http://127.0.0.1:4318/v1development/profiles";

static void add(bf_store *s, int64_t sid, int64_t seq, size_t len) {
  bf_spool_row r = {.session_id = sid, .seq = seq, .window_start_ns = seq * 1000, .window_end_ns = (seq + 1) * 1000};
  snprintf(r.target, sizeof r.target, "%s", T);
  snprintf(r.content_type, sizeof r.content_type, "application/x-protobuf");
  char *body = malloc(len);
  memset(body, 'a' + (int)seq, len);
  CHECK_EQ_INT(bf_spool_add(s, &r, body, len), 0);
  free(body);
}

static void test_spool(void) {
  const char *path = tmp_path("s.db");
  bf_store *s;
  bf_err msg = BF_ERR_INIT;
  CHECK_EQ_INT(bf_store_open(path, BF_STORE_CREATE, &s, &msg), 0);
  bf_session_info in = {.kind = "sampled", .clock = "wall", .mode = "all", .rate_hz = 100,
                        .extra_json = "{\"python\":{\"v\":1}}"};
  int64_t a, b;
  CHECK_EQ_INT(bf_store_session_begin(s, &in, &a), 0);
  CHECK_EQ_INT(bf_store_session_begin(s, &in, &b), 0);
  add(s, b, 0, 100);
  add(s, a, 0, 100);
  add(s, a, 1, 200);
  add(s, a, 1, 999); /* the same window again: kept as first spooled */
  add(s, a, 2, 300);
  bf_spool_row r;
  CHECK_EQ_INT(bf_spool_first(s, T, 0, 0, 1, &r), 1);
  CHECK_EQ_INT(r.session_id, a); /* the older session first */
  CHECK_EQ_INT(r.seq, 0);
  CHECK_EQ_INT((int64_t)r.payload_len, 100);
  CHECK(r.payload && r.payload[0] == 'a');
  CHECK_EQ_INT(bf_spool_sent(s, r.id, 200), 0);
  bf_spool_row_clear(&r);
  CHECK_EQ_INT(bf_spool_first(s, T, a, 0, 1, &r), 1);
  CHECK_EQ_INT(r.seq, 1);
  CHECK_EQ_INT((int64_t)r.payload_len, 200);
  CHECK_EQ_INT(bf_spool_failed(s, r.id, 400, 1, 0), 0); /* refused: skipped unless asked for */
  bf_spool_row_clear(&r);
  CHECK_EQ_INT(bf_spool_first(s, T, a, 0, 0, &r), 1);
  CHECK_EQ_INT(r.seq, 2);
  CHECK(r.payload == NULL);
  CHECK_EQ_INT(bf_spool_failed(s, r.id, 503, 0, 12345), 0);
  CHECK_EQ_INT(bf_spool_first(s, T, a, 1, 0, &r), 1);
  CHECK_EQ_INT(r.seq, 1);
  CHECK_EQ_INT(bf_spool_first(s, "http://other/v1development/profiles", 0, 1, 0, &r), 0);
  /* waiting: a/1 (refused, 200), a/2 (300), b/0 (100) = 600 bytes; within 350 the two oldest go */
  int64_t n, f, l;
  CHECK_EQ_INT(bf_spool_trim(s, T, 350, &n, &f, &l), 0);
  CHECK_EQ_INT(n, 2);
  CHECK_EQ_INT(f, 1);
  CHECK_EQ_INT(l, 2);
  CHECK_EQ_INT(bf_spool_trim(s, T, 350, &n, &f, &l), 0);
  CHECK_EQ_INT(n, 0);
  bf_spool_counts c;
  CHECK_EQ_INT(bf_spool_counts_get(s, a, T, &c), 0);
  CHECK_EQ_INT(c.windows, 3);
  CHECK_EQ_INT(c.sent, 1);
  CHECK_EQ_INT(c.dropped, 2);
  CHECK_EQ_INT(c.pending + c.refused, 0);
  CHECK_EQ_INT(bf_spool_counts_get(s, b, T, &c), 0);
  CHECK_EQ_INT(c.pending, 1);
  CHECK_EQ_INT(c.waiting_bytes, 100);
  CHECK_EQ_INT(bf_spool_note_session(s, a, "{\"sent\":1,\"dropped\":2}"), 0);
  bf_session_info *got = NULL;
  CHECK_EQ_INT(bf_store_session_get(s, a, &got), 0);
  CHECK(got && strstr(got->extra_json, "\"python\":{\"v\":1}") && strstr(got->extra_json, "\"push\":{\"sent\":1"));
  bf_session_info_free(got);
  /* deleting the session takes its spool rows with it */
  CHECK_EQ_INT(bf_store_session_delete(s, b), 0);
  CHECK_EQ_INT(bf_spool_first(s, T, 0, 1, 0, &r), 0);
  bf_store_close(s);
  check_integrity(path);
}

int main(void) {
  char *dir = scratch_dir();
  snprintf(dir, SCRATCH_DIR_LEN, "/tmp/bf_test_spool_XXXXXX");
  if (!mkdtemp(dir)) return 1;
  test_spool();
  char cmd[512];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  if (system(cmd) != 0) return 1;
  return CHECK_DONE();
}
