/* pmap.c — the pointer-keyed hash map (see pmap.h): making and growing the
 * table (tombstones dropped), reserving, clearing and freeing it; lookup,
 * insertion with room, deletion and iteration are inline in the header. */
#include "pmap.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

static uint64_t *slot_key(const bf_pmap *m, size_t i) { return (uint64_t *)(void *)(m->slots + i * m->slot_size); }

/* Rehash into a table of cap slots (tombstones dropped). 0 or -ENOMEM. */
static int rehash(bf_pmap *m, size_t cap) {
  unsigned char *ns = calloc(cap, m->slot_size);
  if (!ns) return -ENOMEM;
  unsigned shift = 64;
  for (size_t c = cap; c > 1; c >>= 1) shift--;
  bf_pmap old = *m;
  m->slots = ns;
  m->cap = cap;
  m->shift = shift;
  m->used = m->len;
  for (size_t i = 0; i < old.cap; i++) {
    uint64_t k = *slot_key(&old, i);
    if (k == 0 || k == BF_PMAP_GONE) continue;
    size_t j = (size_t)((k * 0x9E3779B97F4A7C15ull) >> shift);
    while (*slot_key(m, j)) j = (j + 1) & (cap - 1);
    memcpy(slot_key(m, j), slot_key(&old, i), m->slot_size);
  }
  free(old.slots);
  return 0;
}

int bf_pmap_reserve(bf_pmap *m, size_t n) {
  size_t cap = m->cap ? m->cap : 16;
  while (cap / 2 < n + 1) cap *= 2;
  return cap == m->cap ? 0 : rehash(m, cap);
}

void *bf_pmap_put_grow(bf_pmap *m, uint64_t key, int *added) {
  if (key == 0 || key == BF_PMAP_GONE) return NULL;
  uint64_t *hit = bf_pmap_get(m, key);
  if (added) *added = !hit;
  if (hit) return hit;
  if ((m->used + 1) * 2 > m->cap) {
    /* mostly tombstones: the same size, cleaned; else double */
    size_t cap = !m->cap ? 16 : (m->len + 1) * 4 > m->cap ? m->cap * 2 : m->cap;
    if (rehash(m, cap)) return NULL;
  }
  return bf_pmap_put(m, key, NULL); /* room now: the inline path */
}

int bf_pmap_del(bf_pmap *m, uint64_t key) {
  void *k = bf_pmap_get(m, key); /* NULL for the reserved keys */
  if (!k) return 0;
  bf_pmap_del_slot(m, k);
  return 1;
}

void bf_pmap_clear(bf_pmap *m) {
  if (m->slots) memset(m->slots, 0, m->cap * m->slot_size);
  m->len = m->used = 0;
}

void bf_pmap_free(bf_pmap *m) {
  free(m->slots);
  m->slots = NULL;
  m->cap = m->len = m->used = 0;
  m->shift = 0;
}
