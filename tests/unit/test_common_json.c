/* test_common_json.c — the bottom layer's text helpers: UTF-8 decoding
 * against the Unicode table of well-formed sequences, the JSON writer's
 * escapes (quotes, controls, HTML-unsafe <>&, U+2028/9, invalid bytes as
 * U+FFFD and counted), numbers, the strict checker (RFC 8259 cases, duplicate
 * and reserved keys, depth), the writer's row helpers (knull, kpair, ints,
 * numf, pad, mem), the reader of stored metadata (bf_json_find, _string,
 * _find_num, on nested, escaped and malformed text), and a property:
 * anything the writer escapes, the checker accepts. */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "jsonw.h"
#include "text.h"

static int esc_is(const char *in, const char *want) {
  char *got = bf_json_escape(in);
  int ok = got && strcmp(got, want) == 0;
  if (!ok) fprintf(stderr, "escape(%s) = %s, want %s\n", in, got ? got : "(null)", want);
  free(got);
  return ok;
}

static int num_is(double v, const char *want) {
  char buf[64] = "";
  FILE *f = fmemopen(buf, sizeof buf - 1, "w");
  bf_json_num(f, v);
  fclose(f);
  return strcmp(buf, want) == 0;
}

static int check(const char *text) {
  bf_err why = BF_ERR_INIT;
  return bf_json_check_object(text, NULL, &why);
}

/* The streaming writer: structure, commas, escapes, misuse. */
static void streaming_writer(void) {
  char buf[512] = "";
  FILE *f = fmemopen(buf, sizeof buf - 1, "w");
  bf_jw w;
  bf_jw_init(&w, f);
  bf_jw_obj(&w);
  bf_jw_kstr(&w, "name", "a<b>&\xe2\x80\xa8\xff\"");
  bf_jw_kint(&w, "n", -3);
  bf_jw_kuint(&w, "u", 18446744073709551615ull);
  bf_jw_knum(&w, "x", 0.5);
  bf_jw_kbool(&w, "ok", 1);
  bf_jw_key(&w, "rows");
  bf_jw_arr(&w);
  bf_jw_int(&w, 1);
  bf_jw_obj(&w);
  bf_jw_end(&w);
  bf_jw_arr(&w);
  bf_jw_end(&w);
  bf_jw_null(&w);
  bf_jw_str(&w, NULL);
  bf_jw_raw(&w, "{\"k\":2}");
  bf_jw_end(&w);
  bf_jw_key(&w, "e");
  bf_jw_num(&w, 1.0 / 0.0);
  bf_jw_end(&w);
  fclose(f);
  CHECK_EQ_INT(w.err, 0);
  CHECK_EQ_INT(w.depth, 0);
  const char *want = "{\"name\":\"a\\u003cb\\u003e\\u0026\\u2028\xef\xbf\xbd\\\"\",\"n\":-3,"
                     "\"u\":18446744073709551615,\"x\":0.5,\"ok\":true,"
                     "\"rows\":[1,{},[],null,null,{\"k\":2}],\"e\":null}";
  if (strcmp(buf, want) != 0) fprintf(stderr, "jw wrote %s\nwant     %s\n", buf, want);
  CHECK(strcmp(buf, want) == 0);
  bf_err why = BF_ERR_INIT;
  CHECK_EQ_INT(bf_json_check_object(buf, NULL, &why), 0);
  /* misuse: a value without its key, an end too many, too deep */
  f = fopen("/dev/null", "w");
  bf_jw_init(&w, f);
  bf_jw_obj(&w);
  bf_jw_int(&w, 1);
  CHECK_EQ_INT(w.err, -EINVAL);
  bf_jw_init(&w, f);
  bf_jw_arr(&w);
  bf_jw_end(&w);
  bf_jw_end(&w);
  CHECK_EQ_INT(w.err, -EINVAL);
  bf_jw_init(&w, f);
  for (int i = 0; i <= BF_JW_DEPTH; i++) bf_jw_arr(&w);
  CHECK_EQ_INT(w.err, -EINVAL);
  bf_jw_init(&w, f);
  bf_jw_obj(&w);
  bf_jw_key(&w, "a");
  bf_jw_end(&w); /* a key without its value */
  CHECK_EQ_INT(w.err, -EINVAL);
  fclose(f);
  /* bf_jw_pad: whitespace after the comma, before the next value only */
  char pb[128] = "";
  f = fmemopen(pb, sizeof pb - 1, "w");
  bf_jw_init(&w, f);
  bf_jw_arr(&w);
  for (int i = 0; i < 2; i++) {
    bf_jw_pad(&w, "\n ");
    bf_jw_obj(&w);
    bf_jw_kint(&w, "i", i);
    bf_jw_end(&w);
  }
  bf_jw_end(&w);
  fclose(f);
  CHECK_EQ_INT(w.err, 0);
  CHECK(strcmp(pb, "[\n {\"i\":0},\n {\"i\":1}]") == 0);
  /* in an object it goes before the key (after the comma), never between
   * key and value; one pad is used once */
  char ob[128] = "";
  f = fmemopen(ob, sizeof ob - 1, "w");
  bf_jw_init(&w, f);
  bf_jw_pad(&w, "\n");
  bf_jw_obj(&w);
  bf_jw_pad(&w, "\n  ");
  bf_jw_kint(&w, "a", 1);
  bf_jw_pad(&w, "\n  ");
  bf_jw_kint(&w, "b", 2);
  bf_jw_kint(&w, "c", 3);
  bf_jw_end(&w);
  fclose(f);
  CHECK_EQ_INT(w.err, 0);
  CHECK(strcmp(ob, "\n{\n  \"a\":1,\n  \"b\":2,\"c\":3}") == 0);
}

