/* jsonw.c — the JSON writer of every machine-readable output, and the strict
 * checker of JSON that comes from outside (see jsonw.h). */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "jsonw.h"
#include "strbuf.h"
#include "text.h"

static size_t replaced; /* invalid UTF-8 bytes written as U+FFFD */

size_t bf_json_replaced(void) { return replaced; }

/* Calls put for the escaped inside of string s. */
static void escape_walk(const char *s, void (*put)(void *, const char *, size_t), void *ud) {
  static const char hexd[] = "0123456789abcdef";
  const unsigned char *p = (const unsigned char *)s;
  size_t left = strlen(s);
  while (left) {
    const unsigned char *run = p;
    /* the plain bytes, written in one go */
    while (left && *p >= 0x20 && *p < 0x80 && *p != '"' && *p != '\\' && *p != '<' && *p != '>' && *p != '&' &&
           *p != 0x7f) {
      p++;
      left--;
    }
    if (p > run) put(ud, (const char *)run, (size_t)(p - run));
    if (!left) break;
    uint32_t cp = 0;
    size_t n = bf_utf8_seq(p, left, &cp);
    char e[8];
    if (!n) {
      replaced++;
      put(ud, "\xEF\xBF\xBD", 3);
      n = 1;
    } else if (cp == '"') {
      put(ud, "\\\"", 2);
    } else if (cp == '\\') {
      put(ud, "\\\\", 2);
    } else if (cp == '\n') {
      put(ud, "\\n", 2);
    } else if (cp == '\r') {
      put(ud, "\\r", 2);
    } else if (cp == '\t') {
      put(ud, "\\t", 2);
    } else if (cp < 0x80 || cp == 0x2028 || cp == 0x2029) {
      e[0] = '\\', e[1] = 'u';
      for (int i = 0; i < 4; i++) e[2 + i] = hexd[(cp >> (12 - 4 * i)) & 15];
      put(ud, e, 6);
    } else {
      put(ud, (const char *)p, n);
    }
    p += n;
    left -= n;
  }
}

static void file_put(void *ud, const char *b, size_t n) { fwrite(b, 1, n, (FILE *)ud); }

void bf_json_str(FILE *f, const char *s) {
  if (!s) {
    fputs("null", f);
    return;
  }
  fputc('"', f);
  escape_walk(s, file_put, f);
  fputc('"', f);
}

static void grow_put(void *ud, const char *b, size_t n) { bf_strbuf_put(ud, b, n); }

char *bf_json_escape(const char *s) {
  bf_strbuf g = {0};
  bf_strbuf_put(&g, "", 0);
  if (s) escape_walk(s, grow_put, &g);
  if (g.oom) {
    free(g.s);
    return NULL;
  }
  return g.s;
}

void bf_json_num(FILE *f, double v) {
  if (!isfinite(v))
    fputs("null", f);
  else if (v == floor(v) && fabs(v) < 9e15)
    fprintf(f, "%.0f", v);
  else
    fprintf(f, "%.9g", v);
}

/* ---- the streaming writer ---- */

void bf_jw_init(bf_jw *w, FILE *f) {
  memset(w, 0, sizeof *w);
  w->f = f;
}

int bf_jw_mem(bf_jw *w) {
  bf_jw_init(w, NULL);
  w->f = open_memstream(&w->mem, &w->mem_len);
  return w->f ? 0 : -ENOMEM;
}

