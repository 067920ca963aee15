/* map.c — the one hash map (see map.h). */
#include "map.h"

#include <errno.h>
#include <stdlib.h>

struct bf_map3_slot {
  int64_t a, b, c, v;
  int used;
};

uint64_t bf_hash_str(const char *s, size_t n) {
  uint64_t h = 1469598103934665603ULL;
  for (size_t i = 0; i < n; i++) {
    h ^= (unsigned char)s[i];
    h *= 1099511628211ULL;
  }
  return h;
}

uint64_t bf_hash3(int64_t a, int64_t b, int64_t c) {
  uint64_t h = (uint64_t)a * 0x9E3779B97F4A7C15ULL;
  h ^= (uint64_t)b + 0x7F4A7C159E3779B9ULL + (h << 6) + (h >> 2);
  h ^= (uint64_t)c * 0xC2B2AE3D27D4EB4FULL + (h << 6) + (h >> 2);
  h ^= h >> 31;
  h *= 0xBF58476D1CE4E5B9ULL;
  h ^= h >> 29;
  return h;
}

void bf_map3_free(bf_map3 *m) {
  free(m->slots);
  m->slots = NULL;
  m->cap = m->len = 0;
}

int64_t *bf_map3_get(const bf_map3 *m, int64_t a, int64_t b, int64_t c) {
  if (!m->cap) return NULL;
  size_t mask = m->cap - 1, i = bf_hash3(a, b, c) & mask;
  for (;;) {
    struct bf_map3_slot *s = &m->slots[i];
    if (!s->used) return NULL;
    if (s->a == a && s->b == b && s->c == c) return &s->v;
    i = (i + 1) & mask;
  }
}

static int map3_grow(bf_map3 *m) {
  size_t ncap = m->cap ? m->cap * 2 : 1024;
  struct bf_map3_slot *ns = calloc(ncap, sizeof *ns);
  if (!ns) return -ENOMEM;
  for (size_t j = 0; j < m->cap; j++) {
    struct bf_map3_slot *o = &m->slots[j];
    if (!o->used) continue;
    size_t i = bf_hash3(o->a, o->b, o->c) & (ncap - 1);
    while (ns[i].used) i = (i + 1) & (ncap - 1);
    ns[i] = *o;
  }
  free(m->slots);
  m->slots = ns;
  m->cap = ncap;
  return 0;
}

int bf_map3_put(bf_map3 *m, int64_t a, int64_t b, int64_t c, int64_t v) {
  if ((m->len + 1) * 4 >= m->cap * 3) {
    int rc = map3_grow(m);
    if (rc) return rc;
  }
  size_t mask = m->cap - 1, i = bf_hash3(a, b, c) & mask;
  for (;;) {
    struct bf_map3_slot *s = &m->slots[i];
    if (!s->used) {
      s->used = 1;
      s->a = a;
      s->b = b;
      s->c = c;
      s->v = v;
      m->len++;
      return 0;
    }
    if (s->a == a && s->b == b && s->c == c) {
      s->v = v;
      return 0;
    }
    i = (i + 1) & mask;
  }
}
