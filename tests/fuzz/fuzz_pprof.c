/* fuzz_pprof.c — untrusted bytes into bf_import_pprof (what a Pyroscope
 * answers to `import --from pyroscope`): a small valid profile, gzip'd or
 * not, then seeded mutations of it (byte flips, cuts, inserted varints,
 * duplicated spans) and random bytes, each imported into an in-memory store.
 * Any crash or sanitizer report fails; a refusal must leave a message and no
 * session. main(N) runs N inputs (meson test `pprof_fuzz`, suite fuzz). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "import_pyroscope.h"
#include "store.h"

static size_t put_varint(uint8_t *b, uint64_t v) {
  size_t n = 0;
  do {
    b[n] = (uint8_t)(v & 0x7f);
    v >>= 7;
    if (v) b[n] |= 0x80;
    n++;
  } while (v);
  return n;
}

/* field (wire 2) holding sub[0..n) */
static size_t put_msg(uint8_t *b, int field, const uint8_t *sub, size_t n) {
  size_t o = put_varint(b, (uint64_t)field << 3 | 2);
  o += put_varint(b + o, n);
  memcpy(b + o, sub, n);
  return o + n;
}

static size_t put_str(uint8_t *b, int field, const char *s) { return put_msg(b, field, (const uint8_t *)s, strlen(s)); }

static size_t put_uint(uint8_t *b, int field, uint64_t v) {
  size_t o = put_varint(b, (uint64_t)field << 3);
  return o + put_varint(b + o, v);
}

/* A profile: types samples/count, cpu/nanoseconds; two functions (one with a
 * bifocal system name), two locations, two samples; period 1 ms. */
static size_t seed(uint8_t *b) {
  uint8_t t[64], u[64];
  size_t o = 0, n;
  n = put_uint(t, 1, 1);
  n += put_uint(t + n, 2, 2);
  o += put_msg(b + o, 1, t, n);
  n = put_uint(t, 1, 3);
  n += put_uint(t + n, 2, 4);
  o += put_msg(b + o, 1, t, n);
  /* sample: locations 1,2 packed; values 7, 7000000 packed */
  uint8_t pk[16] = {1, 2}, pv[16];
  size_t nv = put_varint(pv, 7);
  nv += put_varint(pv + nv, 7000000);
  n = put_msg(t, 1, pk, 2);
  n += put_msg(t + n, 2, pv, nv);
  o += put_msg(b + o, 2, t, n);
  n = put_uint(t, 1, 2); /* unpacked form */
  n += put_uint(t + n, 2, 3);
  n += put_uint(t + n, 2, 3000000);
  o += put_msg(b + o, 2, t, n);
  for (int i = 1; i <= 2; i++) {
    size_t ln = put_uint(u, 1, (uint64_t)i);
    ln += put_uint(u + ln, 2, (uint64_t)(10 * i));
    n = put_uint(t, 1, (uint64_t)i);
    n += put_msg(t + n, 4, u, ln);
    o += put_msg(b + o, 4, t, n);
    n = put_uint(t, 1, (uint64_t)i);
    n += put_uint(t + n, 2, (uint64_t)(4 + i));
    n += put_uint(t + n, 3, (uint64_t)(6 + i));
    n += put_uint(t + n, 4, 9);
    n += put_uint(t + n, 5, (uint64_t)i);
    o += put_msg(b + o, 5, t, n);
  }
  const char *strs[] = {"", "samples", "count", "cpu", "nanoseconds", "app.leaf", "mid", "/app/x.py:1:leaf", "sys2",
                        "/app/x.py"};
  for (size_t i = 0; i < sizeof strs / sizeof *strs; i++) o += put_str(b + o, 6, strs[i]);
  o += put_uint(b + o, 12, 1000000);
  return o;
}

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint32_t rnd(void) {
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return (uint32_t)rng;
}

static int one(const uint8_t *d, size_t n) {
  bf_store *s;
  bf_err err = BF_ERR_INIT;
  if (bf_store_open_memory(&s, &err)) {
    fprintf(stderr, "cannot open a memory store: %s\n", err.msg);
    return 1;
  }
  bf_import_opts o = {.label = "fuzz", .profiler_version = "0"};
  bf_import_pprof_meta m = {.start_ns = 1, .duration_ns = 1, .host = "h", .extra_json = "{\"q\":1}"};
  int64_t id = 0;
  int rc = bf_import_pprof(s, d, n, &o, &m, &id), bad = 0;
  bf_session_info **l;
  size_t nl = 0;
  if (bf_store_session_list(s, &l, &nl) == 0) {
    if (rc && nl) bad = fprintf(stderr, "a refused profile left %zu session(s)\n", nl);
    if (rc && !*bf_store_errmsg(s)) bad = fprintf(stderr, "a refusal without a message\n");
    for (size_t i = 0; i < nl; i++) bf_session_info_free(l[i]);
    free(l);
  }
  bf_store_close(s);
  return bad ? 1 : 0;
}

int main(int argc, char **argv) {
  long iters = argc > 1 ? atol(argv[1]) : 2000;
  static uint8_t base[4096], buf[8192], gz[8192];
  size_t bn = seed(base);
  if (one(base, bn)) return 1;
  uLongf gl = sizeof gz;
  if (compress2(gz, &gl, base, (uLong)bn, 9) != Z_OK) return 1; /* zlib header: not gzip, refused or read raw */
  if (one(gz, gl)) return 1;
  for (long it = 0; it < iters; it++) {
    size_t n = bn;
    memcpy(buf, base, bn);
    int k = (int)(rnd() % 8) + 1;
    for (int j = 0; j < k && n > 1; j++) {
      size_t at = rnd() % n;
      switch (rnd() % 5) {
        case 0: buf[at] ^= (uint8_t)(1u << (rnd() % 8)); break;
        case 1: buf[at] = (uint8_t)rnd(); break;
        case 2: n = at + 1; break;
        case 3:
          if (n + 10 < sizeof buf) {
            memmove(buf + at + 10, buf + at, n - at);
            put_varint(buf + at, ((uint64_t)rnd() << 32 | rnd()) | 0x8080808080ull);
            n += 10;
          }
          break;
        default: {
          size_t len = rnd() % 64, from = rnd() % n;
          uint8_t dup[64];
          if (from + len <= n && n + len < sizeof buf) { /* a copy of another span, inserted at at */
            memcpy(dup, buf + from, len);
            memmove(buf + at + len, buf + at, n - at);
            memcpy(buf + at, dup, len);
            n += len;
          }
        }
      }
    }
    if (it % 7 == 0)
      for (size_t i = 0; i < n; i++) buf[i] = (uint8_t)rnd();
    if (one(buf, n)) {
      fprintf(stderr, "iteration %ld failed\n", it);
      return 1;
    }
  }
  printf("pprof fuzz: %ld inputs\n", iters);
  return 0;
}
