/* locals.c — local variables of a sampled frame (see locals.h). On 3.8-3.12
 * the offsets come from the CPython headers of each version (offsetof on
 * release builds, x86-64); the frame's localsplus array is its last member,
 * so its offset is checked against the layout's frame size before any read.
 * On 3.13+ they come from the target's own _Py_DebugOffsets, each checked
 * against its section's size. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "locals.h"
#include "smp_int.h"

typedef struct loc_layout {
  int minor;
  uint64_t fr_localsplus;         /* PyFrameObject.f_localsplus / _PyInterpreterFrame.localsplus */
  uint64_t co_nlocals;            /* int: co_nlocals (<3.11) / co_nlocalsplus; 0: the names' count */
  uint64_t co_names;              /* tuple: co_varnames (<3.11) / co_localsplusnames */
  uint64_t co_kinds;              /* bytes: co_localspluskinds (3.11+), 0 = none */
  uint64_t tuple_size, tuple_item; /* PyTupleObject ob_size, ob_item */
  uint64_t float_val;             /* PyFloatObject.ob_fval */
  uint64_t long_size, long_digit; /* ob_size (<3.12) or lv_tag (3.12+); 30-bit digits */
  uint64_t tp_flags;              /* PyTypeObject.tp_flags */
} loc_layout;

#define TUPLE_SIZE 16
#define TUPLE_ITEM 24
#define FLOAT_VAL 16
#define LONG_SIZE 16
#define LONG_DIGIT 24
#define TP_FLAGS 168
#define VALUES TUPLE_SIZE, TUPLE_ITEM, FLOAT_VAL, LONG_SIZE, LONG_DIGIT, TP_FLAGS

static const loc_layout tab[] = {
    {8, 360, 28, 72, 0, VALUES},   {9, 360, 28, 72, 0, VALUES},   {10, 352, 28, 72, 0, VALUES},
    {11, 72, 76, 96, 104, VALUES}, {12, 72, 72, 96, 104, VALUES},
};

#define TPFLAGS_HEAPTYPE (1UL << 9)
#define CO_FAST_LOCAL 0x20

static int fail(bf_smp *h, int rc, const char *msg) {
  snprintf(h->err, sizeof h->err, "%s", msg);
  return rc;
}

static int rd(bf_smp *h, uint64_t addr, void *dst, size_t len) {
  if (!addr || addr < 4096) return -EIO;
  return smp_read(h, addr, dst, len);
}

/* offset off of a field of width w lies within a section of size sz. */
static int inside(uint64_t off, uint64_t w, uint64_t sz) { return sz <= 65536 && off + w <= sz; }

/* The layout of a 3.13+ target from its own _Py_DebugOffsets, read again
 * from _PyRuntime (once per dump). Returns 0, -ENOTSUP (a version without
 * positions here, or offsets outside their sections) or a read error. */
static int layout_from_target(bf_smp *h, int minor, loc_layout *out) {
  smp_dbg_pos d; /* generated in layouts.c (DBG_POS_GENERATED) */
  if (smp_dbg_pos_of(minor, &d) < 0) return -ENOTSUP;
  const smp_dbg_pos *D = &d;
  unsigned char b[1024];
  size_t len = D->long_digit + 8;
  int rc = rd(h, h->runtime_addr, b, len);
  if (rc < 0) return rc;
  if (memcmp(b, "xdebugpy", 8) != 0 || (uint32_t)rd64(b + 8) != h->lay.version_hex) return -ENOTSUP;
#define DO(f) rd64(b + D->f)
  uint64_t fr = DO(fr_size), co = DO(co_size), tp = DO(tp_size), tu = DO(tuple_size);
  uint64_t fl = DO(float_size), lo = DO(long_size);
  loc_layout L = {minor, DO(fr_localsplus), 0, DO(co_names), DO(co_kinds), DO(tuple_ob_size),
                  DO(tuple_item), DO(float_val), DO(long_tag), DO(long_digit), DO(tp_flags)};
#undef DO
  if (!inside(L.fr_localsplus, 8, fr) || !inside(L.co_names, 8, co) || !inside(L.co_kinds, 8, co) ||
      !inside(L.tp_flags, 8, tp) || !inside(L.tuple_size, 8, tu) || L.tuple_item < 16 ||
      L.tuple_item > tu || !inside(L.float_val, 8, fl) || !inside(L.long_size, 8, lo) ||
      !inside(L.long_digit, 4, lo) || L.long_size >= L.long_digit || L.co_names == L.co_kinds)
    return -ENOTSUP;
  *out = L;
  return 0;
}

