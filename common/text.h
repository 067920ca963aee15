/* text.h — untrusted text (function names, labels, metadata, thread names)
 * made safe to show: UTF-8 checking and an inert form for terminals, where
 * control characters would otherwise move the cursor, clear the screen or
 * forge lines.
 */
#ifndef BF_TEXT_H
#define BF_TEXT_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* Length of the well-formed UTF-8 sequence at p (at most avail bytes), 0 when
 * it is not one (stray continuation, overlong form, surrogate, > U+10FFFF,
 * truncated). OUT: *cp, the code point (untouched on 0). */
size_t bf_utf8_seq(const unsigned char *p, size_t avail, uint32_t *cp);

/* 1 when code point cp must not reach a terminal raw: C0 controls, DEL, C1
 * controls, the bidirectional overrides that reorder what is shown, and the
 * line/paragraph separators U+2028/U+2029. */
int bf_text_is_control(uint32_t cp);

/* s in its inert form: \n, \r, \t, \x1b (other controls and invalid UTF-8
 * bytes as \xNN, C1 and bidi controls as \u202e); all else unchanged.
 * Returns s itself when nothing needs escaping (the common case), else buf,
 * cut with "…" when the escaped text does not fit in len bytes. NULL gives "".
 * The result is borrowed: s or buf. */
const char *bf_inert(const char *s, char *buf, size_t len);

/* s's inert form in pieces: put(ud, bytes, n) for each (no length limit),
 * e.g. to escape it again for HTML. Returns 1 when anything was escaped;
 * NULL puts nothing. */
int bf_inert_put(const char *s, void (*put)(void *ud, const char *bytes, size_t n), void *ud);

/* Write s in its inert form to f (no length limit). */
void bf_fputs_inert(FILE *f, const char *s);

/* The same, but line breaks and tabs are written as they are: for messages
 * whose layout matters (multi-line usage texts, Lua errors). */
void bf_fputs_inert_lines(FILE *f, const char *s);

#endif
