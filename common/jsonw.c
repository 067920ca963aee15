/* jsonw.c — the JSON writer of every machine-readable output, and the strict
 * checker of JSON that comes from outside (see jsonw.h). */
#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "jsonw.h"
#include "strbuf.h"
#include "text.h"

static size_t replaced; /* invalid UTF-8 bytes written as U+FFFD */

size_t bf_json_replaced(void) { return replaced; }

/* ---- output: one writer call's bytes gathered, then one stdio call ----
 *
 * Every value and key goes through a jout on the caller's stack: a chrome
 * export writes ~15 items per event, and a stdio call per comma, quote and
 * colon (and printf for every number) was most of its time. */

typedef struct jout {
  FILE *f;       /* where the bytes go, or */
  bf_strbuf *sb; /* (bf_json_escape) */
  char *b;       /* gathered: a writer's buf, or the caller's array */
  size_t n, cap;
} jout;

static void jo_write(jout *o, const char *s, size_t n) {
  if (o->f)
    fwrite(s, 1, n, o->f);
  else
    bf_strbuf_put(o->sb, s, n);
}

static inline void jo_flush(jout *o) {
  if (o->n) jo_write(o, o->b, o->n);
  o->n = 0;
}

static inline void jo_put(jout *o, const char *s, size_t n) {
  if (n > o->cap - o->n) {
    jo_flush(o);
    if (n > o->cap) {
      jo_write(o, s, n);
      return;
    }
  }
  memcpy(o->b + o->n, s, n);
  o->n += n;
}

static inline void jo_c(jout *o, char c) {
  if (o->n == o->cap) jo_flush(o);
  o->b[o->n++] = c;
}

static inline void jo_s(jout *o, const char *s) { jo_put(o, s, strlen(s)); }

/* 1: the byte is written as itself. 0 (NUL), controls, DEL, '"', '\\', '<',
 * '>', '&' and every byte >= 0x80 are looked at by jo_escaped. */
static const unsigned char plain[256] = {
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, /* 0x00 */
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, /* 0x10 */
    1, 1, 0, 1, 1, 1, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1, /* 0x20: '"' '&' */
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 1, 0, 1, /* 0x30: '<' '>' */
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, /* 0x40 */
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 1, 1, 1, /* 0x50: '\\' */
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, /* 0x60 */
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, /* 0x70: DEL */
};

/* The escaped inside of string s. */
static void jo_escaped(jout *o, const char *s) {
  static const char hexd[] = "0123456789abcdef";
  const unsigned char *p = (const unsigned char *)s;
  for (;;) {
    const unsigned char *run = p;
    while (plain[*p]) p++; /* the plain bytes, written in one go; stops at the NUL */
    if (p > run) jo_put(o, (const char *)run, (size_t)(p - run));
    if (!*p) return;
    uint32_t cp = 0;
    /* 4 is enough for any sequence, and bf_utf8_seq stops at the first
     * byte that is not a continuation, so it never reads past the NUL */
    size_t n = bf_utf8_seq(p, 4, &cp);
    char e[8];
    if (!n) {
      replaced++;
      jo_put(o, "\xEF\xBF\xBD", 3);
      n = 1;
    } else if (cp == '"') {
      jo_put(o, "\\\"", 2);
    } else if (cp == '\\') {
      jo_put(o, "\\\\", 2);
    } else if (cp == '\n') {
      jo_put(o, "\\n", 2);
    } else if (cp == '\r') {
      jo_put(o, "\\r", 2);
    } else if (cp == '\t') {
      jo_put(o, "\\t", 2);
    } else if (cp < 0x80 || cp == 0x2028 || cp == 0x2029) {
      e[0] = '\\', e[1] = 'u';
      for (int i = 0; i < 4; i++) e[2 + i] = hexd[(cp >> (12 - 4 * i)) & 15];
      jo_put(o, e, 6);
    } else {
      jo_put(o, (const char *)p, n);
    }
    p += n;
  }
}