/* The row helpers: null and pair values, integer runs, formatted numbers,
 * newlines after commas; and their misuse. */
static void writer_rows(void) {
  char buf[512] = "";
  FILE *f = fmemopen(buf, sizeof buf - 1, "w");
  bf_jw w;
  bf_jw_init(&w, f);
  bf_jw_obj(&w);
  bf_jw_knull(&w, "a");
  bf_jw_kpair(&w, "ci", 0.25, NAN);
  bf_jw_key(&w, "n");
  bf_jw_arr(&w);
  const long long v[] = {0, -1, 42, LLONG_MIN, LLONG_MAX};
  bf_jw_int(&w, 7);
  bf_jw_ints(&w, v, 5);
  bf_jw_ints(&w, v, 0);
  bf_jw_arr(&w);
  bf_jw_ints(&w, v + 2, 1);
  bf_jw_end(&w);
  bf_jw_end(&w);
  bf_jw_key(&w, "t");
  bf_jw_numf(&w, "%.3f", 1.5);
  bf_jw_key(&w, "u");
  bf_jw_numf(&w, "%.6g", 1.0 / 0.0);
  bf_jw_pad(&w, "\n");
  bf_jw_key(&w, "rows");
  bf_jw_arr(&w);
  bf_jw_pad(&w, "\n");
  bf_jw_int(&w, 1);
  bf_jw_pad(&w, "\n");
  bf_jw_ints(&w, v + 2, 1);
  bf_jw_end(&w);
  bf_jw_end(&w);
  fclose(f);
  CHECK_EQ_INT(w.err, 0);
  const char *want = "{\"a\":null,\"ci\":[0.25,null],\"n\":[7,0,-1,42,-9223372036854775808,9223372036854775807,[42]],"
                     "\"t\":1.500,\"u\":null,\n\"rows\":[\n1,\n42]}";
  if (strcmp(buf, want) != 0) fprintf(stderr, "jw wrote %s\nwant     %s\n", buf, want);
  CHECK(strcmp(buf, want) == 0);
  CHECK_EQ_INT(bf_json_check_object(buf, NULL, NULL), 0);
  /* a long run is flushed in pieces and stays whole */
  long long many[300];
  for (int i = 0; i < 300; i++) many[i] = (long long)i * 1000003;
  char *big = NULL;
  size_t bl = 0;
  f = open_memstream(&big, &bl);
  bf_jw_init(&w, f);
  bf_jw_arr(&w);
  bf_jw_ints(&w, many, 300);
  bf_jw_end(&w);
  fclose(f);
  long long sum = 0, k = 0;
  for (char *p = big + 1; *p && *p != ']'; k++) {
    sum += strtoll(p, &p, 10);
    if (*p == ',') p++;
  }
  CHECK_EQ_INT(k, 300);
  CHECK(sum == 299LL * 300 / 2 * 1000003);
  free(big);
  /* into memory: the text, or NULL when left open */
  CHECK_EQ_INT(bf_jw_mem(&w), 0);
  bf_jw_obj(&w);
  bf_jw_kint(&w, "a", 1);
  bf_jw_end(&w);
  char *m = bf_jw_mem_done(&w);
  CHECK(m && strcmp(m, "{\"a\":1}") == 0);
  free(m);
  CHECK_EQ_INT(bf_jw_mem(&w), 0);
  bf_jw_arr(&w);
  CHECK(bf_jw_mem_done(&w) == NULL);
  /* a pad before a run of ints goes after the comma, before the first */
  char pb[64] = "";
  f = fmemopen(pb, sizeof pb - 1, "w");
  bf_jw_init(&w, f);
  bf_jw_arr(&w);
  bf_jw_int(&w, 1);
  bf_jw_pad(&w, "\n ");
  bf_jw_ints(&w, v + 1, 2);
  bf_jw_end(&w);
  fclose(f);
  CHECK(strcmp(pb, "[1,\n -1,42]") == 0);
  /* ints outside an array is misuse */
  f = fopen("/dev/null", "w");
  bf_jw_init(&w, f);
  bf_jw_obj(&w);
  bf_jw_ints(&w, v, 1);
  CHECK_EQ_INT(w.err, -EINVAL);
  fclose(f);
}

