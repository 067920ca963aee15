/* map.h — the one hash map: open addressing, linear probing, from a key of
 * three int64 to an int64 value; plus the string and integer hashes it and
 * its callers use. No project includes. */
#ifndef BF_MAP_H
#define BF_MAP_H

#include <stddef.h>
#include <stdint.h>

/* Zero-initialise ({0}) for an empty map; free with bf_map3_free. */
typedef struct bf_map3 {
  struct bf_map3_slot *slots;
  size_t cap, len;
} bf_map3;

/* Frees the slots and leaves an empty, usable map. */
void bf_map3_free(bf_map3 *m);
/* Pointer to the value stored under (a, b, c), or NULL. Valid until the next put. */
int64_t *bf_map3_get(const bf_map3 *m, int64_t a, int64_t b, int64_t c);
/* Insert or overwrite. Returns 0 or -ENOMEM (the map is unchanged then). */
int bf_map3_put(bf_map3 *m, int64_t a, int64_t b, int64_t c, int64_t v);

/* FNV-1a of n bytes (offset basis 1469598103934665603, not the published
 * one: only in-memory tables use it, so it stays). */
uint64_t bf_hash_str(const char *s, size_t n);
/* Mix of three int64 (the map's hash). */
uint64_t bf_hash3(int64_t a, int64_t b, int64_t c);

#endif
