/* test_session_interp.c — reading extra.python (untrusted JSON from any
 * database, imported or copied) and telling two sessions' interpreters apart:
 * exact cases, malformed input, and random mutations that must never read
 * out of bounds or yield control characters. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "correlate.h"

static bf_session_info mk(int64_t id, const char *ver, const char *extra) {
  bf_session_info in;
  memset(&in, 0, sizeof in);
  in.id = id;
  in.python_version = ver;
  in.extra_json = extra;
  return in;
}

static void interp(const char *extra, const char *col_ver, char *exe, size_t el, char *ver, size_t vl) {
  bf_session_info in = mk(1, col_ver, extra);
  bf_session_interp(&in, exe, el, ver, vl);
}

static int inert(const char *s) {
  for (; *s; s++)
    if ((unsigned char)*s < 0x20 || *s == 0x7f) return 0;
  return 1;
}

int main(void) {
  char exe[256], ver[64];

  /* the python object after other keys, nested values and escapes */
  interp("{\"late_ticks\":3,\"nat\":{\"a\":[1,{\"b\":\"}\"},null,true]},\"s\":\"x\\\"y\","
         "\"python\":{\"version\":\"3.11.2\",\"prefix\":\"/usr\",\"executable\":\"/usr/bin/python3.11\"}}",
         "3.11.7", exe, sizeof exe, ver, sizeof ver);
  CHECK(strcmp(exe, "/usr/bin/python3.11") == 0);
  CHECK(strcmp(ver, "3.11.2") == 0); /* extra.python wins over the column */

  /* \u escapes: UTF-8, surrogate pairs, lone surrogates, control characters */
  interp("{\"python\":{\"executable\":\"/h/\\u00e9\\ud83d\\ude00\\ud800x\\n\\u001b[31m\\/\"}}", NULL, exe,
         sizeof exe, ver, sizeof ver);
  CHECK(strcmp(exe, "/h/\xc3\xa9\xf0\x9f\x98\x80\xef\xbf\xbdx??[31m/") == 0);
  CHECK(ver[0] == 0);

  /* raw control bytes in a (non-conforming) string are shown as '?' */
  interp("{\"python\":{\"executable\":\"/a\x1b]0;x\x07\"}}", NULL, exe, sizeof exe, ver, sizeof ver);
  CHECK(strcmp(exe, "/a?]0;x?") == 0);

  /* truncation keeps whole characters and a terminator */
  interp("{\"python\":{\"executable\":\"/0123456789abcdef\"}}", NULL, exe, 8, ver, sizeof ver);
  CHECK(strcmp(exe, "/012345") == 0);

  /* no extra, or no python object: the column's version, no executable */
  interp(NULL, "3.12.1", exe, sizeof exe, ver, sizeof ver);
  CHECK(exe[0] == 0 && strcmp(ver, "3.12.1") == 0);
  interp("{\"python\":\"/usr/bin/python3\"}", "3.12.1", exe, sizeof exe, ver, sizeof ver);
  CHECK(exe[0] == 0 && strcmp(ver, "3.12.1") == 0);
  interp("{\"python\":{\"executable\":42}}", NULL, exe, sizeof exe, ver, sizeof ver);
  CHECK(exe[0] == 0 && ver[0] == 0);

  /* malformed input is "not recorded", never a crash */
  static const char *bad[] = {"", "{", "{\"python\"", "{\"python\":", "{\"python\":{\"executable\":\"/x",
                              "{\"a\" 1,\"python\":{\"executable\":\"/x\"}}", "[\"python\"]",
                              "{\"a\":\"\\q\",\"python\":{\"executable\":\"/x\"}}",
                              "{\"a\":\"\\u12\",\"python\":{}}", "{,}", "{\"a\":}", "nul"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    interp(bad[i], NULL, exe, sizeof exe, ver, sizeof ver);
    CHECK(exe[0] == 0 && ver[0] == 0);
  }
  /* nesting deeper than the reader follows */
  char deep[400];
  size_t k = 0;
  k += (size_t)snprintf(deep, sizeof deep, "{\"a\":");
  for (int i = 0; i < 100; i++) deep[k++] = '[';
  for (int i = 0; i < 100; i++) deep[k++] = ']';
  snprintf(deep + k, sizeof deep - k, ",\"python\":{\"executable\":\"/x\"}}");
  interp(deep, NULL, exe, sizeof exe, ver, sizeof ver);
  CHECK(exe[0] == 0);

  /* differ: version or executable, and only what both recorded */
  const char *a = "{\"python\":{\"version\":\"3.11.7\",\"executable\":\"/p/3.11.7/bin/python3.11\"}}";
  const char *b = "{\"python\":{\"version\":\"3.11.2\",\"executable\":\"/usr/bin/python3.11\"}}";
  const char *b2 = "{\"python\":{\"version\":\"3.11.2\",\"executable\":\"/opt/py/bin/python3.11\"}}";
  bf_session_info sa = mk(3, "3.11.7", a), sb = mk(4, "3.11.2", b), sb2 = mk(5, "3.11.2", b2);
  bf_session_info old = mk(6, "3.11.2", NULL), imp = mk(7, NULL, NULL);
  bf_err why = BF_ERR_INIT;
  CHECK(bf_sessions_interp_differ(&sa, &sb, &why) == 1);
  CHECK(strstr(why.msg, "sessions 3 and 4") && strstr(why.msg, "3.11.7") && strstr(why.msg, "/usr/bin/python3.11"));
  CHECK(strchr(why.msg, '\n') == NULL);
  CHECK(bf_sessions_interp_differ(&sb, &sb2, &why) == 1); /* same version, other file */
  CHECK(bf_sessions_interp_differ(&sb, &sb, &why) == 0 && why.msg[0] == 0);
  CHECK(bf_sessions_interp_differ(&sb, &old, &why) == 0); /* old session: version only */
  CHECK(bf_sessions_interp_differ(&sa, &old, &why) == 1);
  CHECK(bf_sessions_interp_differ(&sa, &imp, &why) == 0); /* nothing recorded */
  CHECK(bf_sessions_interp_differ(&sa, &sb, NULL) == 1);
  char line[64] = "session 4";
  bf_session_line_add_exe(&sb, &sa, line, sizeof line);
  CHECK(strcmp(line, "session 4 · /usr/bin/python3.11") == 0);
  char same[64] = "session 4";
  bf_session_line_add_exe(&sb, &sb, same, sizeof same);
  CHECK(strcmp(same, "session 4") == 0);

  /* random mutations of valid documents: bounded, terminated, inert */
  const char *seeds[] = {a, b, "{\"x\":[1,2,{\"y\":\"\\u00e9\\\"\"}],\"python\":{\"executable\":\"/\\ud83d\\ude00\"}}"};
  uint64_t r = 0x9E3779B97F4A7C15ull;
  char buf[256];
  for (int it = 0; it < 200000; it++) {
    const char *seed = seeds[it % 3];
    size_t n = strlen(seed);
    memcpy(buf, seed, n + 1);
    for (int m = 0; m < 1 + it % 4; m++) {
      r ^= r << 13, r ^= r >> 7, r ^= r << 17;
      size_t pos = (size_t)(r % n);
      buf[pos] = (char)(r >> 32);
      if (!buf[pos]) n = pos; /* a NUL shortens the document */
      if (!n) break;
    }
    char e2[32], v2[16];
    interp(buf, NULL, e2, sizeof e2, v2, sizeof v2);
    CHECK(strlen(e2) < sizeof e2 && strlen(v2) < sizeof v2 && inert(e2) && inert(v2));
    if (bf_check_failures) break;
  }
  return CHECK_DONE();
}