/* The reader: top-level and nested keys past other values, escapes, numbers
 * only as numbers, malformed text. */
static void reader(void) {
  const char *doc = " {\"s\":\"a\\\"b\",\"arr\":[1,{\"late_ticks\":9}],\"late_ticks\":3,"
                    "\"kernel\":{\"threads\":[{\"runq_share\":0.9}],\"runq_share\":0.0625},\"x\":\"7\"}";
  const char *v;
  char s[16];
  double d = -1;
  CHECK_EQ_INT(bf_json_find(doc, "s", &v), 0);
  CHECK(bf_json_string(v, s, sizeof s) != NULL && strcmp(s, "a\"b") == 0);
  CHECK_EQ_INT(bf_json_find_num(doc, "late_ticks", &d), 0);
  CHECK(d == 3); /* the top-level key, not the one inside arr */
  CHECK_EQ_INT(bf_json_find_num(doc, "kernel.runq_share", &d), 0);
  CHECK(d == 0.0625); /* not the thread's */
  CHECK_EQ_INT(bf_json_find_num(doc, "x", &d), -1);          /* a string is not a number */
  CHECK_EQ_INT(bf_json_find_num(doc, "kernel.none", &d), -1); /* absent */
  CHECK_EQ_INT(bf_json_find_num(doc, "s.t", &d), -1);        /* not an object */
  CHECK_EQ_INT(bf_json_find_num("{\"a\":nan}", "a", &d), -1);
  CHECK_EQ_INT(bf_json_find_num("{\"a\":[1,", "b", &d), -1); /* malformed before the key */
  CHECK_EQ_INT(bf_json_find_num("not json", "a", &d), -1);
  CHECK_EQ_INT(bf_json_find_num("{\"a\":-2e3}", "a", &d), 0);
  CHECK(d == -2000);
  /* a key forged inside a string value is not a key */
  CHECK_EQ_INT(bf_json_find_num("{\"cmd\":\"x\\\",\\\"lock_dropped\\\":5\"}", "lock_dropped", &d), -1);
}

/* One value written by the writer at the top level, as text. */
static const char *jw_one(char *buf, size_t len, int kind, const char *fmt, double v, long long i) {
  FILE *f = fmemopen(buf, len - 1, "w");
  memset(buf, 0, len);
  bf_jw w;
  bf_jw_init(&w, f);
  if (kind == 0) bf_jw_numf(&w, fmt, v);
  else if (kind == 1) bf_jw_num(&w, v);
  else bf_jw_int(&w, i);
  fclose(f);
  return buf;
}

/* The writer formats numbers itself (printf's float formatting was a third
 * of a chrome export): "%.Nf", bf_json_num's "%.0f" and "%lld" must match
 * printf byte for byte, ties (exact halves), values a hair off a half,
 * -0, negatives that round to zero and the 2^52 edge of the fast path
 * included. */