static inline void jo_str(jout *o, const char *s) {
  if (!s) {
    jo_put(o, "null", 4);
    return;
  }
  jo_c(o, '"');
  jo_escaped(o, s);
  jo_c(o, '"');
}

/* As printf's %llu. */
static inline void jo_uint(jout *o, unsigned long long u) {
  char t[24];
  size_t i = sizeof t;
  do t[--i] = (char)('0' + u % 10);
  while (u /= 10);
  jo_put(o, t + i, sizeof t - i);
}

/* As printf's %lld. */
static inline void jo_int(jout *o, long long v) {
  if (v < 0) jo_c(o, '-');
  jo_uint(o, v < 0 ? 0ULL - (unsigned long long)v : (unsigned long long)v);
}

/* v as printf's "%.{places}f" would write it (round half to even on the
 * exact binary value, "-" on any negative v, "-0.000" included), for
 * |v| * 10^places below 2^52; 0 when outside that (the caller uses printf).
 * p = v * scale rounded, e its exact error (fma), so p + e is exactly v *
 * scale; p's fraction is a multiple of its ulp (<= 0.5 below 2^52), so only
 * a fraction of exactly 1/2 needs e to decide. */
static int jo_fixed(jout *o, double v, int places) {
  static const double scale_d[] = {1, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9};
  static const unsigned long long scale_u[] = {1, 10, 100, 1000, 10000, 100000, 1000000, 10000000, 100000000,
                                               1000000000};
  double p = v * scale_d[places];
  if (!(fabs(p) < 4503599627370496.0)) return 0; /* 2^52; also NaN */
  double e = fma(v, scale_d[places], -p);
  long long k = (long long)p; /* toward zero, exact here */
  double f = p - (double)k;   /* exact: |f| < 1 and a multiple of p's ulp */
  if (f > 0.5 || (f == 0.5 && (e > 0 || (e == 0 && (k & 1)))))
    k++;
  else if (f < -0.5 || (f == -0.5 && (e < 0 || (e == 0 && (k & 1)))))
    k--;
  unsigned long long u = k < 0 ? 0ULL - (unsigned long long)k : (unsigned long long)k;
  char t[40];
  size_t i = sizeof t;
  if (places) {
    unsigned long long frac = u % scale_u[places];
    u /= scale_u[places];
    for (int d = 0; d < places; d++, frac /= 10) t[--i] = (char)('0' + frac % 10);
    t[--i] = '.';
  }
  do t[--i] = (char)('0' + u % 10);
  while (u /= 10);
  if (signbit(v)) t[--i] = '-';
  jo_put(o, t + i, sizeof t - i);
  return 1;
}

/* As bf_json_num. */
static void jo_num(jout *o, double v) {
  if (!isfinite(v))
    jo_put(o, "null", 4);
  else if (v == floor(v) && fabs(v) < 9e15) { /* "%.0f": the integer, exact here */
    if (v == 0 && signbit(v)) jo_c(o, '-');
    jo_int(o, (long long)v);
  } else {
    char t[40];
    int n = snprintf(t, sizeof t, "%.9g", v); /* at most 16 bytes */
    jo_put(o, t, (size_t)n);
  }
}

void bf_json_str(FILE *f, const char *s) {
  char b[256];
  jout o = {f, NULL, b, 0, sizeof b};
  jo_str(&o, s);
  jo_flush(&o);
}

char *bf_json_escape(const char *s) {
  bf_strbuf g = {0};
  bf_strbuf_put(&g, "", 0);
  if (s) {
    char b[256];
    jout o = {NULL, &g, b, 0, sizeof b};
    jo_escaped(&o, s);
    jo_flush(&o);
  }
  if (g.oom) {
    free(g.s);
    return NULL;
  }
  return g.s;
}