/* Type name (static types only carry the value layouts we know). */
static int type_of(bf_smp *h, const loc_layout *L, uint64_t obj, char *name, size_t len, int *heap) {
  unsigned char b[8];
  int rc;
  if ((rc = rd(h, obj + h->lay.ob_type, b, 8)) < 0) return rc;
  uint64_t tp = rd64(b);
  unsigned char tb[8];
  if ((rc = rd(h, tp + h->lay.tp_name, tb, 8)) < 0) return rc;
  if ((rc = rd(h, tp + L->tp_flags, b, 8)) < 0) return rc;
  *heap = (rd64(b) & TPFLAGS_HEAPTYPE) != 0;
  char raw[64];
  memset(raw, 0, sizeof raw);
  /* tp_name is a C string of unknown length: read what fits, page by page */
  uint64_t at = rd64(tb);
  size_t got = 0;
  while (got < sizeof raw - 1) {
    size_t chunk = 4096 - (size_t)((at + got) & 4095);
    if (chunk > sizeof raw - 1 - got) chunk = sizeof raw - 1 - got;
    if ((rc = rd(h, at + got, raw + got, chunk)) < 0) {
      if (!got) return rc;
      break;
    }
    if (memchr(raw + got, 0, chunk)) break;
    got += chunk;
  }
  raw[sizeof raw - 1] = 0;
  size_t k = 0;
  for (; raw[k] && k < len - 1; k++) name[k] = (raw[k] >= 0x20 && raw[k] < 0x7f) ? raw[k] : '?';
  name[k] = 0;
  return k ? 0 : -EIO;
}

/* Append a Python-like repr of code point c (a str's character). */
static void put_char(char *o, size_t *n, size_t cap, uint32_t c, char quote) {
  char tmp[16];
  size_t k = 0;
  if (c == (uint32_t)quote || c == '\\') {
    tmp[k++] = '\\';
    tmp[k++] = (char)c;
  } else if (c == '\n') {
    k = (size_t)snprintf(tmp, sizeof tmp, "\\n");
  } else if (c == '\t') {
    k = (size_t)snprintf(tmp, sizeof tmp, "\\t");
  } else if (c == '\r') {
    k = (size_t)snprintf(tmp, sizeof tmp, "\\r");
  } else if (c < 0x20 || c == 0x7f) {
    k = (size_t)snprintf(tmp, sizeof tmp, "\\x%02x", c);
  } else {
    /* already UTF-8 encoded by the caller */
    tmp[k++] = (char)c;
  }
  if (*n + k < cap) {
    memcpy(o + *n, tmp, k);
    *n += k;
  }
}

/* Python's choice: single quotes unless the text has ' and no ". */
static char quote_for(const char *s, size_t len) {
  int sq = memchr(s, '\'', len) != NULL, dq = memchr(s, '"', len) != NULL;
  return sq && !dq ? '"' : '\'';
}

static char *repr_str(const char *s) {
  size_t cap = BF_SMP_LOCAL_STR_MAX * 4 + 16, n = 0, chars = 0;
  char *o = malloc(cap);
  if (!o) return NULL;
  char q = quote_for(s, strlen(s));
  o[n++] = q;
  const unsigned char *p = (const unsigned char *)s;
  while (*p && chars < BF_SMP_LOCAL_STR_MAX) {
    if (*p < 0x80) {
      put_char(o, &n, cap - 8, *p++, q);
    } else { /* copy one UTF-8 sequence as is (smp_read_str made it valid) */
      size_t l = *p >= 0xf0 ? 4 : *p >= 0xe0 ? 3 : 2;
      for (size_t i = 0; i < l && *p && n < cap - 8; i++) o[n++] = (char)*p++;
    }
    chars++;
  }
  o[n++] = q;
  if (*p) {
    memcpy(o + n, "...", 3);
    n += 3;
  }
  o[n] = 0;
  return o;
}

static char *repr_bytes(const unsigned char *b, size_t len, int cut) {
  size_t cap = len * 4 + 16, n = 0;
  char *o = malloc(cap);
  if (!o) return NULL;
  char q = quote_for((const char *)b, len);
  o[n++] = 'b';
  o[n++] = q;
  for (size_t i = 0; i < len; i++) {
    unsigned c = b[i];
    if (c >= 0x80)
      n += (size_t)snprintf(o + n, cap - n, "\\x%02x", c);
    else
      put_char(o, &n, cap - 4, c, q);
  }
  o[n++] = q;
  if (cut) {
    memcpy(o + n, "...", 3);
    n += 3;
  }
  o[n] = 0;
  return o;
}

