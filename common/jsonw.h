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

#include "err.h"

/* Write s as a JSON string literal (with quotes); NULL writes null. */
void bf_json_str(FILE *f, const char *s);
/* Write a double as JSON (non-finite → null). */
void bf_json_num(FILE *f, double v);
/* s as the inside of a JSON string literal (no quotes), malloc'd; NULL on
 * out-of-memory. Same escaping and replacement as bf_json_str. */
char *bf_json_escape(const char *s);

/* ---- the streaming writer: structure, commas and escaping inside ----
 *
 *   bf_jw w;  bf_jw_init(&w, out);
 *   bf_jw_obj(&w);  bf_jw_kstr(&w, "name", n);  bf_jw_key(&w, "rows");  bf_jw_arr(&w);
 *   ...  bf_jw_end(&w);  bf_jw_end(&w);
 *
 * writes {"name":"…","rows":[…]} with no whitespace. Keys are the caller's
 * literals (escaped like any string). Misuse (a value in an object without
 * a key, more than BF_JW_DEPTH levels, an end with none open) sets w.err and
 * writes nothing more. */
#define BF_JW_DEPTH 32
#define BF_JW_BUF 4096

typedef struct bf_jw {
  FILE *f;
  int depth;                          /* open containers */
  unsigned char open[BF_JW_DEPTH];    /* '{' or '[' per level */
  unsigned char items[BF_JW_DEPTH];   /* items written at that level (capped at 1) */
  int keyed;                          /* a key was written, its value is next */
  int err;                            /* misuse seen (-EINVAL) */
  char *mem;                          /* bf_jw_mem: the text so far */
  size_t mem_len;
  const char *pad;                    /* whitespace before the next item (bf_jw_pad) */
  int hold;                           /* bf_jw_hold */
  size_t buf_n;
  char buf[BF_JW_BUF];                /* output gathered for one write */
} bf_jw;

void bf_jw_init(bf_jw *w, FILE *f);
/* Each call's output reaches the FILE in one fwrite when the call returns.
 * A held writer gathers it across calls (BF_JW_BUF at a time) until its
 * top-level value ends, bf_jw_file, or bf_jw_flush: for long exports, where
 * an fwrite per key was a quarter of the time. The caller of a held writer
 * writes nothing to the FILE itself meanwhile, and calls bf_jw_flush before
 * it does (or closes it) with a value still open, as on an error path. */
void bf_jw_hold(bf_jw *w);
/* Write out what a held writer has gathered. */
void bf_jw_flush(bf_jw *w);
/* A writer into a malloc'd string (stored metadata): 0, or -ENOMEM and
 * nothing to free. Finish it with bf_jw_mem_done. */
int bf_jw_mem(bf_jw *w);
/* Close a bf_jw_mem writer. Returns the text (caller frees); NULL on
 * out-of-memory, misuse, or a container left open. */
char *bf_jw_mem_done(bf_jw *w);
void bf_jw_obj(bf_jw *w); /* { as the next value */
void bf_jw_arr(bf_jw *w); /* [ as the next value */
void bf_jw_end(bf_jw *w); /* close the innermost container */
void bf_jw_key(bf_jw *w, const char *key);
void bf_jw_str(bf_jw *w, const char *s); /* NULL writes null */
void bf_jw_int(bf_jw *w, long long v);
void bf_jw_uint(bf_jw *w, unsigned long long v); /* all 64 bits (counters) */
void bf_jw_num(bf_jw *w, double v);      /* as bf_json_num */
/* v with a printf format of one double ("%.3f": a fixed number of places,
 * where a format's consumer expects them); non-finite → null. */
void bf_jw_numf(bf_jw *w, const char *fmt, double v);
void bf_jw_bool(bf_jw *w, int v);
void bf_jw_null(bf_jw *w);
/* n integers as the next items of the current array (misuse elsewhere);
 * one write for them all, for long flat arrays. */
void bf_jw_ints(bf_jw *w, const long long *v, size_t n);
/* Whitespace (the caller's literal, e.g. "\n" or "\n  ") written before
 * the next item, after its comma: before the key in an object, before the
 * value in an array or at the top level. For outputs laid out one item a
 * line (the gecko export's rows, dump --json's frames). */
void bf_jw_pad(bf_jw *w, const char *ws);
/* A value already in JSON (a stored object, a number formatted by the caller). */
void bf_jw_raw(bf_jw *w, const char *json);
/* The file to write one value to with a writer of JSON to FILE (such as
 * bf_session_json), its comma written; NULL after misuse (write nothing). */
FILE *bf_jw_file(bf_jw *w);
/* key + value in one call. */
void bf_jw_kstr(bf_jw *w, const char *key, const char *s);
void bf_jw_kint(bf_jw *w, const char *key, long long v);
void bf_jw_kuint(bf_jw *w, const char *key, unsigned long long v);
void bf_jw_knum(bf_jw *w, const char *key, double v);
void bf_jw_kbool(bf_jw *w, const char *key, int v);
void bf_jw_knull(bf_jw *w, const char *key);
/* key + [a,b], two numbers as bf_jw_num (an interval: "ci":[lo,hi]). */
void bf_jw_kpair(bf_jw *w, const char *key, double a, double b);

/* ---- reading stored metadata (extra_json): no allocation, bounded nesting ----
 *
 * Lenient where the checker is strict: meant for text already checked or
 * written by bifocal, and safe (never past the NUL) on any text. */

/* In the JSON object at obj, find the top-level key. OUT: *val at the first
 * byte of its value text. 0, or -1 when absent or malformed before it. */
int bf_json_find(const char *obj, const char *key, const char **val);
/* The string literal at p (at its '"'). With out, decode it, truncated to
 * len - 1 bytes, control characters as '?' (inert on a terminal). Returns
 * the position after the closing quote, or NULL when malformed. */
const char *bf_json_string(const char *p, char *out, size_t len);
/* The number at a dotted path of nested objects ("kernel.runq_share").
 * OUT: *v. 0, or -1 when a key is missing or the value is not a number. */
int bf_json_find_num(const char *obj, const char *path, double *v);

/* Invalid UTF-8 bytes replaced by U+FFFD in this process so far. */
size_t bf_json_replaced(void);

/* 0 when text is exactly one JSON object (RFC 8259: valid UTF-8, no
 * controls in strings, nesting at most 64 deep, nothing after it) whose
 * top-level keys are all distinct and none is in reserved (a NULL-terminated
 * list; may be NULL). Else -EINVAL, also in why (may be NULL) with a
 * one-line reason (e.g. "not JSON at byte 3: expected a string key",
 * "key \"id\" is bifocal's own"). */
int bf_json_check_object(const char *text, const char *const *reserved, bf_err *why);

#endif
