/* pb.h — protobuf wire encoding by hand for core/'s exports: a growable
 * buffer with varint, fixed64, length-delimited and sub-message writers, and
 * an interned string table whose index 0 is "". An allocation failure sets
 * the sticky `oom` flag; the caller checks it once at the end. Not public. */
#ifndef BF_PB_H
#define BF_PB_H

#include <stdint.h>
#include <string.h>

#include "map.h"
#include "vec.h"

typedef struct bf_pb {
  uint8_t *b;
  size_t n, cap;
  int oom;
} bf_pb;

static inline void bf_pb_raw(bf_pb *p, const void *d, size_t n) {
  if (p->oom || n == 0) return;
  if (bf_vec_grow((void **)&p->b, &p->cap, p->n + n, 1, 4096)) {
    p->oom = 1;
    return;
  }
  memcpy(p->b + p->n, d, n);
  p->n += n;
}

static inline void bf_pb_varint(bf_pb *p, uint64_t v) {
  uint8_t buf[10];
  size_t n = 0;
  do {
    buf[n] = (uint8_t)(v & 0x7f);
    v >>= 7;
    if (v) buf[n] |= 0x80;
    n++;
  } while (v);
  bf_pb_raw(p, buf, n);
}

/* varint field (uint*, int32/int64 as two's complement, bool, enum) */
static inline void bf_pb_uint(bf_pb *p, int field, uint64_t v) {
  bf_pb_varint(p, (uint64_t)field << 3);
  bf_pb_varint(p, v);
}

static inline void bf_pb_fixed64(bf_pb *p, int field, uint64_t v) {
  uint8_t le[8];
  for (int i = 0; i < 8; i++) le[i] = (uint8_t)(v >> (8 * i));
  bf_pb_varint(p, (uint64_t)field << 3 | 1);
  bf_pb_raw(p, le, 8);
}

static inline void bf_pb_bytes(bf_pb *p, int field, const void *d, size_t n) {
  bf_pb_varint(p, (uint64_t)field << 3 | 2);
  bf_pb_varint(p, n);
  bf_pb_raw(p, d, n);
}

static inline void bf_pb_str(bf_pb *p, int field, const char *s) { bf_pb_bytes(p, field, s, strlen(s)); }

/* Append sub as a length-delimited field and empty sub for reuse. */
static inline void bf_pb_msg(bf_pb *p, int field, bf_pb *sub) {
  bf_pb_bytes(p, field, sub->b, sub->n);
  p->oom |= sub->oom;
  sub->n = 0;
}

static inline void bf_pb_free(bf_pb *p) {
  free(p->b);
  p->b = NULL;
  p->n = p->cap = 0;
}

/* Interned strings: each new string is copied and encoded once into `out`
 * as field `field`; indexes count from 0 in first-use order. */
typedef struct bf_pb_strtab {
  bf_pb out;
  int field;
  bf_map3 idx; /* (hash, length) → index of the first string with them */
  char **v;
  size_t n, cap;
} bf_pb_strtab;

static inline int32_t bf_pb_str_id(bf_pb_strtab *t, const char *s) {
  if (!s) s = "";
  size_t len = strlen(s);
  uint64_t h = bf_hash_str(s, len);
  int64_t *hit = bf_map3_get(&t->idx, (int64_t)h, (int64_t)len, 0);
  if (hit && strcmp(t->v[*hit], s) == 0) return (int32_t)*hit;
  char *copy = strdup(s);
  if (!copy || bf_vec_grow((void **)&t->v, &t->cap, t->n + 1, sizeof *t->v, 256)) {
    free(copy);
    t->out.oom = 1;
    return 0;
  }
  t->v[t->n] = copy;
  if (!hit && bf_map3_put(&t->idx, (int64_t)h, (int64_t)len, 0, (int64_t)t->n)) t->out.oom = 1;
  bf_pb_bytes(&t->out, t->field, s, len);
  return (int32_t)t->n++;
}

static inline void bf_pb_strtab_free(bf_pb_strtab *t) {
  for (size_t i = 0; i < t->n; i++) free(t->v[i]);
  free(t->v);
  bf_map3_free(&t->idx);
  bf_pb_free(&t->out);
}

#endif
