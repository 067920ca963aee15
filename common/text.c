/* text.c — UTF-8 checking and the inert terminal form of untrusted text. */
#include <string.h>

#include "text.h"

size_t bf_utf8_seq(const unsigned char *p, size_t avail, uint32_t *cp) {
  if (!avail) return 0;
  unsigned c = p[0];
  if (c < 0x80) {
    *cp = c;
    return 1;
  }
  size_t n;
  uint32_t v, min;
  if (c >= 0xC2 && c <= 0xDF) {
    n = 2, v = c & 0x1F, min = 0x80;
  } else if (c >= 0xE0 && c <= 0xEF) {
    n = 3, v = c & 0x0F, min = 0x800;
  } else if (c >= 0xF0 && c <= 0xF4) {
    n = 4, v = c & 0x07, min = 0x10000;
  } else {
    return 0;
  }
  if (avail < n) return 0;
  for (size_t i = 1; i < n; i++) {
    if ((p[i] & 0xC0) != 0x80) return 0;
    v = (v << 6) | (p[i] & 0x3F);
  }
  if (v < min || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) return 0;
  *cp = v;
  return n;
}

int bf_text_is_control(uint32_t cp) {
  return cp < 0x20 || cp == 0x7F || (cp >= 0x80 && cp <= 0x9F) || (cp >= 0x202A && cp <= 0x202E) ||
         (cp >= 0x2066 && cp <= 0x2069) || cp == 0x200E || cp == 0x200F || cp == 0x061C ||
         cp == 0x2028 || cp == 0x2029; /* line and paragraph separators: a terminal may break the line */
}

/* The escape for the sequence at p of n bytes (n == 0: one invalid byte). */
static size_t escape(const unsigned char *p, size_t n, uint32_t cp, char out[16]) {
  static const char hexd[] = "0123456789abcdef";
  if (n == 0) {
    out[0] = '\\', out[1] = 'x', out[2] = hexd[p[0] >> 4], out[3] = hexd[p[0] & 15];
    return 4;
  }
  switch (cp) {
    case '\n': memcpy(out, "\\n", 2); return 2;
    case '\r': memcpy(out, "\\r", 2); return 2;
    case '\t': memcpy(out, "\\t", 2); return 2;
    default: break;
  }
  if (cp < 0x80) {
    out[0] = '\\', out[1] = 'x', out[2] = hexd[cp >> 4], out[3] = hexd[cp & 15];
    return 4;
  }
  out[0] = '\\', out[1] = 'u';
  for (int i = 0; i < 4; i++) out[2 + i] = hexd[(cp >> (12 - 4 * i)) & 15];
  return 6;
}

/* Calls put(ud, bytes, n) for s's inert form; returns 1 when anything was
 * escaped. */
static int inert_walk(const char *s, void (*put)(void *, const char *, size_t), void *ud) {
  const unsigned char *p = (const unsigned char *)s;
  size_t left = strlen(s);
  int changed = 0;
  while (left) {
    uint32_t cp = 0;
    size_t n = bf_utf8_seq(p, left, &cp);
    if (n && !bf_text_is_control(cp)) {
      put(ud, (const char *)p, n);
    } else {
      char e[16];
      put(ud, e, escape(p, n, cp, e));
      changed = 1;
      if (!n) n = 1;
    }
    p += n;
    left -= n;
  }
  return changed;
}

int bf_inert_put(const char *s, void (*put)(void *ud, const char *bytes, size_t n), void *ud) {
  return s ? inert_walk(s, put, ud) : 0;
}

typedef struct bufw {
  char *buf;
  size_t len, at;
  int cut;
} bufw;

static void buf_put(void *ud, const char *b, size_t n) {
  bufw *w = ud;
  if (w->cut) return;
  /* keep room for "…" (3 bytes) and the NUL; never split a sequence */
  if (w->at + n + 4 > w->len) {
    w->cut = 1;
    return;
  }
  memcpy(w->buf + w->at, b, n);
  w->at += n;
}

static void null_put(void *ud, const char *b, size_t n) {
  (void)ud, (void)b, (void)n;
}

const char *bf_inert(const char *s, char *buf, size_t len) {
  if (!s) return "";
  if (!inert_walk(s, null_put, NULL)) return s;
  if (len < 4) return "";
  bufw w = {buf, len, 0, 0};
  inert_walk(s, buf_put, &w);
  if (w.cut) {
    memcpy(buf + w.at, "…", 3);
    w.at += 3;
  }
  buf[w.at] = 0;
  return buf;
}

static void file_put(void *ud, const char *b, size_t n) { fwrite(b, 1, n, (FILE *)ud); }

void bf_fputs_inert(FILE *f, const char *s) {
  if (s) inert_walk(s, file_put, f);
}

void bf_fputs_inert_lines(FILE *f, const char *s) {
  while (s && *s) {
    size_t n = strcspn(s, "\n\t");
    char seg[512];
    while (n) { /* in pieces that never split a UTF-8 sequence */
      size_t k = n < sizeof seg - 1 ? n : sizeof seg - 1;
      while (k < n && k > 1 && ((unsigned char)s[k] & 0xC0) == 0x80) k--;
      memcpy(seg, s, k);
      seg[k] = 0;
      bf_fputs_inert(f, seg);
      s += k;
      n -= k;
    }
    if (*s) fputc(*s++, f);
  }
}