void bf_json_num(FILE *f, double v) {
  char b[64];
  jout o = {f, NULL, b, 0, sizeof b};
  jo_num(&o, v);
  jo_flush(&o);
}

/* ---- the streaming writer ---- */

void bf_jw_init(bf_jw *w, FILE *f) {
  memset(w, 0, offsetof(bf_jw, buf)); /* buf needs no clearing */
  w->f = f;
}

void bf_jw_hold(bf_jw *w) { w->hold = 1; }

int bf_jw_mem(bf_jw *w) {
  bf_jw_init(w, NULL);
  w->f = open_memstream(&w->mem, &w->mem_len);
  return w->f ? 0 : -ENOMEM;
}

char *bf_jw_mem_done(bf_jw *w) {
  bf_jw_flush(w);
  int bad = fclose(w->f) != 0 || w->err || w->depth;
  char *s = w->mem;
  w->f = NULL;
  w->mem = NULL;
  if (bad) {
    free(s);
    return NULL;
  }
  return s;
}

/* Before a value: the comma and pad into o, and the checks. 0 to go on. */
static inline int jw_value(bf_jw *w, jout *o) {
  if (w->err) return -1;
  if (w->depth) {
    int in_obj = w->open[w->depth - 1] == '{';
    if (in_obj && !w->keyed) {
      w->err = -EINVAL; /* a value in an object needs its key */
      return -1;
    }
    if (!in_obj && w->items[w->depth - 1]) jo_c(o, ',');
    w->items[w->depth - 1] = 1;
  }
  if (w->pad) jo_s(o, w->pad);
  w->pad = NULL;
  w->keyed = 0;
  return 0;
}

/* The comma, pad and "key": into o. 0 when its value may follow. */
static inline int jw_key(bf_jw *w, jout *o, const char *key) {
  if (w->err) return -1;
  if (!w->depth || w->open[w->depth - 1] != '{' || w->keyed) {
    w->err = -EINVAL;
    return -1;
  }
  if (w->items[w->depth - 1]) jo_c(o, ',');
  if (w->pad) jo_s(o, w->pad);
  w->pad = NULL;
  jo_str(o, key);
  jo_c(o, ':');
  w->items[w->depth - 1] = 1;
  w->keyed = 1;
  return 0;
}

static inline void jw_open(bf_jw *w, jout *o, int c) {
  if (jw_value(w, o)) return;
  if (w->depth >= BF_JW_DEPTH) {
    w->err = -EINVAL;
    return;
  }
  jo_c(o, (char)c);
  w->open[w->depth] = (unsigned char)c;
  w->items[w->depth++] = 0;
}

/* The number of places of a "%.Nf" format (N one digit), else -1. */
static inline int fixed_places(const char *fmt) {
  if (fmt[0] == '%' && fmt[1] == '.' && fmt[2] >= '0' && fmt[2] <= '9' && fmt[3] == 'f' && !fmt[4])
    return fmt[2] - '0';
  return -1;
}

static void jo_numf(jout *o, const char *fmt, double v) {
  if (!isfinite(v)) {
    jo_put(o, "null", 4);
    return;
  }
  int places = fixed_places(fmt);
  if (places >= 0 && jo_fixed(o, v, places)) return;
  char t[64];
  int n = snprintf(t, sizeof t, fmt, v);
  if (n >= 0 && (size_t)n < sizeof t) {
    jo_put(o, t, (size_t)n);
  } else if (n > 0) { /* a long one ("%.3f" of 1e300): straight to the file */
    jo_flush(o);
    fprintf(o->f, fmt, v);
  }
}

/* Each call gathers its bytes in the writer's buf and writes them once at
 * its end (a held writer: when buf is full or the top-level value ends). */
#define JO(w) jout o = {(w)->f, NULL, (w)->buf, (w)->buf_n, sizeof(w)->buf}

static inline void jw_done(bf_jw *w, jout *o) {
  if (!w->hold || !w->depth) jo_flush(o);
  w->buf_n = o->n;
}

