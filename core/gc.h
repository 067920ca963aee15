/* gc.h — retention: delete expired sessions and whatever only they used, with
 * secure_delete on, then compact the file so the space (and the bytes) go.
 */
#ifndef BF_GC_H
#define BF_GC_H

#include <stdint.h>

#include "store.h"

typedef struct bf_gc_stats {
  int64_t sessions_deleted;
  int64_t sessions_busy;  /* expired but still being written: left alone */
  int swept;              /* orphan sweep done (0 when a capture may be running) */
  int64_t strings, functions, frames, stacks; /* orphan rows deleted */
} bf_gc_stats;

/* A session counts as still being written when its status is "incomplete" and
 * it was created less than this long ago. */
#define BF_GC_BUSY_WINDOW_NS (24LL * 3600 * 1000000000LL)

/* Delete every session with 0 < expires_at_ns <= now_ns (with all its rows),
 * then — unless a session is still being written and force is 0, since a
 * running capture may hold interned ids in memory — every string, function,
 * frame and stack no remaining session references; then VACUUM and truncate
 * the WAL. secure_delete is on for the whole run. The handle's interning
 * caches are dropped. OUT: *st (may be NULL). */
int bf_gc(bf_store *s, int64_t now_ns, int force, bf_gc_stats *st);

#endif
