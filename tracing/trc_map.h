/* trc_map.h — the collector's hash map: a nonzero 64-bit key to a 32-bit value.
 *
 * Open addressing, linear probing, a power-of-two capacity kept at most half
 * full. The collector keys it by code object / PyMethodDef address (→ function
 * index), by caller<<32|callee (→ edge index) and by CALL site. Plain C; the
 * lookup is inline because every traced event may do one.
 */
#ifndef BF_TRC_MAP_H
#define BF_TRC_MAP_H

#include <stddef.h>
#include <stdint.h>

#pragma GCC visibility push(hidden)

typedef struct trc_map {
  uint64_t *keys; /* 0 = empty slot */
  uint32_t *vals;
  size_t cap, n;  /* cap is 0 or a power of two */
} trc_map;

/* A zeroed trc_map is empty and valid. */

static inline uint64_t trc_mix(uint64_t k) {
  k ^= k >> 33;
  k *= 0xff51afd7ed558ccdULL;
  k ^= k >> 33;
  return k;
}

/* The value stored under key (nonzero), else 0. */
static inline uint32_t trc_map_get(const trc_map *m, uint64_t key) {
  if (!m->cap) return 0;
  size_t mask = m->cap - 1, i = (size_t)trc_mix(key) & mask;
  for (;;) {
    uint64_t k = m->keys[i];
    if (k == key) return m->vals[i];
    if (k == 0) return 0;
    i = (i + 1) & mask;
  }
}

/* Store val under key (nonzero), replacing any value there. Returns 0, or
 * -ENOMEM with the map unchanged. */
int trc_map_put(trc_map *m, uint64_t key, uint32_t val);

/* Free the map's memory; it is empty (zeroed) afterwards. */
void trc_map_free(trc_map *m);

#pragma GCC visibility pop

#endif
