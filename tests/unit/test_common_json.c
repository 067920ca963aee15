/* test_common_json.c — the bottom layer's text helpers: UTF-8 decoding
 * against the Unicode table of well-formed sequences, the JSON writer's
 * escapes (quotes, controls, HTML-unsafe <>&, U+2028/9, invalid bytes as
 * U+FFFD and counted), numbers, the strict checker (RFC 8259 cases, duplicate
 * and reserved keys, depth), and a property: anything the writer escapes,
 * the checker accepts. */
#include <errno.h>
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
  const char *want = "{\"name\":\"a\\u003cb\\u003e\\u0026\\u2028\xef\xbf\xbd\\\"\",\"n\":-3,\"x\":0.5,\"ok\":true,"
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
}

int main(void) {
  uint32_t cp = 0;
  streaming_writer();
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