/* Value of an int / bool: exact up to 60 bits; *big when larger. */
static int long_value(bf_smp *h, const loc_layout *L, uint64_t obj, long long *v, int *big) {
  unsigned char b[8 + 8], d[8];
  int rc;
  if ((rc = rd(h, obj + L->long_size, b, 8)) < 0) return rc;
  if ((rc = rd(h, obj + L->long_digit, d, 8)) < 0) return rc;
  uint64_t tagw = rd64(b);
  memcpy(b + 8, d, 8);
  int64_t nd;
  int neg;
  if (L->minor >= 12) { /* lv_tag: ndigits << 3 | sign (0 +, 1 zero, 2 -) */
    unsigned sign = tagw & 3;
    if (sign == 3) return -EIO;
    nd = (int64_t)(tagw >> 3);
    neg = sign == 2;
    if (sign == 1) nd = 0;
  } else {
    int64_t sz = (int64_t)tagw;
    neg = sz < 0;
    nd = neg ? -sz : sz;
  }
  *big = 0;
  if (nd < 0 || nd > (1 << 20)) return -EIO;
  if (nd > 2) {
    *big = (int)nd;
    return 0;
  }
  uint32_t d0 = rd32(b + 8), d1 = rd32(b + 12);
  if ((d0 >> 30) || (nd == 2 && (d1 >> 30))) return -EIO;
  uint64_t u = nd == 0 ? 0 : nd == 1 ? d0 : ((uint64_t)d1 << 30 | d0);
  *v = neg ? -(long long)u : (long long)u;
  return 0;
}

/* The repr of a simple object, or NULL (not shown) — *type always set. */
static char *value_repr(bf_smp *h, const loc_layout *L, uint64_t obj, char *type, size_t tlen) {
  int heap = 0;
  if (type_of(h, L, obj, type, tlen, &heap) < 0) {
    snprintf(type, tlen, "?");
    return NULL;
  }
  if (heap) return NULL; /* a subclass: its layout may not be the base's */
  char buf[64];
  if (strcmp(type, "NoneType") == 0) return strdup("None");
  if (strcmp(type, "int") == 0 || strcmp(type, "bool") == 0) {
    long long v;
    int big;
    if (long_value(h, L, obj, &v, &big) < 0) return NULL;
    if (big)
      snprintf(buf, sizeof buf, "<int of %d digits of 30 bits, not shown>", big);
    else if (type[0] == 'b')
      snprintf(buf, sizeof buf, "%s", v ? "True" : "False");
    else
      snprintf(buf, sizeof buf, "%lld", v);
    return strdup(buf);
  }
  if (strcmp(type, "float") == 0) {
    unsigned char b[8];
    double d;
    if (rd(h, obj + L->float_val, b, 8) < 0) return NULL;
    memcpy(&d, b, 8);
    if (isnan(d)) return strdup("nan");
    if (isinf(d)) return strdup(d > 0 ? "inf" : "-inf");
    for (int prec = 1; prec <= 17; prec++) { /* the shortest that reads back, like repr */
      snprintf(buf, sizeof buf, "%.*g", prec, d);
      if (strtod(buf, NULL) == d) break;
    }
    if (!strpbrk(buf, ".eE")) strcat(buf, ".0");
    return strdup(buf);
  }
  if (strcmp(type, "str") == 0) {
    char *s = NULL;
    if (smp_read_str(h, obj, &s) < 0) return strdup("<str too long or unreadable>");
    char *r = repr_str(s);
    free(s);
    return r;
  }
  if (strcmp(type, "bytes") == 0) {
    unsigned char b[8];
    if (rd(h, obj + h->lay.bytes_size, b, 8) < 0) return NULL;
    int64_t len = (int64_t)rd64(b);
    if (len < 0 || len > (1LL << 40)) return NULL;
    size_t show = len > BF_SMP_LOCAL_STR_MAX ? BF_SMP_LOCAL_STR_MAX : (size_t)len;
    unsigned char data[BF_SMP_LOCAL_STR_MAX];
    if (show && rd(h, obj + h->lay.bytes_sval, data, show) < 0) return NULL;
    return repr_bytes(data, show, (size_t)len > show);
  }
  return NULL;
}

void bf_smp_locals_free(bf_smp_local *v, size_t n) {
  if (!v) return;
  for (size_t i = 0; i < n; i++) {
    free(v[i].name);
    free(v[i].type);
    free(v[i].repr);
  }
  free(v);
}

