/* pmap.h — the pointer-keyed hash map: open addressing, linear probing,
 * Fibonacci hashing, tombstones for deletion. Each slot is the caller's own
 * struct, stored inline, whose first member is the uint64_t key (an address
 * or another non-zero id; 0 and UINT64_MAX are reserved). Wider keys go
 * through their hash (bf_pmap_hkey; bf_map3 in map.h is one). No project
 * includes; lookups are inline for the samplers' and tracer's hot paths. */
#ifndef BF_PMAP_H
#define BF_PMAP_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

typedef struct bf_pmap {
  unsigned char *slots;
  size_t slot_size; /* sizeof the caller's struct (a multiple of 8) */
  size_t cap;       /* a power of two, or 0 before the first put */
  size_t len;       /* live keys */
  size_t used;      /* live keys + tombstones */
  unsigned shift;   /* 64 - log2(cap) */
} bf_pmap;

/* An empty map of slots of type T ({uint64_t key; ...}); free with bf_pmap_free. */
#define BF_PMAP_INIT(T) {NULL, sizeof(T), 0, 0, 0, 0}
#define BF_PMAP_GONE UINT64_MAX /* the key of a tombstone */

/* The hot operations come twice: with the slot size read from the map
 * (bf_pmap_get, _put, _del_slot) and as _sz forms that take it from the
 * caller, for a caller that knows it at compile time (sizeof its slot, the
 * map's slot_size): its multiplications become shifts and the zeroing of a
 * new slot a few stores, as in a table written for that one type (the
 * tracer's allocation hooks, one put and one delete per block). */

/* The slot of key, or NULL (always for the reserved keys: remote memory
 * hands out any value). Valid until the next put. */
static inline void *bf_pmap_get_sz(const bf_pmap *m, uint64_t key, size_t sz) {
  if (!m->cap || key + 1 < 2) return NULL; /* empty, 0 or BF_PMAP_GONE */
  size_t mask = m->cap - 1;
  for (size_t i = (size_t)((key * 0x9E3779B97F4A7C15ull) >> m->shift);; i = (i + 1) & mask) {
    uint64_t *k = (uint64_t *)(void *)(m->slots + i * sz);
    if (*k == key) return k;
    if (*k == 0) return NULL; /* a put always leaves empty slots */
  }
}
static inline void *bf_pmap_get(const bf_pmap *m, uint64_t key) { return bf_pmap_get_sz(m, key, m->slot_size); }

/* bf_pmap_put when the table must be made or grown first (or the key is
 * reserved); not for callers. */
void *bf_pmap_put_grow(bf_pmap *m, uint64_t key, int *added);

/* The slot of key, made (zeroed but for the key) when absent; *added (may be
 * NULL) says which. Grows the table at half full: every slot pointer held
 * before is then invalid. NULL on -ENOMEM (map unchanged) or a reserved key. */
static inline void *bf_pmap_put_sz(bf_pmap *m, uint64_t key, int *added, size_t sz) {
  if (key + 1 < 2 || (m->used + 1) * 2 > m->cap) return bf_pmap_put_grow(m, key, added); /* cap 0 too */
  /* one probe finds the key or where it goes: the first tombstone on the
   * way, else the empty slot that ends it */
  size_t mask = m->cap - 1, i = (size_t)((key * 0x9E3779B97F4A7C15ull) >> m->shift), gone = m->cap;
  uint64_t *k;
  for (;; i = (i + 1) & mask) {
    k = (uint64_t *)(void *)(m->slots + i * sz);
    if (*k == key) {
      if (added) *added = 0;
      return k;
    }
    if (*k == 0) break;
    if (*k == BF_PMAP_GONE && gone == m->cap) gone = i;
  }
  if (added) *added = 1;
  if (gone < m->cap) k = (uint64_t *)(void *)(m->slots + gone * sz);
  else m->used++;
  m->len++;
  memset(k + 1, 0, sz - sizeof *k);
  *k = key;
  return k;
}
static inline void *bf_pmap_put(bf_pmap *m, uint64_t key, int *added) {
  return bf_pmap_put_sz(m, key, added, m->slot_size);
}

/* Maps keyed by a wider key (three ints, a string) go through its 64-bit
 * hash h: try key bf_pmap_hkey(h) first and, while the slot found holds
 * another wide key, bf_pmap_hnext of the key tried (the reserved keys are
 * skipped). A miss ends the chain, so such a map must not delete single
 * keys (a tombstone would cut it); bf_pmap_clear is fine. */
static inline uint64_t bf_pmap_hkey(uint64_t h) { return h == 0 || h == BF_PMAP_GONE ? 1 : h; }
static inline uint64_t bf_pmap_hnext(uint64_t key) { return bf_pmap_hkey(key + 1); }

/* Remove key. Returns 1 when it was there. Its slot becomes a tombstone, or
 * empty again (with the tombstones just before it) when the next slot is
 * empty, so churn (put, delete, put) does not fill the table with them.
 * Slots never move: iterating (bf_pmap_next) while deleting is fine. */
int bf_pmap_del(bf_pmap *m, uint64_t key);

/* Remove the live slot that bf_pmap_get or bf_pmap_put just returned (one
 * probe fewer than bf_pmap_del when the caller wanted the slot's contents
 * first). */
static inline void bf_pmap_del_slot_sz(bf_pmap *m, void *slot, size_t sz) {
  unsigned char *s = slot, *end = m->slots + m->cap * sz;
  unsigned char *next = s + sz == end ? m->slots : s + sz;
  m->len--;
  if (*(uint64_t *)(void *)next != 0) {
    *(uint64_t *)(void *)s = BF_PMAP_GONE; /* a probe may pass here to a key further on */
    return;
  }
  /* the empty slot after ends every probe that reaches here: this slot and
   * the tombstones just before it can be empty again */
  *(uint64_t *)(void *)s = 0;
  m->used--;
  for (;;) {
    s = (s == m->slots ? end : s) - sz;
    if (*(uint64_t *)(void *)s != BF_PMAP_GONE) break;
    *(uint64_t *)(void *)s = 0;
    m->used--;
  }
}
static inline void bf_pmap_del_slot(bf_pmap *m, void *slot) { bf_pmap_del_slot_sz(m, slot, m->slot_size); }

int bf_pmap_reserve(bf_pmap *m, size_t n);

/* The live slot after *it (start with *it = 0), or NULL at the end. */
static inline void *bf_pmap_next_sz(const bf_pmap *m, size_t *it, size_t sz) {
  for (; *it < m->cap; (*it)++) {
    uint64_t *k = (uint64_t *)(void *)(m->slots + *it * sz);
    if (*k != 0 && *k != BF_PMAP_GONE) {
      (*it)++;
      return k;
    }
  }
  return NULL;
}
static inline void *bf_pmap_next(const bf_pmap *m, size_t *it) { return bf_pmap_next_sz(m, it, m->slot_size); }

/* Remove every key, keeping the table. */
void bf_pmap_clear(bf_pmap *m);

/* Free the table; the map is empty and usable again. */
void bf_pmap_free(bf_pmap *m);

#endif
