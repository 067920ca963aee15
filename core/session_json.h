/* session_json.h — session metadata as JSON, on top of the bottom layer's
 * writer and checker (common/jsonw.h, whose prefixes are bf_json_ and bf_jw_).
 */
#ifndef BF_SESSION_JSON_H
#define BF_SESSION_JSON_H

#include <stdio.h>

#include "jsonw.h"
#include "store.h"

/* Write one session's metadata as a JSON object; its extra_json is written
 * only when it is a well-formed JSON object (bf_json_check_object), else null. */
void bf_session_json(FILE *f, const bf_session_info *in);
/* The same object as the next value of w (after its key in an object). */
void bf_session_json_jw(bf_jw *w, const bf_session_info *in);

/* Top-level keys a session's extra_json may not use, NULL-terminated: the
 * session fields that identify it or vouch for it (id, label, host, command,
 * redacted, ...). Figures our own producers put in extra (python, native,
 * exit_code, dialect, ...) are not among them. */
extern const char *const bf_session_reserved_extra_keys[];

#endif