static void numbers_as_printf(void) {
  static const char *const fmts[] = {"%.0f", "%.1f", "%.3f", "%.6f", "%.9f"};
  char got[512], want[512];
  uint64_t x = 0x9e3779b97f4a7c15ull;
  int bad = 0;
  for (int n = 0; n < 100000 && bad < 5; n++) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    double v;
    switch (n % 8) {
      case 0: memcpy(&v, &x, sizeof v); break;                             /* any bits */
      case 1: v = (double)(int64_t)(x % 20000000000000ull) / 1e3; break;   /* ns / 1e3 */
      case 2: v = (double)(int64_t)x / 1e6; break;                         /* big ns / 1e6 */
      case 3: v = ((double)(x % 2000001) - 1000000) / 2000.0; break;       /* many exact halves */
      case 4: v = nextafter(((double)(x % 200001) - 100000) / 2000.0, (x & 1) ? 1e300 : -1e300); break;
      case 5: v = ldexp((double)(x % 1000003), (int)(x >> 58) - 40) * ((x & 2) ? -1 : 1); break;
      case 6: v = nextafter(4503599627370496.0 / pow(10, (double)(x % 10)), (x & 1) ? 0 : 1e300); break;
      default: v = ((double)(x % 2001) - 1000) * 1e-7; break;               /* tiny, -0.000 */
    }
    for (size_t k = 0; k < sizeof fmts / sizeof *fmts; k++) {
      snprintf(want, sizeof want, fmts[k], v);
      if (!isfinite(v)) strcpy(want, "null");
      if (strcmp(jw_one(got, sizeof got, 0, fmts[k], v, 0), want)) {
        fprintf(stderr, "numf(%s, %a) = %s, printf %s\n", fmts[k], v, got, want);
        bad++;
      }
    }
    if (isfinite(v) && v == floor(v) && fabs(v) < 9e15) {
      snprintf(want, sizeof want, "%.0f", v);
      if (strcmp(jw_one(got, sizeof got, 1, NULL, v, 0), want)) {
        fprintf(stderr, "num(%a) = %s, printf %s\n", v, got, want);
        bad++;
      }
    }
    snprintf(want, sizeof want, "%lld", (long long)x);
    if (strcmp(jw_one(got, sizeof got, 2, NULL, 0, (long long)x), want)) bad++;
  }
  CHECK_EQ_INT(bad, 0);
  CHECK(strcmp(jw_one(got, sizeof got, 0, "%.3f", -0.0, 0), "-0.000") == 0);
  CHECK(strcmp(jw_one(got, sizeof got, 0, "%.3f", -0.0004, 0), "-0.000") == 0);
  snprintf(want, sizeof want, "%.3f", 1e300);
  CHECK(strcmp(jw_one(got, sizeof got, 0, "%.3f", 1e300, 0), want) == 0);
  CHECK(strcmp(jw_one(got, sizeof got, 0, "%.6g", 0.1, 0), "0.1") == 0);
  CHECK(strcmp(jw_one(got, sizeof got, 1, NULL, -0.0, 0), "-0") == 0);
  CHECK(strcmp(jw_one(got, sizeof got, 2, NULL, 0, LLONG_MIN), "-9223372036854775808") == 0);
}

/* A held writer: nothing reaches the file until the top-level value ends
 * (or bf_jw_file, bf_jw_flush), in order, across BF_JW_BUF-sized pieces;
 * the text is the same as an unheld writer's. */
static void writer_held(void) {
  char *text[2] = {NULL, NULL};
  size_t len[2] = {0, 0};
  for (int held = 0; held < 2; held++) {
    FILE *f = open_memstream(&text[held], &len[held]);
    bf_jw w;
    bf_jw_init(&w, f);
    if (held) bf_jw_hold(&w);
    bf_jw_obj(&w);
    bf_jw_kstr(&w, "a", "x<y");
    fflush(f);
    if (held) CHECK_EQ_INT(len[held], 0); /* gathered, not written */
    bf_jw_key(&w, "rows");
    bf_jw_arr(&w);
    for (int i = 0; i < 2000; i++) { /* ~40 KiB: many full buffers */
      bf_jw_pad(&w, "\n");
      bf_jw_obj(&w);
      bf_jw_kint(&w, "i", i);
      bf_jw_key(&w, "t");
      bf_jw_numf(&w, "%.3f", i / 7.0);
      bf_jw_kstr(&w, "name", i % 3 ? "plain" : "q\"\xe2\x80\xa8\xff");
      bf_jw_end(&w);
    }
    bf_jw_end(&w);
    bf_jw_key(&w, "own");
    FILE *g = bf_jw_file(&w); /* written out first, then the caller's value */
    CHECK(g == f);
    if (!g) return;
    fflush(f);
    CHECK(len[held] > 40000 && text[held][len[held] - 1] == ':');
    fputs("{\"own\":1}", g);
    bf_jw_kint(&w, "z", 1);
    bf_jw_flush(&w);
    fflush(f);
    CHECK(len[held] > 10 && strcmp(text[held] + len[held] - 6, ",\"z\":1") == 0);
    bf_jw_end(&w); /* the top level closed: written at once */
    fflush(f);
    CHECK(text[held][len[held] - 1] == '}');
    fputc('\n', f);
    fclose(f);
  }
  CHECK(len[0] == len[1] && memcmp(text[0], text[1], len[0]) == 0);
  CHECK(text[1] && strncmp(text[1], "{\"a\":\"x\\u003cy\",\"rows\":[\n{\"i\":0,\"t\":0.000,\"name\":\"q\\\"\\u2028\xef\xbf\xbd\"}", 60) == 0);
  free(text[0]);
  free(text[1]);
}

