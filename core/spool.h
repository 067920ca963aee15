/* spool.h — record --push's spool: each window of a session as the encoded
 * request for one destination, kept in the database (table push_spool) from
 * the moment the window closes until the backend took it, or until the spool
 * bound pushed it out (then only the row's bounds stay, state "dropped"; the
 * samples themselves stay in the session either way). Rows hold no
 * credentials: target is the destination without user information. */
#ifndef BF_SPOOL_H
#define BF_SPOOL_H

#include <stddef.h>
#include <stdint.h>

#include "store.h"

typedef struct bf_spool_row {
  int64_t id, session_id, seq;
  int64_t window_start_ns, window_end_ns; /* from the session's start */
  char target[512], url_suffix[4096], content_type[128], state[16];
  int64_t attempts, next_try_ns, last_status, bytes, sent_ns;
  uint8_t *payload; /* owned (bf_spool_row_clear); NULL unless asked for and waiting */
  size_t payload_len;
} bf_spool_row;

/* Spool window seq of session_id for target (state "pending", due now).
 * A window already spooled (same session, target, seq) is left as it is:
 * 0 either way, or a negative errno (message on s). */
int bf_spool_add(bf_store *s, const bf_spool_row *row, const void *payload, size_t len);

/* The oldest waiting row ("pending", or "refused" when with_refused) of
 * target, of session_id (0: any session), with its payload when
 * with_payload. 1 found (OUT: *row; clear it), 0 none, or a negative errno. */
int bf_spool_first(bf_store *s, const char *target, int64_t session_id, int with_refused, int with_payload,
                   bf_spool_row *row);

/* After an attempt on row id: delivered (payload freed, state "sent",
 * sent_ns now), or not (state "pending" with next_try_ns, or "refused" for a
 * request the backend will never take as it is); attempts + 1, last_status
 * the HTTP status (0 none). 0 or a negative errno. */
int bf_spool_sent(bf_store *s, int64_t id, long status);
int bf_spool_failed(bf_store *s, int64_t id, long status, int refused, int64_t next_try_ns);

/* Keep the waiting rows' payloads of target within max_bytes: the oldest
 * waiting rows become "dropped" (payload freed) until the rest fit. OUT:
 * *dropped (rows dropped now), *first_seq and *last_seq (their window numbers,
 * -1 when none). 0 or a negative errno. */
int bf_spool_trim(bf_store *s, const char *target, int64_t max_bytes, int64_t *dropped, int64_t *first_seq,
                  int64_t *last_seq);

/* Counts of session_id's rows for target by state. */
typedef struct bf_spool_counts {
  int64_t windows, sent, pending, refused, dropped, waiting_bytes;
} bf_spool_counts;
int bf_spool_counts_get(bf_store *s, int64_t session_id, const char *target, bf_spool_counts *out);

/* Record json (an object) as extra_json's key "push" of session_id (the
 * session's other metadata kept). 0 or a negative errno. */
int bf_spool_note_session(bf_store *s, int64_t session_id, const char *json);

/* Frees the payload; the row may be reused. */
void bf_spool_row_clear(bf_spool_row *row);

#endif
