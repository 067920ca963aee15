/* test_governance.c — units of issue 8: the path token rule, a redacted copy
 * of a session with every kind of data (numbers kept, paths gone), gc of an
 * expired session next to one that shares its functions. */
#include <errno.h>
#include <sodium.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include "check.h"
#include "check_db.h"
#include "copy.h"
#include "gc.h"
#include "redact.h"
#include "scratch.h"
#include "share.h"
#include "store.h"



static int file_contains(const char *path, const char *needle) {
  FILE *f = fopen(path, "rb");
  if (!f) return 0;
  size_t cap = 1 << 20, n = 0;
  char *b = malloc(cap);
  size_t r;
  while ((r = fread(b + n, 1, cap - n, f)) > 0) {
    n += r;
    if (n == cap) b = realloc(b, cap *= 2);
  }
  fclose(f);
  int hit = memmem(b, n, needle, strlen(needle)) != NULL;
  free(b);
  return hit;
}

static void test_token_rule(void) {
  unsigned char k1[32] = {1}, k2[32] = {2};
  char a[64], b[64], c[64];
  const char *keep[] = {"/usr/lib/python3"};
  CHECK_EQ_INT(bf_redact_path(k1, "/home/alice/app/x.py", keep, 1, a, sizeof a), 0);
  CHECK_EQ_INT(bf_redact_path(k1, "/home/alice/app/x.py", keep, 1, b, sizeof b), 0);
  CHECK(strcmp(a, b) == 0);
  CHECK(strncmp(a, "<path:", 6) == 0 && strlen(a) == 23);
  CHECK_EQ_INT(bf_redact_path(k1, "/home/alice/app/y.py", keep, 1, c, sizeof c), 0);
  CHECK(strcmp(a, c) != 0);
  CHECK_EQ_INT(bf_redact_path(k2, "/home/alice/app/x.py", keep, 1, c, sizeof c), 0);
  CHECK(strcmp(a, c) != 0); /* another copy, another key */
  CHECK_EQ_INT(bf_redact_path(k1, "/usr/lib/python3.11/os.py", keep, 1, c, sizeof c), 1);
  CHECK(strcmp(c, "/usr/lib/python3.11/os.py") == 0);
  CHECK_EQ_INT(bf_redact_path(k1, "<builtin>", keep, 1, c, sizeof c), 1);
  CHECK_EQ_INT(bf_redact_path(k1, "<frozen importlib._bootstrap>", keep, 1, c, sizeof c), 1);
  CHECK_EQ_INT(bf_redact_path(k1, a, keep, 1, c, sizeof c), 1); /* tokens stay tokens */
  CHECK_EQ_INT(bf_redact_path(k1, "<template /home/alice/t.html>", keep, 1, c, sizeof c), 0);
  CHECK_EQ_INT(bf_redact_path(k1, "relative/app.py", NULL, 0, c, sizeof c), 0);
}