void bf_jw_flush(bf_jw *w) {
  JO(w);
  jo_flush(&o);
  w->buf_n = 0;
}

void bf_jw_obj(bf_jw *w) {
  JO(w);
  jw_open(w, &o, '{');
  jw_done(w, &o);
}
void bf_jw_arr(bf_jw *w) {
  JO(w);
  jw_open(w, &o, '[');
  jw_done(w, &o);
}

void bf_jw_end(bf_jw *w) {
  if (w->err) return;
  if (!w->depth || w->keyed) {
    w->err = -EINVAL;
    return;
  }
  w->depth--;
  JO(w);
  jo_c(&o, w->open[w->depth] == '{' ? '}' : ']');
  jw_done(w, &o);
}

void bf_jw_key(bf_jw *w, const char *key) {
  JO(w);
  jw_key(w, &o, key);
  jw_done(w, &o);
}

void bf_jw_str(bf_jw *w, const char *s) {
  JO(w);
  if (!jw_value(w, &o)) jo_str(&o, s);
  jw_done(w, &o);
}
void bf_jw_int(bf_jw *w, long long v) {
  JO(w);
  if (!jw_value(w, &o)) jo_int(&o, v);
  jw_done(w, &o);
}
void bf_jw_uint(bf_jw *w, unsigned long long v) {
  JO(w);
  if (!jw_value(w, &o)) jo_uint(&o, v);
  jw_done(w, &o);
}
void bf_jw_num(bf_jw *w, double v) {
  JO(w);
  if (!jw_value(w, &o)) jo_num(&o, v);
  jw_done(w, &o);
}
void bf_jw_numf(bf_jw *w, const char *fmt, double v) {
  JO(w);
  if (!jw_value(w, &o)) jo_numf(&o, fmt, v);
  jw_done(w, &o);
}
void bf_jw_bool(bf_jw *w, int v) {
  JO(w);
  if (!jw_value(w, &o)) jo_s(&o, v ? "true" : "false");
  jw_done(w, &o);
}
void bf_jw_null(bf_jw *w) {
  JO(w);
  if (!jw_value(w, &o)) jo_put(&o, "null", 4);
  jw_done(w, &o);
}
void bf_jw_raw(bf_jw *w, const char *json) {
  JO(w);
  if (!jw_value(w, &o)) jo_s(&o, json);
  jw_done(w, &o);
}
void bf_jw_ints(bf_jw *w, const long long *v, size_t n) {
  if (w->err || !n) return;
  if (!w->depth || w->open[w->depth - 1] != '[') {
    w->err = -EINVAL; /* items of an array only */
    return;
  }
  JO(w); /* a flame page writes millions: written in blocks */
  for (size_t i = 0; i < n; i++) {
    if (w->items[w->depth - 1]) jo_c(&o, ',');
    if (w->pad) jo_s(&o, w->pad); /* the caller's whitespace, as before any value */
    w->pad = NULL;
    w->items[w->depth - 1] = 1;
    jo_int(&o, v[i]);
  }
  jw_done(w, &o);
}
void bf_jw_pad(bf_jw *w, const char *ws) { w->pad = ws; }
FILE *bf_jw_file(bf_jw *w) {
  JO(w);
  int bad = jw_value(w, &o);
  jo_flush(&o); /* the caller writes to the file next, held or not */
  w->buf_n = 0;
  return bad ? NULL : w->f;
}

