/* redact.h — shareable copies of a session that do not reveal where the code
 * lives: file paths become stable keyed-hash tokens, host and command line go.
 */
#ifndef BF_REDACT_H
#define BF_REDACT_H

#include <stddef.h>

#include "store.h"

typedef struct bf_redact_opts {
  const char *const *keep; /* path prefixes kept verbatim (e.g. "/usr/lib/python3") */
  size_t nkeep;
} bf_redact_opts;

/* Write session_id of src into a new database at out_path (which must not
 * exist) holding only that session, with:
 *  - every function file outside the kept prefixes replaced by a token
 *    "<path:XXXXXXXXXXXXXXXX>" (64-bit BLAKE2b keyed with a random key made for
 *    this copy and then forgotten: same path → same token within the copy,
 *    tokens cannot be reversed by guessing paths, nor matched across copies);
 *    names in angle brackets without a slash ("<builtin>", "<frozen os>",
 *    earlier tokens) are kept;
 *  - words with a slash inside function names (frame text of FlameGraph
 *    imports: "render (/srv/app/t.html:3)") tokenised by the same rule;
 *  - host and command line dropped; in extra_json, string values that contain
 *    a '/', '\\' or a space, keys that contain a '/' or '\\', and keys or
 *    values that name the session's host, this machine's host or a user
 *    (this process's user, home directories in the command line) as a whole
 *    word, tokenised the same way; extra_json that is not one well-formed
 *    object becomes null; labels, thread names and every number kept;
 *  - the session's redacted flag and the file's meta redacted=1 set.
 * The copy is made in memory and published whole (an unnamed temporary
 * linked into place): out_path must not exist, and a kill or a full disk
 * leaves nothing behind it. Errors on src's handle.
 * OUT: *new_id (may be NULL). */
int bf_redact_session(bf_store *src, int64_t session_id, const char *out_path, const bf_redact_opts *o,
                      int64_t *new_id);

/* The token rule alone (exposed for tests): OUT: tok (at least 32 bytes) gets
 * the token of path under the 32-byte key, or a copy of path when it is kept
 * (returns 1 when kept, 0 when replaced). */
int bf_redact_path(const unsigned char key[32], const char *path, const char *const *keep, size_t nkeep,
                   char *tok, size_t toklen);

#endif