/* A sampled-and-traced looking session with two threads. */
static int64_t fill(bf_store *s, const char *label, int64_t expires, const char *leaf_file) {
  bf_session_info in = {.kind = "sampled", .clock = "cpu", .mode = "all", .rate_hz = 997, .achieved_rate_hz = 990.5,
                        .start_ns = 1700000000123456789LL, .duration_ns = 2500000000LL, .host = "build-host-7",
                        .pid = 4242, .command = "python /home/alice/app/serve.py --token=hunter2",
                        .python_version = "3.12.1", .python_build = "release", .commit = "abc123",
                        .label = label, .samples = 30, .missed = 2, .invalid = 1, .profiler_cpu_ns = 777,
                        .status = "complete", .expires_at_ns = expires,
                        .extra_json = "{\"cwd\":\"/home/alice/app\",\"n\":3,\"argv\":\"python serve.py\","
                                      "\"gil\":\"held\",\"esc\":\"a\\\"b/c\"}"};
  int64_t sid, fa, fb, fc, fra, frb, frc, s1, s2, s3, t1, t2;
  CHECK_EQ_INT(bf_store_session_begin(s, &in, &sid), 0);
  CHECK_EQ_INT(bf_store_intern_function(s, "/home/alice/app/serve.py", "main", 1, &fa), 0);
  CHECK_EQ_INT(bf_store_intern_function(s, "/home/alice/app/serve.py", "handle", 20, &fb), 0);
  CHECK_EQ_INT(bf_store_intern_function(s, leaf_file, "leaf", 7, &fc), 0);
  int64_t fd, frd, s4;
  CHECK_EQ_INT(bf_store_intern_function(s, "<unknown>", "render (/home/alice/app/serve.py:3);x /", 0, &fd), 0);
  CHECK_EQ_INT(bf_store_intern_frame(s, fd, 0, &frd), 0);
  CHECK_EQ_INT(bf_store_intern_frame(s, fa, 3, &fra), 0);
  CHECK_EQ_INT(bf_store_intern_frame(s, fb, 22, &frb), 0);
  CHECK_EQ_INT(bf_store_intern_frame(s, fc, 9, &frc), 0);
  CHECK_EQ_INT(bf_store_intern_stack(s, 0, fra, &s1), 0);
  CHECK_EQ_INT(bf_store_intern_stack(s, s1, frb, &s2), 0);
  CHECK_EQ_INT(bf_store_intern_stack(s, s2, frc, &s3), 0);
  CHECK_EQ_INT(bf_store_intern_stack(s, s3, frd, &s4), 0);
  CHECK_EQ_INT(bf_store_intern_thread(s, sid, 100, "MainThread", &t1), 0);
  CHECK_EQ_INT(bf_store_intern_thread(s, sid, 101, NULL, &t2), 0);
  for (int i = 0; i < 10; i++) {
    bf_sample a = {.thread_id = t1, .stack_id = i % 2 ? s3 : (i % 4 ? s4 : s2), .ts_ns = i * 1000, .flags = BF_SAMPLE_GIL | BF_SAMPLE_ON_CPU,
                   .count = 2, .weight = 1001 + i};
    bf_sample b = {.thread_id = t2, .stack_id = i % 3 ? 0 : s1, .ts_ns = i * 1000 + 5, .flags = BF_SAMPLE_IDLE,
                   .count = 1, .weight = 3};
    CHECK_EQ_INT(bf_store_sample_add(s, sid, &a), 0);
    CHECK_EQ_INT(bf_store_sample_add(s, sid, &b), 0);
  }
  bf_trace_func tf = {.function_id = fc, .calls = 5, .primitive_calls = 4, .resumes = 1, .self_ns = 50, .total_ns = 60,
                      .p50_ns = 10, .p90_ns = 12, .p99_ns = 13, .max_ns = 14, .records_kept = 2, .records_dropped = 3};
  CHECK_EQ_INT(bf_store_trace_func_put(s, sid, &tf), 0);
  bf_trace_edge te = {.caller_function_id = 0, .callee_function_id = fa, .calls = 1, .primitive_calls = 1,
                      .self_ns = 5, .total_ns = 99};
  CHECK_EQ_INT(bf_store_trace_edge_put(s, sid, &te), 0);
  te.caller_function_id = fb;
  te.callee_function_id = fc;
  CHECK_EQ_INT(bf_store_trace_edge_put(s, sid, &te), 0);
  bf_call_record cr = {.function_id = fc, .thread_id = t1, .start_ns = 11, .duration_ns = 22, .depth = 1,
                       .parent_function_id = fb};
  CHECK_EQ_INT(bf_store_call_record_add(s, sid, &cr), 0);
  CHECK_EQ_INT(bf_store_flush(s), 0);
  return sid;
}

typedef struct sum {
  bf_store *s;
  int64_t n, count, weight, ts, flags, depth, lines;
} sum;

static int add_sample(void *ud, const bf_sample *smp) {
  sum *m = ud;
  m->n++;
  m->count += smp->count;
  m->weight += smp->weight * (smp->ts_ns + 1);
  m->ts += smp->ts_ns;
  m->flags += smp->flags * (m->n);
  int64_t *fr = NULL;
  size_t n = 0;
  if (smp->stack_id && bf_store_stack_frames(m->s, smp->stack_id, &fr, &n) == 0) {
    m->depth += (int64_t)n;
    for (size_t i = 0; i < n; i++) {
      int64_t fid, line;
      CHECK_EQ_INT(bf_store_frame_get(m->s, fr[i], &fid, &line), 0);
      m->lines += line * (int64_t)(i + 1);
    }
  }
  free(fr);
  return 0;
}

static sum summarise(bf_store *s, int64_t sid) {
  sum m = {.s = s};
  CHECK_EQ_INT(bf_store_samples_foreach(s, sid, NULL, add_sample, &m), 0);
  return m;
}

static int count_tf(void *ud, const bf_trace_func *tf) {
  int64_t *x = ud;
  *x += tf->calls * 1000 + tf->p99_ns + tf->records_dropped;
  return 0;
}
static int count_te(void *ud, const bf_trace_edge *te) {
  int64_t *x = ud;
  *x += te->total_ns + (te->caller_function_id == 0);
  return 0;
}
static int count_cr(void *ud, const bf_call_record *r) {
  int64_t *x = ud;
  *x += r->duration_ns + r->depth + (r->parent_function_id != 0) + (r->thread_id != 0);
  return 0;
}