/* key + value: the pair in one write */
void bf_jw_kstr(bf_jw *w, const char *key, const char *s) {
  JO(w);
  if (!jw_key(w, &o, key) && !jw_value(w, &o)) jo_str(&o, s);
  jw_done(w, &o);
}
void bf_jw_kint(bf_jw *w, const char *key, long long v) {
  JO(w);
  if (!jw_key(w, &o, key) && !jw_value(w, &o)) jo_int(&o, v);
  jw_done(w, &o);
}
void bf_jw_kuint(bf_jw *w, const char *key, unsigned long long v) {
  JO(w);
  if (!jw_key(w, &o, key) && !jw_value(w, &o)) jo_uint(&o, v);
  jw_done(w, &o);
}
void bf_jw_knum(bf_jw *w, const char *key, double v) {
  JO(w);
  if (!jw_key(w, &o, key) && !jw_value(w, &o)) jo_num(&o, v);
  jw_done(w, &o);
}
void bf_jw_kbool(bf_jw *w, const char *key, int v) {
  JO(w);
  if (!jw_key(w, &o, key) && !jw_value(w, &o)) jo_s(&o, v ? "true" : "false");
  jw_done(w, &o);
}
void bf_jw_knull(bf_jw *w, const char *key) {
  JO(w);
  if (!jw_key(w, &o, key) && !jw_value(w, &o)) jo_put(&o, "null", 4);
  jw_done(w, &o);
}
void bf_jw_kpair(bf_jw *w, const char *key, double a, double b) {
  bf_jw_key(w, key);
  bf_jw_arr(w);
  bf_jw_num(w, a);
  bf_jw_num(w, b);
  bf_jw_end(w);
}

/* ---- the checker ---------------------------------------------------------- */

#define MAX_DEPTH 64

typedef struct jp {
  const unsigned char *s, *p, *end;
  bf_err *why;
  int failed;
} jp;

static int jfail(jp *j, const char *fmt, ...) {
  if (j->failed) return -1;
  j->failed = 1;
  char m[160];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(m, sizeof m, fmt, ap);
  va_end(ap);
  bf_err_set(j->why, -EINVAL, "not JSON at byte %zu: %s", (size_t)(j->p - j->s), m);
  return -1;
}

static void ws(jp *j) {
  while (j->p < j->end && (*j->p == ' ' || *j->p == '\t' || *j->p == '\n' || *j->p == '\r')) j->p++;
}

static int hex4(const unsigned char *p, uint32_t *v) {
  *v = 0;
  for (int i = 0; i < 4; i++) {
    unsigned c = p[i];
    int d = c >= '0' && c <= '9' ? (int)(c - '0') : c >= 'a' && c <= 'f' ? (int)(c - 'a' + 10)
          : c >= 'A' && c <= 'F' ? (int)(c - 'A' + 10) : -1;
    if (d < 0) return -1;
    *v = (*v << 4) | (uint32_t)d;
  }
  return 0;
}

/* A string at j->p ('"'); OUT: its raw span (between the quotes). */
static int jstring(jp *j, const unsigned char **a, const unsigned char **b) {
  j->p++;
  *a = j->p;
  while (j->p < j->end && *j->p != '"') {
    unsigned c = *j->p;
    if (c < 0x20) return jfail(j, "a control character inside a string");
    if (c == '\\') {
      if (j->end - j->p < 2) return jfail(j, "unfinished escape");
      c = j->p[1];
      if (c == 'u') {
        uint32_t v, lo;
        if (j->end - j->p < 6 || hex4(j->p + 2, &v)) return jfail(j, "bad \\u escape");
        j->p += 6;
        if (v >= 0xD800 && v <= 0xDBFF) {
          if (j->end - j->p < 6 || j->p[0] != '\\' || j->p[1] != 'u' || hex4(j->p + 2, &lo) || lo < 0xDC00 ||
              lo > 0xDFFF)
            return jfail(j, "unpaired surrogate escape");
          j->p += 6;
        } else if (v >= 0xDC00 && v <= 0xDFFF) {
          return jfail(j, "unpaired surrogate escape");
        }
        continue;
      }
      if (!strchr("\"\\/bfnrt", (int)c) || !c) return jfail(j, "bad escape \\%c", c >= 0x20 && c < 0x7f ? c : '?');
      j->p += 2;
      continue;
    }
    uint32_t cp;
    size_t n = bf_utf8_seq(j->p, (size_t)(j->end - j->p), &cp);
    if (!n) return jfail(j, "invalid UTF-8");
    j->p += n;
  }
  if (j->p >= j->end) return jfail(j, "unterminated string");
  *b = j->p;
  j->p++;
  return 0;
}

