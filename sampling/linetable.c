/* linetable.c — decode CPython line tables read from a target into address
 * ranges: co_lnotab (3.8/3.9, byte offsets), the 3.10 co_linetable (byte
 * offsets) and the 3.11+ location table (code units). Input is untrusted.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>

#include "smp_int.h"
#include "vec.h"

typedef struct rbuf {
  smp_line_range *r;
  size_t n, cap;
} rbuf;

static int push(rbuf *b, uint64_t start, uint64_t end, int64_t line) {
  if (end <= start) return 0;
  if (end > UINT32_MAX) return -EINVAL;
  if (line < -1 || line > INT32_MAX) line = -1;
  /* merge with the previous range when contiguous and same line */
  if (b->n && b->r[b->n - 1].end == start && b->r[b->n - 1].line == line) {
    b->r[b->n - 1].end = (uint32_t)end;
    return 0;
  }
  if (bf_vec_grow((void **)&b->r, &b->cap, b->n + 1, sizeof *b->r, 16)) return -ENOMEM;
  b->r[b->n++] = (smp_line_range){(uint32_t)start, (uint32_t)end, (int32_t)line};
  return 0;
}

/* 3.8/3.9: (addr_incr, line_incr signed) pairs; line_incr applies to
 * addresses >= the accumulated address. */
static int dec_lnotab(rbuf *b, const unsigned char *t, size_t len, int64_t line) {
  uint64_t addr = 0, start = 0;
  for (size_t i = 0; i + 1 < len; i += 2) {
    uint64_t na = addr + t[i];
    int8_t dl = (int8_t)t[i + 1];
    if (na != addr) {
      if (push(b, start, na, line) < 0) return -EINVAL;
      start = na;
    }
    addr = na;
    line += dl;
  }
  return push(b, start, (uint64_t)UINT32_MAX, line);
}

/* 3.10: (sdelta unsigned, ldelta signed; -128 = no line) pairs. */
static int dec_310(rbuf *b, const unsigned char *t, size_t len, int64_t line) {
  uint64_t addr = 0;
  for (size_t i = 0; i + 1 < len; i += 2) {
    uint64_t end = addr + t[i];
    int8_t dl = (int8_t)t[i + 1];
    int64_t l;
    if (dl == -128) {
      l = -1;
    } else {
      line += dl;
      l = line;
    }
    if (push(b, addr, end, l) < 0) return -EINVAL;
    addr = end;
  }
  return 0;
}

static int read_varint(const unsigned char *t, size_t len, size_t *i, uint64_t *out) {
  uint64_t v = 0;
  unsigned shift = 0;
  for (;;) {
    if (*i >= len || shift > 42) return -EINVAL;
    unsigned char c = t[(*i)++];
    v |= (uint64_t)(c & 63) << shift;
    shift += 6;
    if (!(c & 64)) break;
  }
  *out = v;
  return 0;
}

static int read_svarint(const unsigned char *t, size_t len, size_t *i, int64_t *out) {
  uint64_t u;
  if (read_varint(t, len, i, &u) < 0) return -EINVAL;
  *out = (u & 1) ? -(int64_t)(u >> 1) : (int64_t)(u >> 1);
  return 0;
}

/* 3.11+: entries start with a byte 1CCCCLLL (code, length-1 in code units). */
static int dec_locations(rbuf *b, const unsigned char *t, size_t len, int64_t line) {
  uint64_t addr = 0;
  size_t i = 0;
  while (i < len) {
    unsigned char h = t[i++];
    if (!(h & 0x80)) return -EINVAL;
    int code = (h >> 3) & 15;
    uint64_t n = (uint64_t)(h & 7) + 1;
    int64_t l = line;
    uint64_t skip;
    int64_t d;
    switch (code) {
      case 15: /* no location */
        l = -1;
        break;
      case 14: /* long form: line delta, end line delta, col+1, end col+1 */
        if (read_svarint(t, len, &i, &d) < 0) return -EINVAL;
        line += d;
        l = line;
        for (int k = 0; k < 3; k++)
          if (read_varint(t, len, &i, &skip) < 0) return -EINVAL;
        break;
      case 13: /* no column */
        if (read_svarint(t, len, &i, &d) < 0) return -EINVAL;
        line += d;
        l = line;
        break;
      case 10: case 11: case 12: /* one-line form: two column bytes */
        line += code - 10;
        l = line;
        if (i + 2 > len) return -EINVAL;
        i += 2;
        break;
      default: /* short form: one column byte */
        if (i + 1 > len) return -EINVAL;
        i += 1;
        break;
    }
    if (line < INT32_MIN || line > INT32_MAX) return -EINVAL;
    if (push(b, addr, addr + n, l) < 0) return -EINVAL;
    addr += n;
  }
  return 0;
}

int smp_linetable_decode(int kind, const unsigned char *tab, size_t len, int firstlineno,
                         smp_line_range **ranges, size_t *n) {
  rbuf b = {0};
  int rc;
  if (len > SMP_MAX_LINETABLE) return -EINVAL;
  switch (kind) {
    case SMP_LT_LNOTAB: rc = dec_lnotab(&b, tab, len, firstlineno); break;
    case SMP_LT_310: rc = dec_310(&b, tab, len, firstlineno); break;
    case SMP_LT_LOCATIONS: rc = dec_locations(&b, tab, len, firstlineno); break;
    default: rc = -EINVAL;
  }
  if (rc < 0 && rc != -ENOMEM && b.n) rc = 0; /* keep the part decoded so far */
  if (rc < 0) {
    free(b.r);
    return rc;
  }
  *ranges = b.r;
  *n = b.n;
  return 0;
}

int32_t smp_linetable_lookup(const smp_line_range *r, size_t n, uint32_t addr) {
  size_t lo = 0, hi = n;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (addr < r[mid].start)
      hi = mid;
    else if (addr >= r[mid].end)
      lo = mid + 1;
    else
      return r[mid].line;
  }
  return -1;
}
