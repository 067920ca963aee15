/* gc.c — retention policy: which sessions expire, which are still being
 * written; the store does the deleting, the orphan sweep and the compaction.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gc.h"
#include "store_int.h"

int bf_gc(bf_store *s, int64_t now_ns, int force, bf_gc_stats *out) {
  bf_gc_stats st = {0};
  bf_session_info **list = NULL;
  int64_t *live = NULL;
  size_t n = 0, nlive = 0;
  int rc = bf_store_secure_delete(s);
  if (rc) return rc;
  if ((rc = bf_store_begin(s))) return rc;
  if ((rc = bf_store_session_list(s, &list, &n))) goto fail;
  if (n && !(live = calloc(n, sizeof *live))) {
    rc = bf_store_fail(s, -ENOMEM, "out of memory");
    goto fail;
  }
  int busy = 0;
  for (size_t i = 0; i < n; i++) {
    bf_session_info *in = list[i];
    int writing = in->status && strcmp(in->status, "incomplete") == 0 &&
                  now_ns - in->created_ns < BF_GC_BUSY_WINDOW_NS;
    if (writing) busy = 1;
    if (in->expires_at_ns > 0 && in->expires_at_ns <= now_ns) {
      if (writing && !force) {
        st.sessions_busy++;
      } else {
        if ((rc = bf_store_session_delete(s, in->id))) goto fail;
        st.sessions_deleted++;
        continue;
      }
    }
    live[nlive++] = in->id;
  }
  if (!busy || force) {
    bf_store_sweep_counts c = {0};
    if ((rc = bf_store_sweep(s, live, nlive, &c))) goto fail;
    st.strings = c.strings;
    st.functions = c.functions;
    st.frames = c.frames;
    st.stacks = c.stacks;
    st.swept = 1;
  }
  if ((rc = bf_store_commit(s))) goto fail;
  /* Deleted rows may sit in the interning caches: a begin/rollback pair
   * drops them (nothing is open, so nothing is undone). */
  if (bf_store_begin(s) == 0) bf_store_rollback(s);
  /* VACUUM rewrites the file without the freed pages; the TRUNCATE checkpoint
   * moves it into the main file and empties the WAL, which held old pages. */
  if ((rc = bf_store_compact(s, 0))) goto out;
  if (out) *out = st;
  goto out;
fail:
  bf_store_rollback(s);
out:
  for (size_t i = 0; i < n; i++) bf_session_info_free(list[i]);
  free(list);
  free(live);
  return rc;
}
