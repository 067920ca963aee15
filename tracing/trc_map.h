/* trc_map.h — the collector's map from a 64-bit key to a 32-bit value: a
 * typed front of common/pmap.h (the project's one hash map: open addressing,
 * linear probing, Fibonacci hashing, kept at most half full). The collector
 * keys it by code object / PyMethodDef address (→ function index), by
 * caller<<32|callee (→ edge index) and by CALL site. The lookup is inline
 * because every traced event may do one.
 */
#ifndef BF_TRC_MAP_H
#define BF_TRC_MAP_H

#include <stddef.h>
#include <stdint.h>

#include "pmap.h"

#pragma GCC visibility push(hidden)

typedef struct trc_map_slot {
  uint64_t key; /* first: bf_pmap's key */
  uint32_t val;
  uint32_t unused;
} trc_map_slot;

/* A zeroed trc_map is empty and valid. Keys are neither 0 nor UINT64_MAX
 * (pmap's empty and tombstone marks). */
typedef struct trc_map {
  bf_pmap m; /* of trc_map_slot (slot_size set at the first put) */
} trc_map;

/* Murmur3's 64-bit finaliser, for callers' own hashes (trc_memory.c). */
static inline uint64_t trc_mix(uint64_t k) {
  k ^= k >> 33;
  k *= 0xff51afd7ed558ccdULL;
  k ^= k >> 33;
  return k;
}

/* The value stored under key, else 0. */
static inline uint32_t trc_map_get(const trc_map *m, uint64_t key) {
  const trc_map_slot *s = (const trc_map_slot *)bf_pmap_get(&m->m, key);
  return s ? s->val : 0;
}

/* Store val under key, replacing any value there. Returns 0, -EINVAL for a
 * reserved key, or -ENOMEM with the map unchanged. */
int trc_map_put(trc_map *m, uint64_t key, uint32_t val);

/* Keys stored. */
static inline size_t trc_map_len(const trc_map *m) { return m->m.len; }

/* Free the map's memory; it is empty afterwards (and valid, as a zeroed one). */
void trc_map_free(trc_map *m);

#pragma GCC visibility pop

#endif