static void test_redacted_copy(void) {
  const char *src_path = tmp_path("src.db"), *out = tmp_path("red.db");
  bf_store *s, *r;
  bf_err msg = BF_ERR_INIT;
  CHECK_EQ_INT(bf_store_open(src_path, BF_STORE_CREATE, &s, &msg), 0);
  fill(s, "other", 0, "/srv/bob/vault.py");
  int64_t sid = fill(s, "mine", 0, "/usr/lib/python3.12/json/decoder.py");
  const char *keep[] = {"/usr/lib/python3"};
  bf_redact_opts ro = {.keep = keep, .nkeep = 1};
  int64_t nid = 0;
  CHECK_EQ_INT(bf_redact_session(s, sid, out, &ro, &nid), 0);
  CHECK_EQ_INT(nid, 1);
  CHECK(bf_redact_session(s, sid, out, &ro, &nid) == -EEXIST);
  CHECK(access(tmp_path("red.db-wal"), F_OK) != 0);
  check_integrity(out);
  CHECK(!file_contains(out, "alice"));
  CHECK(!file_contains(out, "/srv/bob"));
  CHECK(!file_contains(out, "hunter2"));
  CHECK(!file_contains(out, "build-host-7"));
  CHECK(file_contains(out, "/usr/lib/python3.12/json/decoder.py"));
  CHECK(file_contains(out, "render (<path:"));
  CHECK(file_contains(out, ":3);x <path:"));
  CHECK_EQ_INT(bf_store_open(out, BF_STORE_READONLY, &r, &msg), 0);
  bf_session_info *a, *b;
  CHECK_EQ_INT(bf_store_session_get(s, sid, &a), 0);
  CHECK_EQ_INT(bf_store_session_get(r, nid, &b), 0);
  CHECK(b->host == NULL && b->command == NULL && b->redacted == 1);
  CHECK(strcmp(b->label, "mine") == 0 && strcmp(b->commit, "abc123") == 0);
  CHECK_EQ_INT(b->start_ns, a->start_ns);
  CHECK_EQ_INT(b->duration_ns, a->duration_ns);
  CHECK_EQ_INT(b->pid, a->pid);
  CHECK_EQ_INT(b->missed, a->missed);
  CHECK_EQ_INT(b->invalid, a->invalid);
  CHECK_EQ_INT(b->profiler_cpu_ns, a->profiler_cpu_ns);
  CHECK(b->rate_hz == a->rate_hz && b->achieved_rate_hz == a->achieved_rate_hz);
  CHECK(strstr(b->extra_json, "\"n\":3") && strstr(b->extra_json, "\"gil\":\"held\""));
  CHECK(!strstr(b->extra_json, "/home") && !strstr(b->extra_json, "serve.py") && !strstr(b->extra_json, "b/c"));
  CHECK(strstr(b->extra_json, "\"cwd\":\"<path:"));
  bf_session_info_free(a);
  bf_session_info_free(b);
  sum x = summarise(s, sid), y = summarise(r, nid);
  CHECK_EQ_INT(x.n, y.n);
  CHECK_EQ_INT(x.count, y.count);
  CHECK_EQ_INT(x.weight, y.weight);
  CHECK_EQ_INT(x.ts, y.ts);
  CHECK_EQ_INT(x.flags, y.flags);
  CHECK_EQ_INT(x.depth, y.depth);
  CHECK_EQ_INT(x.lines, y.lines);
  int64_t p = 0, q = 0;
  bf_store_trace_funcs_foreach(s, sid, count_tf, &p);
  bf_store_trace_funcs_foreach(r, nid, count_tf, &q);
  CHECK(p == q && p > 0);
  p = q = 0;
  bf_store_trace_edges_foreach(s, sid, count_te, &p);
  bf_store_trace_edges_foreach(r, nid, count_te, &q);
  CHECK(p == q && p > 0);
  p = q = 0;
  bf_store_call_records_foreach(s, sid, count_cr, &p);
  bf_store_call_records_foreach(r, nid, count_cr, &q);
  CHECK(p == q && p > 0);
  bf_thread_ref *t;
  size_t nt;
  CHECK_EQ_INT(bf_store_threads(r, nid, &t, &nt), 0);
  CHECK_EQ_INT(nt, 2);
  CHECK(t[0].name && strcmp(t[0].name, "MainThread") == 0);
  bf_thread_refs_free(t, nt);
  bf_store_close(r);
  bf_store_close(s);
}