static int jdigits(jp *j) {
  const unsigned char *a = j->p;
  while (j->p < j->end && *j->p >= '0' && *j->p <= '9') j->p++;
  return j->p > a ? 0 : jfail(j, "expected a digit");
}

static int jnumber(jp *j) {
  if (*j->p == '-') j->p++;
  if (j->p < j->end && *j->p == '0')
    j->p++;
  else if (jdigits(j))
    return -1;
  if (j->p < j->end && *j->p == '.') {
    j->p++;
    if (jdigits(j)) return -1;
  }
  if (j->p < j->end && (*j->p == 'e' || *j->p == 'E')) {
    j->p++;
    if (j->p < j->end && (*j->p == '+' || *j->p == '-')) j->p++;
    if (jdigits(j)) return -1;
  }
  return 0;
}

static int jvalue(jp *j, int depth);

static int jword(jp *j, const char *w) {
  size_t n = strlen(w);
  if ((size_t)(j->end - j->p) < n || memcmp(j->p, w, n) != 0) return jfail(j, "unexpected character");
  j->p += n;
  return 0;
}

typedef struct keyspan {
  const unsigned char *a, *b;
} keyspan;

/* An object at j->p; top-level objects (keys != NULL) report their keys. */
static int jobject(jp *j, int depth, keyspan **keys, size_t *nkeys) {
  j->p++;
  ws(j);
  if (j->p < j->end && *j->p == '}') {
    j->p++;
    return 0;
  }
  for (;;) {
    ws(j);
    if (j->p >= j->end || *j->p != '"') return jfail(j, "expected a string key");
    const unsigned char *a, *b;
    if (jstring(j, &a, &b)) return -1;
    if (keys) {
      keyspan *nk = realloc(*keys, (*nkeys + 1) * sizeof **keys);
      if (!nk) return jfail(j, "out of memory");
      *keys = nk;
      nk[(*nkeys)++] = (keyspan){a, b};
    }
    ws(j);
    if (j->p >= j->end || *j->p != ':') return jfail(j, "expected ':'");
    j->p++;
    if (jvalue(j, depth + 1)) return -1;
    ws(j);
    if (j->p < j->end && *j->p == ',') {
      j->p++;
      continue;
    }
    if (j->p < j->end && *j->p == '}') {
      j->p++;
      return 0;
    }
    return jfail(j, "expected ',' or '}'");
  }
}

static int jvalue(jp *j, int depth) {
  if (depth > MAX_DEPTH) return jfail(j, "nested deeper than %d", MAX_DEPTH);
  ws(j);
  if (j->p >= j->end) return jfail(j, "expected a value");
  const unsigned char *a, *b;
  switch (*j->p) {
    case '{': return jobject(j, depth, NULL, NULL);
    case '[':
      j->p++;
      ws(j);
      if (j->p < j->end && *j->p == ']') {
        j->p++;
        return 0;
      }
      for (;;) {
        if (jvalue(j, depth + 1)) return -1;
        ws(j);
        if (j->p < j->end && *j->p == ',') {
          j->p++;
          continue;
        }
        if (j->p < j->end && *j->p == ']') {
          j->p++;
          return 0;
        }
        return jfail(j, "expected ',' or ']'");
      }
    case '"': return jstring(j, &a, &b);
    case 't': return jword(j, "true");
    case 'f': return jword(j, "false");
    case 'n': return jword(j, "null");
    default:
      if (*j->p == '-' || (*j->p >= '0' && *j->p <= '9')) return jnumber(j);
      return jfail(j, "unexpected character");
  }
}

