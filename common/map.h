/* map.h — a map from a key of three int64 to an int64 value, as a thin
 * layer over the one hash map (pmap.h) keyed by the three's hash; plus the
 * string and integer hashes it and its callers use. No project includes
 * but pmap.h. */
#ifndef BF_MAP_H
#define BF_MAP_H

#include <stddef.h>
#include <stdint.h>

#include "pmap.h"

/* Zero-initialise ({0}) for an empty map; free with bf_map3_free. No
 * deletion of single keys (see bf_pmap_hkey). */
typedef struct bf_map3 {
  bf_pmap pm; /* of bf_map3_slot, by bf_pmap_hkey(bf_hash3(a, b, c)) and its chain */
} bf_map3;

typedef struct bf_map3_slot {
  uint64_t key; /* the bf_pmap key */
  int64_t a, b, c, v;
} bf_map3_slot;

/* Mix of three int64 (the map's hash). No finaliser: pmap's Fibonacci
 * step spreads it over the slots (with one, lookups took 20% longer). */
static inline uint64_t bf_hash3(int64_t a, int64_t b, int64_t c) {
  uint64_t h = (uint64_t)a * 0x9E3779B97F4A7C15ULL;
  h ^= (uint64_t)b + 0x7F4A7C159E3779B9ULL + (h << 6) + (h >> 2);
  h ^= (uint64_t)c * 0xC2B2AE3D27D4EB4FULL + (h << 6) + (h >> 2);
  return h;
}

/* Frees the slots and leaves an empty, usable map. */
void bf_map3_free(bf_map3 *m);
/* Pointer to the value stored under (a, b, c), or NULL. Valid until the next put. */
static inline int64_t *bf_map3_get(const bf_map3 *m, int64_t a, int64_t b, int64_t c) {
  for (uint64_t k = bf_pmap_hkey(bf_hash3(a, b, c));; k = bf_pmap_hnext(k)) {
    bf_map3_slot *s = (bf_map3_slot *)bf_pmap_get(&m->pm, k);
    if (!s) return NULL;
    if (s->a == a && s->b == b && s->c == c) return &s->v;
  }
}
/* Insert or overwrite. Returns 0 or -ENOMEM (the map is unchanged then). */
int bf_map3_put(bf_map3 *m, int64_t a, int64_t b, int64_t c, int64_t v);
/* The number of keys stored. */
static inline size_t bf_map3_len(const bf_map3 *m) { return m->pm.len; }

/* FNV-1a of n bytes (offset basis 1469598103934665603, not the published
 * one: only in-memory tables use it, so it stays). */
uint64_t bf_hash_str(const char *s, size_t n);

#endif