static void test_copy_into_busy_store_and_gc(void) {
  const char *path = tmp_path("gc.db");
  bf_store *s;
  bf_err msg = BF_ERR_INIT;
  CHECK_EQ_INT(bf_store_open(path, BF_STORE_CREATE, &s, &msg), 0);
  int64_t keep = fill(s, "keep", 0, "/home/alice/app/kept_leaf.py");
  int64_t gone = fill(s, "gone", 1000, "/home/alice/app/gone_leaf.py");
  int64_t copy = 0;
  CHECK_EQ_INT(bf_session_copy(s, gone, s, NULL, &copy), 0); /* same store: ids re-interned */
  CHECK(copy > gone);
  sum a = summarise(s, gone), b = summarise(s, copy);
  CHECK_EQ_INT(a.weight, b.weight);
  bf_gc_stats st;
  CHECK_EQ_INT(bf_gc(s, 2000, 0, &st), 0);
  CHECK_EQ_INT(st.sessions_deleted, 2); /* the copy kept the expiry */
  CHECK(st.swept && st.functions == 1 && st.strings == 1);
  bf_session_info *in;
  CHECK_EQ_INT(bf_store_session_get(s, gone, &in), -ENOENT);
  CHECK_EQ_INT(bf_store_session_get(s, keep, &in), 0);
  bf_session_info_free(in);
  sum k = summarise(s, keep);
  CHECK_EQ_INT(k.n, 20);
  CHECK(!file_contains(path, "gone_leaf"));
  CHECK(!file_contains(tmp_path("gc.db-wal"), "gone_leaf"));
  CHECK(file_contains(path, "kept_leaf"));
  /* interning after gc must not hand out deleted ids */
  int64_t f;
  CHECK_EQ_INT(bf_store_intern_function(s, "/home/alice/app/gone_leaf.py", "leaf", 7, &f), 0);
  bf_function_ref ref;
  CHECK_EQ_INT(bf_store_function_get(s, f, &ref), 0);
  CHECK(strcmp(ref.file, "/home/alice/app/gone_leaf.py") == 0);
  bf_store_close(s);
  check_integrity(path);
}

static void test_gc_leaves_a_running_capture_alone(void) {
  const char *path = tmp_path("busy.db");
  bf_store *s;
  bf_err msg = BF_ERR_INIT;
  CHECK_EQ_INT(bf_store_open(path, BF_STORE_CREATE, &s, &msg), 0);
  bf_session_info in = {.kind = "sampled", .expires_at_ns = 1};
  int64_t sid;
  CHECK_EQ_INT(bf_store_session_begin(s, &in, &sid), 0); /* status incomplete */
  fill(s, "x", 5, "/a.py");
  bf_gc_stats st;
  CHECK_EQ_INT(bf_gc(s, 1000, 0, &st), 0);
  CHECK_EQ_INT(st.sessions_deleted, 1);
  CHECK_EQ_INT(st.sessions_busy, 1);
  CHECK(!st.swept);
  CHECK_EQ_INT(bf_gc(s, 1000, 1, &st), 0);
  CHECK_EQ_INT(st.sessions_deleted, 1);
  CHECK(st.swept);
  bf_store_close(s);
  check_integrity(path);
}

static unsigned char *slurp(const char *path, size_t *n) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long len = ftell(f);
  fseek(f, 0, SEEK_SET);
  unsigned char *b = malloc((size_t)len + 1);
  *n = fread(b, 1, (size_t)len, f);
  fclose(f);
  return b;
}

static void spit(const char *path, const unsigned char *b, size_t n) {
  FILE *f = fopen(path, "wb");
  fwrite(b, 1, n, f);
  fclose(f);
}

static size_t count_sessions(bf_store *s) {
  bf_session_info **l = NULL;
  size_t n = 0;
  CHECK_EQ_INT(bf_store_session_list(s, &l, &n), 0);
  for (size_t i = 0; i < n; i++) bf_session_info_free(l[i]);
  free(l);
  return n;
}

/* Anyone holding the public key can seal anything, so what comes out of the
 * box is untrusted: mutate the inner header, the zlib stream and the database
 * itself, re-seal each variant properly, and check that import either works
 * or fails cleanly, leaving the target consistent. */
