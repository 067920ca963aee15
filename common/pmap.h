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

/* The slot of key, or NULL (always for the reserved keys: remote memory
 * hands out any value). Valid until the next put. */
static inline void *bf_pmap_get(const bf_pmap *m, uint64_t key) {
  if (!m->cap || key + 1 < 2) return NULL; /* empty, 0 or BF_PMAP_GONE */
  size_t mask = m->cap - 1;
  for (size_t i = (size_t)((key * 0x9E3779B97F4A7C15ull) >> m->shift);; i = (i + 1) & mask) {
    uint64_t *k = (uint64_t *)(void *)(m->slots + i * m->slot_size);
    if (*k == key) return k;
    if (*k == 0) return NULL; /* a put always leaves empty slots */
  }
}

/* The slot of key, made (zeroed but for the key) when absent; *added (may be
 * NULL) says which. Grows the table at half full: every slot pointer held
 * before is then invalid. NULL on -ENOMEM (map unchanged) or a reserved key. */
void *bf_pmap_put(bf_pmap *m, uint64_t key, int *added);

/* Maps keyed by a wider key (three ints, a string) go through its 64-bit
 * hash h: try key bf_pmap_hkey(h) first and, while the slot found holds
 * another wide key, bf_pmap_hnext of the key tried (the reserved keys are
 * skipped). A miss ends the chain, so such a map must not delete single
 * keys (a tombstone would cut it); bf_pmap_clear is fine. */
static inline uint64_t bf_pmap_hkey(uint64_t h) { return h == 0 || h == BF_PMAP_GONE ? 1 : h; }
static inline uint64_t bf_pmap_hnext(uint64_t key) { return bf_pmap_hkey(key + 1); }

/* Remove key (its slot becomes a tombstone). Returns 1 when it was there. */
int bf_pmap_del(bf_pmap *m, uint64_t key);

/* Room for n keys without growing. Returns 0 or -ENOMEM. */
int bf_pmap_reserve(bf_pmap *m, size_t n);

/* The live slot after *it (start with *it = 0), or NULL at the end. */
void *bf_pmap_next(const bf_pmap *m, size_t *it);

/* Remove every key, keeping the table. */
void bf_pmap_clear(bf_pmap *m);

/* Free the table; the map is empty and usable again. */
void bf_pmap_free(bf_pmap *m);

#endif