char *bf_jw_mem_done(bf_jw *w) {
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

/* Before a value: the comma, and the checks. 0 to go on. */
static int jw_value(bf_jw *w) {
  if (w->err) return -1;
  if (w->depth) {
    int in_obj = w->open[w->depth - 1] == '{';
    if (in_obj && !w->keyed) {
      w->err = -EINVAL; /* a value in an object needs its key */
      return -1;
    }
    if (!in_obj && w->items[w->depth - 1]) fputc(',', w->f);
    w->items[w->depth - 1] = 1;
  }
  if (w->pad) fputs(w->pad, w->f);
  w->pad = NULL;
  w->keyed = 0;
  return 0;
}

static void jw_open(bf_jw *w, int c) {
  if (jw_value(w)) return;
  if (w->depth >= BF_JW_DEPTH) {
    w->err = -EINVAL;
    return;
  }
  fputc(c, w->f);
  w->open[w->depth] = (unsigned char)c;
  w->items[w->depth++] = 0;
}

void bf_jw_obj(bf_jw *w) { jw_open(w, '{'); }
void bf_jw_arr(bf_jw *w) { jw_open(w, '['); }

void bf_jw_end(bf_jw *w) {
  if (w->err) return;
  if (!w->depth || w->keyed) {
    w->err = -EINVAL;
    return;
  }
  w->depth--;
  fputc(w->open[w->depth] == '{' ? '}' : ']', w->f);
}

void bf_jw_key(bf_jw *w, const char *key) {
  if (w->err) return;
  if (!w->depth || w->open[w->depth - 1] != '{' || w->keyed) {
    w->err = -EINVAL;
    return;
  }
  if (w->items[w->depth - 1]) fputc(',', w->f);
  if (w->pad) fputs(w->pad, w->f);
  w->pad = NULL;
  bf_json_str(w->f, key);
  fputc(':', w->f);
  w->items[w->depth - 1] = 1;
  w->keyed = 1;
}

void bf_jw_str(bf_jw *w, const char *s) {
  if (!jw_value(w)) bf_json_str(w->f, s);
}
void bf_jw_int(bf_jw *w, long long v) {
  if (!jw_value(w)) fprintf(w->f, "%lld", v);
}
void bf_jw_uint(bf_jw *w, unsigned long long v) {
  if (!jw_value(w)) fprintf(w->f, "%llu", v);
}
void bf_jw_num(bf_jw *w, double v) {
  if (!jw_value(w)) bf_json_num(w->f, v);
}
void bf_jw_numf(bf_jw *w, const char *fmt, double v) {
  if (jw_value(w)) return;
  if (isfinite(v))
    fprintf(w->f, fmt, v);
  else
    fputs("null", w->f);
}
void bf_jw_bool(bf_jw *w, int v) {
  if (!jw_value(w)) fputs(v ? "true" : "false", w->f);
}
void bf_jw_null(bf_jw *w) {
  if (!jw_value(w)) fputs("null", w->f);
}
void bf_jw_raw(bf_jw *w, const char *json) {
  if (!jw_value(w)) fputs(json, w->f);
}
void bf_jw_ints(bf_jw *w, const long long *v, size_t n) {
  if (w->err || !n) return;
  if (!w->depth || w->open[w->depth - 1] != '[') {
    w->err = -EINVAL; /* items of an array only */
    return;
  }
  /* formatted here and written at once: a flame page writes millions */
  char buf[512];
  size_t len = 0;
  for (size_t i = 0; i < n; i++) {
    if (len > sizeof buf - 24) {
      fwrite(buf, 1, len, w->f);
      len = 0;
    }
    if (w->items[w->depth - 1]) buf[len++] = ',';
    if (w->pad) { /* the caller's whitespace, as before any value */
      fwrite(buf, 1, len, w->f);
      len = 0;
      fputs(w->pad, w->f);
      w->pad = NULL;
    }
    w->items[w->depth - 1] = 1;
    unsigned long long u = v[i] < 0 ? 0ULL - (unsigned long long)v[i] : (unsigned long long)v[i];
    char tmp[24];
    size_t t = 0;
    do tmp[t++] = (char)('0' + u % 10);
    while (u /= 10);
    if (v[i] < 0) tmp[t++] = '-';
    while (t) buf[len++] = tmp[--t];
  }
  fwrite(buf, 1, len, w->f);
}
void bf_jw_pad(bf_jw *w, const char *ws) { w->pad = ws; }
FILE *bf_jw_file(bf_jw *w) { return jw_value(w) ? NULL : w->f; }

void bf_jw_kstr(bf_jw *w, const char *key, const char *s) {
  bf_jw_key(w, key);
  bf_jw_str(w, s);
}
void bf_jw_kint(bf_jw *w, const char *key, long long v) {
  bf_jw_key(w, key);
  bf_jw_int(w, v);
}
void bf_jw_kuint(bf_jw *w, const char *key, unsigned long long v) {
  bf_jw_key(w, key);
  bf_jw_uint(w, v);
}
void bf_jw_knum(bf_jw *w, const char *key, double v) {
  bf_jw_key(w, key);
  bf_jw_num(w, v);
}
void bf_jw_kbool(bf_jw *w, const char *key, int v) {
  bf_jw_key(w, key);
  bf_jw_bool(w, v);
}
void bf_jw_knull(bf_jw *w, const char *key) {
  bf_jw_key(w, key);
  bf_jw_null(w);
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