/* 1 when the raw (escaped) key span spells name exactly. Keys with escapes
 * are compared after a simple decode of \uXXXX ASCII and \" \\ \/. */
static int key_is(const keyspan *k, const char *name) {
  const unsigned char *p = k->a;
  size_t i = 0, n = strlen(name);
  while (p < k->b) {
    unsigned c = *p++;
    if (c == '\\' && p < k->b) {
      unsigned e = *p++;
      if (e == 'u' && k->b - p >= 4) {
        uint32_t v;
        if (hex4(p, &v)) return 0;
        p += 4;
        c = v < 0x80 ? v : 0x100; /* non-ASCII never equals a key of ours */
      } else {
        c = e == 'n' ? '\n' : e == 't' ? '\t' : e == 'r' ? '\r' : e == 'b' ? '\b' : e == 'f' ? '\f' : e;
      }
    }
    if (i >= n || (unsigned char)name[i] != c) return 0;
    i++;
  }
  return i == n;
}

static int key_eq(const keyspan *x, const keyspan *y) {
  return x->b - x->a == y->b - y->a && memcmp(x->a, y->a, (size_t)(x->b - x->a)) == 0;
}

int bf_json_check_object(const char *text, const char *const *reserved, bf_err *why) {
  bf_err_clear(why);
  if (!text) return bf_err_set(why, -EINVAL, "no value");
  jp j = {(const unsigned char *)text, (const unsigned char *)text, (const unsigned char *)text + strlen(text),
          why, 0};
  keyspan *keys = NULL;
  size_t nkeys = 0;
  int rc = 0;
  ws(&j);
  if (j.p >= j.end || *j.p != '{') {
    jfail(&j, "expected an object '{'");
    rc = -EINVAL;
    goto out;
  }
  if (jobject(&j, 1, &keys, &nkeys)) {
    rc = -EINVAL;
    goto out;
  }
  ws(&j);
  if (j.p != j.end) {
    jfail(&j, "text after the object");
    rc = -EINVAL;
    goto out;
  }
  for (size_t i = 0; i < nkeys && !rc; i++) {
    for (size_t k = 0; reserved && reserved[k]; k++)
      if (key_is(&keys[i], reserved[k])) {
        bf_err_set(why, -EINVAL, "key \"%s\" is one of bifocal's own session fields", reserved[k]);
        rc = -EINVAL;
        break;
      }
    for (size_t k = 0; k < i && !rc; k++)
      if (key_eq(&keys[i], &keys[k])) {
        bf_err_set(why, -EINVAL, "key \"%.*s\" appears twice", (int)(keys[i].b - keys[i].a > 40 ? 40 : keys[i].b - keys[i].a),
                 (const char *)keys[i].a);
        rc = -EINVAL;
      }
  }
out:
  free(keys);
  return rc;
}

/* ---- the reader of stored metadata ---------------------------------------- */

static const char *jws(const char *p) {
  while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r') p++;
  return p;
}

