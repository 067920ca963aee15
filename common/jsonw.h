/* jsonw.h — the one JSON writer of bifocal (every --json output, export and
 * stored metadata goes through it) and a strict checker for JSON that comes
 * from outside (session metadata in imports). No project includes.
 *
 * Output is always valid JSON in valid UTF-8: strings escape quotes,
 * backslashes and controls, and also <, >, & and U+2028/9 so the text can sit
 * inside HTML <script> (the flame page); a byte that is not part of
 * well-formed UTF-8 is written as U+FFFD and counted (bf_json_replaced), so
 * the program can say so once.
 */
#ifndef BF_JSONW_H
#define BF_JSONW_H

#include <stddef.h>
#include <stdio.h>

/* Write s as a JSON string literal (with quotes); NULL writes null. */
void bf_json_str(FILE *f, const char *s);
/* Write a double as JSON (non-finite → null). */
void bf_json_num(FILE *f, double v);
/* s as the inside of a JSON string literal (no quotes), malloc'd; NULL on
 * out-of-memory. Same escaping and replacement as bf_json_str. */
char *bf_json_escape(const char *s);

/* Invalid UTF-8 bytes replaced by U+FFFD in this process so far. */
size_t bf_json_replaced(void);

/* 0 when text is exactly one JSON object (RFC 8259: valid UTF-8, no
 * controls in strings, nesting at most 64 deep, nothing after it) whose
 * top-level keys are all distinct and none is in reserved (a NULL-terminated
 * list; may be NULL). Else -EINVAL and a one-line reason in why (e.g.
 * "not JSON at byte 3: expected a string key", "key \"id\" is bifocal's own").
 */
int bf_json_check_object(const char *text, const char *const *reserved, char *why, size_t why_len);

#endif
