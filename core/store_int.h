/* store_int.h — internals shared by core/ modules only (hash maps, varints,
 * error helper). Not part of the public contract. */
#ifndef BF_STORE_INT_H
#define BF_STORE_INT_H

#include <stddef.h>
#include <stdint.h>

#include "store.h"

/* Set the handle's message (printf-style) and return rc. */
int bf_store_fail(bf_store *s, int rc, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* Open-addressing map from a 3×int64 key to an int64 value. */
typedef struct bf_map3 {
  struct bf_map3_slot *slots;
  size_t cap, len;
} bf_map3;
void bf_map3_free(bf_map3 *m);
/* Returns pointer to the value or NULL. */
int64_t *bf_map3_get(const bf_map3 *m, int64_t a, int64_t b, int64_t c);
/* Insert or overwrite. Returns 0 or -ENOMEM. */
int bf_map3_put(bf_map3 *m, int64_t a, int64_t b, int64_t c, int64_t v);

/* FNV-1a of a string. */
uint64_t bf_hash_str(const char *s, size_t n);
uint64_t bf_hash3(int64_t a, int64_t b, int64_t c);

/* LEB128 varints. put returns bytes written (buf needs 10). get returns bytes
 * read or 0 on truncated/overlong input. */
size_t bf_varint_put(uint8_t *buf, uint64_t v);
size_t bf_varint_get(const uint8_t *buf, size_t len, uint64_t *v);

/* Decode one sample chunk blob (exposed for the fuzz test).
 * Calls fn per record; returns 0, fn's non-zero value, or -EBADMSG. */
int bf_chunk_decode(const uint8_t *data, size_t len, int64_t thread_id, int64_t first_ts,
                    const bf_sample_filter *f, bf_sample_fn fn, void *ud);

#endif