const char *bf_json_string(const char *p, char *out, size_t len) {
  size_t n = 0;
  int full = 0; /* truncated: keep a prefix, never skip a character */
  if (*p++ != '"') return NULL;
  for (;;) {
    unsigned c = (unsigned char)*p++, cp;
    char tmp[4];
    size_t tl = 0;
    if (c == 0) return NULL;
    if (c == '"') break;
    if (c == '\\') {
      c = (unsigned char)*p++;
      if (c == 'u') {
        if (hex4((const unsigned char *)p, &cp)) return NULL;
        p += 4;
        if (cp >= 0xd800 && cp < 0xdc00 && p[0] == '\\' && p[1] == 'u') {
          unsigned lo;
          if (hex4((const unsigned char *)p + 2, &lo) == 0 && lo >= 0xdc00 && lo < 0xe000) {
            cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
            p += 6;
          }
        }
        if (cp >= 0xd800 && cp < 0xe000) cp = 0xfffd;
        if (cp < 0x20 || cp == 0x7f) tmp[tl++] = '?';
        else if (cp < 0x80) tmp[tl++] = (char)cp;
        else if (cp < 0x800) tmp[tl++] = (char)(0xc0 | cp >> 6), tmp[tl++] = (char)(0x80 | (cp & 0x3f));
        else if (cp < 0x10000)
          tmp[tl++] = (char)(0xe0 | cp >> 12), tmp[tl++] = (char)(0x80 | ((cp >> 6) & 0x3f)),
          tmp[tl++] = (char)(0x80 | (cp & 0x3f));
        else
          tmp[tl++] = (char)(0xf0 | cp >> 18), tmp[tl++] = (char)(0x80 | ((cp >> 12) & 0x3f)),
          tmp[tl++] = (char)(0x80 | ((cp >> 6) & 0x3f)), tmp[tl++] = (char)(0x80 | (cp & 0x3f));
      } else if (c == '"' || c == '\\' || c == '/') {
        tmp[tl++] = (char)c;
      } else if (strchr("bfnrt", (int)c) && c) {
        tmp[tl++] = '?';
      } else {
        return NULL;
      }
    } else {
      tmp[tl++] = c < 0x20 || c == 0x7f ? '?' : (char)c;
    }
    if (out && !full && n + tl < len) {
      memcpy(out + n, tmp, tl);
      n += tl;
    } else {
      full = 1;
    }
  }
  if (out && len) out[n] = 0;
  return p;
}

/* Skip one JSON value (bounded nesting); NULL when malformed. */
static const char *jskip(const char *p, int depth) {
  p = jws(p);
  if (depth > 32) return NULL;
  if (*p == '"') return bf_json_string(p, NULL, 0);
  if (*p == '{' || *p == '[') {
    char close = *p == '{' ? '}' : ']';
    p = jws(p + 1);
    if (*p == close) return p + 1;
    for (;;) {
      if (close == '}') {
        if (!(p = bf_json_string(jws(p), NULL, 0))) return NULL;
        p = jws(p);
        if (*p++ != ':') return NULL;
      }
      if (!(p = jskip(p, depth + 1))) return NULL;
      p = jws(p);
      if (*p == ',') {
        p++;
        continue;
      }
      return *p == close ? p + 1 : NULL;
    }
  }
  if (!*p) return NULL;
  const char *s = p;
  while (*p && strchr("+-.0123456789eEtruefalsn", *p)) p++;
  return p > s ? p : NULL;
}

int bf_json_find(const char *p, const char *key, const char **val) {
  char k[64];
  p = jws(p);
  if (*p++ != '{') return -1;
  p = jws(p);
  if (*p == '}') return -1;
  for (;;) {
    if (!(p = bf_json_string(jws(p), k, sizeof k))) return -1;
    p = jws(p);
    if (*p++ != ':') return -1;
    p = jws(p);
    if (strcmp(k, key) == 0) {
      *val = p;
      return 0;
    }
    if (!(p = jskip(p, 1))) return -1;
    p = jws(p);
    if (*p++ != ',') return -1;
  }
}

int bf_json_find_num(const char *obj, const char *path, double *v) {
  char key[64];
  const char *p = obj, *dot;
  for (;;) {
    dot = strchr(path, '.');
    size_t kl = dot ? (size_t)(dot - path) : strlen(path);
    if (kl >= sizeof key) return -1;
    memcpy(key, path, kl);
    key[kl] = 0;
    if (bf_json_find(p, key, &p)) return -1;
    if (!dot) break;
    path = dot + 1;
  }
  if (*p != '-' && (*p < '0' || *p > '9')) return -1; /* a number, not inf/nan/0x.. */
  char *end;
  double d = strtod(p, &end);
  if (end == p) return -1;
  *v = d;
  return 0;
}
