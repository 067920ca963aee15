/* import.h — bring other profilers' captures into the store. */
#ifndef BF_IMPORT_H
#define BF_IMPORT_H

#include "store.h"

typedef struct bf_import_opts {
  const char *label;            /* may be NULL */
  int64_t ttl_ns;               /* 0 = never expires */
  const char *profiler_version; /* recorded in the session */
} bf_import_opts;

/* Import a collapsed-stack file (FlameGraph, py-spy raw or austin text, detected
 * from the content) as one "imported" session. All or nothing: on any error the
 * store is unchanged and the message (with file:line) is on the handle.
 * OUT: *session_id. */
int bf_import_collapsed(bf_store *s, const char *path, const bf_import_opts *o, int64_t *session_id);

#endif
