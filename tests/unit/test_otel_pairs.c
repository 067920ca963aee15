/* test_otel_pairs.c — bf_otel_pairs, the reader of OTEL_RESOURCE_ATTRIBUTES
 * and OTEL_EXPORTER_OTLP_HEADERS lists: keys and values trimmed, values
 * percent-decoded and cut at the buffer's cap, parts without '=' skipped,
 * empty keys handed on (the caller decides), a nonzero return stops. */
#include <string.h>

#include "check.h"
#include "otlp.h"

typedef struct seen {
  char all[512]; /* "k=v|" per pair */
  int stop_at;   /* stop (return 7) at this pair, 1-based; 0: never */
  int n;
} seen;

static int note(void *ud, const char *k, size_t klen, const char *v, size_t vlen) {
  seen *s = ud;
  size_t at = strlen(s->all);
  snprintf(s->all + at, sizeof s->all - at, "%.*s=%.*s|", (int)klen, k, (int)vlen, v);
  return ++s->n == s->stop_at ? 7 : 0;
}

static const char *pairs(const char *spec, size_t cap, int stop_at, int *rc) {
  static seen s;
  char dec[64];
  memset(&s, 0, sizeof s);
  s.stop_at = stop_at;
  *rc = bf_otel_pairs(spec, dec, cap < sizeof dec ? cap : sizeof dec, note, &s);
  return s.all;
}

int main(void) {
  int rc;
  CHECK(strcmp(pairs(NULL, 63, 0, &rc), "") == 0 && rc == 0);
  CHECK(strcmp(pairs("", 63, 0, &rc), "") == 0 && rc == 0);
  CHECK(strcmp(pairs(" a = 1 ,b=2", 63, 0, &rc), "a=1|b=2|") == 0 && rc == 0);
  CHECK(strcmp(pairs("team=prof%20ing,x=%41%4a%zz%4", 63, 0, &rc), "team=prof ing|x=AJ%zz%4|") == 0);
  CHECK(strcmp(pairs("noequals,,=v,k=", 63, 0, &rc), "=v|k=|") == 0); /* empty key handed on */
  CHECK(strcmp(pairs("k=a=b", 63, 0, &rc), "k=a=b|") == 0);             /* the first '=' splits */
  CHECK(strcmp(pairs("k=abcdef,l=xy", 3, 0, &rc), "k=abc|l=xy|") == 0);  /* cut at cap */
  CHECK(strcmp(pairs("a=1,b=2,c=3", 63, 2, &rc), "a=1|b=2|") == 0 && rc == 7);
  return CHECK_DONE();
}
