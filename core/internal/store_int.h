/* store_int.h — what core/ modules share beyond the public store.h: the
 * handle's message setter, the chunk decoder, a streaming chunk cursor, and
 * the bottom layer's map and varints. Not on any consumer's include path. */
#ifndef BF_STORE_INT_H
#define BF_STORE_INT_H

#include <stddef.h>
#include <stdint.h>

#include "map.h"
#include "store.h"
#include "varint.h"

/* Set the handle's message (printf-style) and return rc. */
int bf_store_fail(bf_store *s, int rc, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* Decode one sample chunk blob (exposed for the fuzz test).
 * Calls fn per record; returns 0, fn's non-zero value, or -EBADMSG. */
int bf_chunk_decode(const uint8_t *data, size_t len, int64_t thread_id, int64_t first_ts,
                    const bf_sample_filter *f, bf_sample_fn fn, void *ud);

/* A cursor over the stored sample chunks of one session, in (thread, time)
 * order, one chunk at a time (the query layer's timeline). f may be NULL; its
 * thread_id selects one thread (its tree flag is not looked at); nothing is
 * flushed. OUT: *out (close with bf_store_chunks_close). */
typedef struct bf_store_chunks bf_store_chunks;
int bf_store_chunks_open(bf_store *s, int64_t session_id, const bf_sample_filter *f, bf_store_chunks **out);
/* Next chunk: 1 with the OUT values set (data borrowed until the next call),
 * 0 at the end, or a negative errno (message on the handle). */
int bf_store_chunks_next(bf_store_chunks *c, int64_t *thread_id, int64_t *first_ts_ns, int64_t *last_ts_ns,
                         const uint8_t **data, size_t *len);
/* Accepts NULL. */
void bf_store_chunks_close(bf_store_chunks *c);

#endif