static void test_sealed_content_is_untrusted(void) {
  unsigned char pk[crypto_box_PUBLICKEYBYTES], sk[crypto_box_SECRETKEYBYTES];
  crypto_box_keypair(pk, sk);
  char b64[128], line[200];
  sodium_bin2base64(b64, sizeof b64, sk, sizeof sk, sodium_base64_VARIANT_ORIGINAL);
  snprintf(line, sizeof line, "bifocal-key-1 %s\n", b64);
  spit(tmp_path("k.key"), (unsigned char *)line, strlen(line));
  sodium_bin2base64(b64, sizeof b64, pk, sizeof pk, sodium_base64_VARIANT_ORIGINAL);
  bf_store *src, *dst;
  bf_err msg = BF_ERR_INIT;
  CHECK_EQ_INT(bf_store_open(tmp_path("fz_src.db"), BF_STORE_CREATE, &src, &msg), 0);
  int64_t sid = fill(src, "fz", 0, "/a/b.py");
  CHECK_EQ_INT(bf_share_export(src, sid, b64, tmp_path("fz.bfs")), 0);
  bf_store_close(src);
  size_t n = 0;
  unsigned char *sealed = slurp(tmp_path("fz.bfs"), &n);
  size_t hdr = BF_SHARE_MAGIC_LEN + 8, plen = n - hdr - crypto_box_SEALBYTES;
  unsigned char *plain = malloc(plen);
  CHECK(crypto_box_seal_open(plain, sealed + hdr, n - hdr, pk, sk) == 0);
  uLongf dblen = 0;
  for (int i = 0; i < 8; i++) dblen |= (uLongf)plain[8 + i] << (8 * i);
  unsigned char *db = malloc(dblen);
  uLongf got = dblen;
  CHECK(uncompress(db, &got, plain + 16, (uLong)(plen - 16)) == Z_OK && got == dblen);
  CHECK_EQ_INT(bf_store_open(tmp_path("fz_dst.db"), BF_STORE_CREATE, &dst, &msg), 0);
  size_t base = count_sessions(dst);
  int ok = 0, refused = 0;
  uint32_t seed = 12345;
  for (int round = 0; round < 300; round++) {
    unsigned char *p2;
    size_t p2len;
    if (round < 60) { /* header and zlib stream */
      p2len = plen;
      p2 = malloc(p2len);
      memcpy(p2, plain, plen);
      for (int k = 0; k <= round % 3; k++) {
        seed = seed * 1103515245u + 12345u;
        p2[(seed >> 8) % (round < 20 ? 16 : p2len)] ^= (unsigned char)(1u << ((seed >> 4) % 8));
      }
    } else { /* the database bytes, recompressed */
      unsigned char *d2 = malloc(dblen);
      memcpy(d2, db, dblen);
      for (int k = 0; k <= round % 4; k++) {
        seed = seed * 1103515245u + 12345u;
        size_t at = (round % 2) ? (seed >> 8) % 100 : (seed >> 8) % dblen; /* header often */
        d2[at] = (unsigned char)(seed >> 3);
      }
      uLongf zl = compressBound(dblen);
      p2 = malloc(16 + zl);
      memcpy(p2, plain, 16);
      CHECK(compress2(p2 + 16, &zl, d2, dblen, 1) == Z_OK);
      p2len = 16 + zl;
      free(d2);
    }
    size_t outn = hdr + crypto_box_SEALBYTES + p2len;
    unsigned char *o = malloc(outn);
    memcpy(o, sealed, hdr);
    crypto_box_seal(o + hdr, p2, p2len, pk);
    spit(tmp_path("fz2.bfs"), o, outn);
    int64_t nid = 0;
    size_t before = count_sessions(dst);
    int rc = bf_share_import(dst, tmp_path("fz2.bfs"), tmp_path("k.key"), NULL, &nid);
    if (rc == 0) {
      ok++;
      CHECK_EQ_INT(count_sessions(dst), before + 1);
    } else {
      refused++;
      CHECK(strstr(bf_store_errmsg(dst), "nothing imported") != NULL);
      CHECK_EQ_INT(count_sessions(dst), before);
    }
    free(o);
    free(p2);
  }
  fprintf(stderr, "sealed fuzz: %d imported, %d refused\n", ok, refused);
  CHECK(refused > 0);
  CHECK(count_sessions(dst) == base + (size_t)ok);
  bf_store_close(dst);
  check_integrity(tmp_path("fz_dst.db"));
  free(db);
  free(plain);
  free(sealed);
}

int main(void) {
  if (sodium_init() < 0) return 1;
  char *dir = scratch_dir();
  snprintf(dir, SCRATCH_DIR_LEN, "/tmp/bf-gov-XXXXXX");
  if (!mkdtemp(dir)) return 1;
  test_token_rule();
  test_redacted_copy();
  test_copy_into_busy_store_and_gc();
  test_gc_leaves_a_running_capture_alone();
  test_sealed_content_is_untrusted();
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
  return CHECK_DONE();
}
