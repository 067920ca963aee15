#include <errno.h>
#include "store_int.h"
#include "views.h"
int bf_diff_compatible(bf_store *s, int64_t a, int64_t b, char *why, size_t why_len) { (void)s;(void)a;(void)b;(void)why;(void)why_len; return 0; }
int bf_diff_functions(bf_store *s, int64_t a, int64_t b, const bf_diff_opts *o, FILE *out) { (void)a;(void)b;(void)o;(void)out; return bf_store_fail(s, -ENOSYS, "x"); }
int bf_diff_flame(bf_store *s, int64_t a, int64_t b, const bf_diff_opts *o, FILE *out) { (void)a;(void)b;(void)o;(void)out; return bf_store_fail(s, -ENOSYS, "x"); }