int main(void) {
  uint32_t cp = 0;
  numbers_as_printf();
  writer_held();
  streaming_writer();
  writer_rows();
  reader();
  const unsigned char ok2[] = {0xc3, 0xa9}, ok4[] = {0xf0, 0x9f, 0x98, 0x80};
  const unsigned char overlong[] = {0xc0, 0xaf}, surrogate[] = {0xed, 0xa0, 0x80}, big[] = {0xf4, 0x90, 0x80, 0x80};
  CHECK_EQ_INT(bf_utf8_seq(ok2, 2, &cp), 2);
  CHECK_EQ_INT(cp, 0xe9);
  CHECK_EQ_INT(bf_utf8_seq(ok4, 4, &cp), 4);
  CHECK_EQ_INT(cp, 0x1f600);
  CHECK_EQ_INT(bf_utf8_seq(ok4, 3, &cp), 0); /* truncated */
  CHECK_EQ_INT(bf_utf8_seq(overlong, 2, &cp), 0);
  CHECK_EQ_INT(bf_utf8_seq(surrogate, 3, &cp), 0);
  CHECK_EQ_INT(bf_utf8_seq(big, 4, &cp), 0); /* > U+10FFFF */

  CHECK(esc_is("plain", "plain"));
  CHECK(esc_is("a\"b\\c", "a\\\"b\\\\c"));
  CHECK(esc_is("\n\r\t\x01\x7f", "\\n\\r\\t\\u0001\\u007f"));
  CHECK(esc_is("</script>&", "\\u003c/script\\u003e\\u0026"));
  CHECK(esc_is("\xe2\x80\xa8\xe2\x80\xa9", "\\u2028\\u2029"));
  CHECK(esc_is("caf\xc3\xa9", "caf\xc3\xa9")); /* valid UTF-8 passes as is */
  size_t before = bf_json_replaced();
  CHECK(esc_is("a\xff" "b\xc0\xaf", "a\xef\xbf\xbd" "b\xef\xbf\xbd\xef\xbf\xbd"));
  CHECK_EQ_INT(bf_json_replaced() - before, 3);

  CHECK(num_is(3, "3"));
  CHECK(num_is(-0.5, "-0.5"));
  CHECK(num_is(NAN, "null"));
  CHECK(num_is(INFINITY, "null"));
  CHECK(num_is(1.0 / 3, "0.333333333"));

  CHECK_EQ_INT(check("{}"), 0);
  CHECK_EQ_INT(check(" {\"a\": [1, -2.5e+3, true, null, {\"b\": \"\\u00e9\\n\"}]} "), 0);
  CHECK_EQ_INT(check("[]"), -EINVAL);            /* not an object */
  CHECK_EQ_INT(check("{\"a\":1,}"), -EINVAL);     /* trailing comma */
  CHECK_EQ_INT(check("{\"a\":01}"), -EINVAL);     /* leading zero */
  CHECK_EQ_INT(check("{\"a\":\"x\ty\"}"), -EINVAL); /* raw control in a string */
  CHECK_EQ_INT(check("{\"a\":1} x"), -EINVAL);    /* something after it */
  CHECK_EQ_INT(check("{\"a\":1,\"a\":2}"), -EINVAL); /* duplicate key */
  bf_err why = BF_ERR_INIT;
  const char *const reserved[] = {"id", NULL};
  CHECK_EQ_INT(bf_json_check_object("{\"id\":1}", reserved, &why), -EINVAL);
  CHECK(strstr(why.msg, "id") != NULL);
  CHECK_EQ_INT(bf_json_check_object("{\"ids\":1}", reserved, &why), 0);
  char deep[200] = "{\"a\":";
  for (int i = 0; i < 70; i++) strcat(deep, "[");
  CHECK_EQ_INT(check(deep), -EINVAL); /* nesting beyond 64 */

  /* property: any bytes, escaped, make a value the checker accepts */
  unsigned seed = 99;
  int refused = 0;
  for (int n = 0; n < 20000; n++) {
    char raw[24];
    int len = 1 + rand_r(&seed) % 22;
    for (int i = 0; i < len; i++) raw[i] = (char)(1 + rand_r(&seed) % 255);
    raw[len] = 0;
    char *e = bf_json_escape(raw);
    char doc[200];
    snprintf(doc, sizeof doc, "{\"k\":\"%s\"}", e ? e : "");
    if (!e || check(doc) != 0) refused++;
    free(e);
  }
  CHECK_EQ_INT(refused, 0);
  return CHECK_DONE();
}
