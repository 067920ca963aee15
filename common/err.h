/* err.h — bf_err, the error out-parameter of functions that have no handle
 * to carry a message (opening a store, a Lua state that closes, an HTTP
 * request, a key pair): a code and a one-line message in a fixed buffer.
 * Functions with a handle keep the message on it (bf_store_errmsg). Never
 * allocates; every helper accepts a NULL bf_err (the caller wants no text).
 */
#ifndef BF_ERR_H
#define BF_ERR_H

#include <stdarg.h>

#define BF_ERR_MSG_MAX 4096 /* a path (PATH_MAX) and its cause; longer is cut */

typedef struct bf_err {
  int code;                  /* what the function returned (negative errno or its enum); 0: none */
  char msg[BF_ERR_MSG_MAX];  /* one line naming the thing, the cause and the fix; "" when none */
} bf_err;

#define BF_ERR_INIT {0, ""}

#if defined(__GNUC__)
#define BF_ERR_PRINTF(f, a) __attribute__((format(printf, f, a)))
#else
#define BF_ERR_PRINTF(f, a)
#endif

/* Set code and the printf-formatted message (cut at BF_ERR_MSG_MAX - 1
 * bytes). Returns code, so a failure path reads
 * `return bf_err_set(err, -ENOENT, "...", ...)`. */
int bf_err_set(bf_err *e, int code, const char *fmt, ...) BF_ERR_PRINTF(3, 4);
int bf_err_vset(bf_err *e, int code, const char *fmt, va_list ap) BF_ERR_PRINTF(3, 0);

/* Put "PREFIX" (formatted) before the message already there, keeping the
 * code; with no message yet the prefix alone. Returns the code. */
int bf_err_prefix(bf_err *e, const char *fmt, ...) BF_ERR_PRINTF(2, 3);

/* Forget a previous failure: code 0, message "". */
void bf_err_clear(bf_err *e);

/* The message, or fallback when none was set (e NULL, or msg ""). */
const char *bf_err_msg(const bf_err *e, const char *fallback);

#endif
