/* import_pyroscope.h — a pprof profile (what Pyroscope's SelectMergeProfile
 * answers, or any profile.proto, gzip-compressed or not) as one imported
 * session; and the request that asks Pyroscope for it. */
#ifndef BF_IMPORT_PYROSCOPE_H
#define BF_IMPORT_PYROSCOPE_H

#include <stddef.h>
#include <stdint.h>

#include "import.h"
#include "store.h"

typedef struct bf_import_pprof_meta {
  int64_t start_ns, duration_ns; /* the window asked for (0: unknown) */
  const char *host;              /* where it came from (the backend's host); may be NULL */
  const char *extra_json;        /* a JSON object kept as the session's extra (the query); may be NULL */
} bf_import_pprof_meta;

/* Import the untrusted bytes data[0..len) as pprof. The value imported is the
 * sample type named "samples", else the profile's default, else the first;
 * values in nanoseconds with a period become samples (value / period, rounded).
 * Frames: a bifocal system name "file:first:qualname" gives the identity back;
 * otherwise (name, filename, start_line). All or nothing (the store unchanged
 * on error, the message on the handle). OUT: *session_id. */
int bf_import_pprof(bf_store *s, const uint8_t *data, size_t len, const bf_import_opts *o,
                    const bf_import_pprof_meta *meta, int64_t *session_id);

/* The body of a connect-protocol SelectMergeProfileRequest (querier.v1):
 * profile_typeID, label_selector, start and end in Unix milliseconds.
 * OUT: *body (caller frees), *len. 0 or -ENOMEM. */
int bf_pyroscope_merge_request(const char *profile_type, const char *selector, int64_t start_ms, int64_t end_ms,
                               uint8_t **body, size_t *len);

#endif