int bf_smp_locals(bf_smp *h, const bf_smp_frame *f, bf_smp_local **out, size_t *n) {
  *out = NULL;
  *n = 0;
  if (!h->frames || f < h->frames || f >= h->frames + h->nframes || !h->frame_addr)
    return fail(h, -EINVAL, "not a frame of the last sample");
  if (f->flags & BF_SMP_FRAME_NATIVE) return fail(h, -EINVAL, "a native frame has no Python locals");
  if (!h->build || strcmp(h->build, "release") != 0)
    return fail(h, -ENOTSUP, "local variables are read from release builds of CPython only");
  int minor = (int)((h->lay.version_hex >> 16) & 0xff);
  const loc_layout *L = NULL;
  loc_layout from_target;
  for (size_t i = 0; i < sizeof tab / sizeof *tab; i++)
    if (tab[i].minor == minor) L = &tab[i];
  /* localsplus is the frame's last member: the layout's frame size says
   * whether this interpreter agrees with the headers the table came from */
  if (L && L->fr_localsplus + 8 != h->lay.fr_size) L = NULL;
  if (!L && minor >= 13) {
    int rc = layout_from_target(h, minor, &from_target);
    if (rc == -ESRCH) return fail(h, rc, "the target exited");
    if (rc == 0) L = &from_target;
  }
  if (!L) {
    snprintf(h->err, sizeof h->err, "reading local variables is not supported for Python %s", h->version);
    return -ENOTSUP;
  }
  uint64_t fa = h->frame_addr[f - h->frames];
  if (!fa) return fail(h, -EINVAL, "not a Python frame (the stack was cut there)");
  const smp_code *c = (const smp_code *)((const char *)f->code - offsetof(smp_code, pub));
  uint64_t code = c->addr;
  unsigned char b[16];
  int rc;
  if ((rc = rd(h, code + L->co_names, b, 8)) < 0) return fail(h, rc, "code object unreadable");
  uint64_t names = rd64(b);
  if ((rc = rd(h, names + L->tuple_size, b, 8)) < 0) return fail(h, rc, "variable names unreadable");
  int64_t nnames = (int64_t)rd64(b);
  /* co_nlocalsplus is not in _Py_DebugOffsets; it is len(co_localsplusnames) */
  int32_t nloc = nnames > 65536 ? -1 : (int32_t)nnames;
  if (L->co_nlocals) {
    if ((rc = rd(h, code + L->co_nlocals, b, 4)) < 0) return fail(h, rc, "code object unreadable");
    nloc = (int32_t)rd32(b);
  }
  if (nloc < 0 || nloc > 65536 || nnames < 0 || nnames > 65536 || nnames < (L->co_kinds ? nloc : 0))
    return fail(h, -EIO, "code object changed while being read");
  int64_t count = L->co_kinds ? nloc : (nloc < nnames ? nloc : nnames);
  if (count > BF_SMP_LOCALS_MAX) count = BF_SMP_LOCALS_MAX;
  unsigned char kinds[BF_SMP_LOCALS_MAX];
  memset(kinds, CO_FAST_LOCAL, sizeof kinds);
  if (L->co_kinds && count) {
    if ((rc = rd(h, code + L->co_kinds, b, 8)) < 0) return fail(h, rc, "code object unreadable");
    uint64_t kb = rd64(b);
    if ((rc = rd(h, kb + h->lay.bytes_size, b, 8)) < 0) return fail(h, rc, "code object unreadable");
    if ((int64_t)rd64(b) < count) return fail(h, -EIO, "code object changed while being read");
    if ((rc = rd(h, kb + h->lay.bytes_sval, kinds, (size_t)count)) < 0) return fail(h, rc, "code object unreadable");
  }
  uint64_t vals[BF_SMP_LOCALS_MAX], nameptr[BF_SMP_LOCALS_MAX];
  if (count) {
    if ((rc = rd(h, fa + L->fr_localsplus, vals, (size_t)count * 8)) < 0) return fail(h, rc, "frame unreadable");
    if ((rc = rd(h, names + L->tuple_item, nameptr, (size_t)count * 8)) < 0)
      return fail(h, rc, "variable names unreadable");
  }
  bf_smp_local *v = calloc((size_t)count + 1, sizeof *v);
  if (!v) return -ENOMEM;
  size_t k = 0;
  for (int64_t i = 0; i < count; i++) {
    if (!(kinds[i] & CO_FAST_LOCAL)) continue; /* a closure cell or free variable only */
    uint64_t obj = vals[i];
    if (h->lay.executable_tagged) { /* a _PyStackRef (3.14+) */
      if ((obj & 3) == 3) continue; /* a tagged int: the interpreter's, not an object */
      obj &= ~(uint64_t)3;          /* the refcount tag; PyStackRef_NULL is 1 */
    }
    if (!obj) continue; /* unbound */
    char *name = NULL;
    if (smp_read_str(h, nameptr[i], &name) < 0) name = strdup("?");
    char type[64];
    char *repr = value_repr(h, L, obj, type, sizeof type);
    v[k].name = name;
    v[k].type = strdup(type);
    v[k].repr = repr;
    if (!v[k].name || !v[k].type) {
      bf_smp_locals_free(v, k + 1);
      return -ENOMEM;
    }
    k++;
  }
  *out = v;
  *n = k;
  return 0;
}
