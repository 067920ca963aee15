/* json.h — session metadata as JSON, on top of the bottom layer's writer
 * and checker (jsonw.h, included here for every JSON writer in core/).
 */
#ifndef BF_JSON_H
#define BF_JSON_H

#include <stdio.h>

#include "jsonw.h"
#include "store.h"

/* Write one session's metadata as a JSON object; its extra_json is written
 * only when it is a well-formed JSON object (bf_json_check_object), else null. */
void bf_json_session(FILE *f, const bf_session_info *in);
/* The same object as the next value of w (after its key in an object). */
void bf_json_session_jw(bf_jw *w, const bf_session_info *in);

/* Top-level keys a session's extra_json may not use, NULL-terminated: the
 * session fields that identify it or vouch for it (id, label, host, command,
 * redacted, ...). Figures our own producers put in extra (python, native,
 * exit_code, dialect, ...) are not among them. */
extern const char *const bf_json_reserved_extra_keys[];

#endif
