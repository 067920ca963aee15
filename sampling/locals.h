/* locals.h — local variables of a sampled frame (`bifocal dump --locals`):
 * read from the target like everything else (bounded, type-checked, a bad
 * pointer costs one variable, never the dump). Only simple values are shown:
 * int, bool, float, str, bytes and None, with length caps; any other object is
 * named by its type only. */
#ifndef BF_SMP_LOCALS_H
#define BF_SMP_LOCALS_H

#include <stddef.h>

#include "sampler.h"

typedef struct bf_smp_local {
  char *name;  /* the variable's name (UTF-8) */
  char *type;  /* its type's name ("int", "list", ...); "?" when unreadable */
  char *repr;  /* Python-like repr of a simple value; NULL when not shown */
} bf_smp_local;

#define BF_SMP_LOCALS_MAX 256    /* variables per frame */
#define BF_SMP_LOCAL_STR_MAX 120 /* characters of a str / bytes value shown */

/* Locals of frame f, which must come from the last bf_smp_sample on h (not
 * from a native sample). Unbound variables are left out.
 * OUT: *out (free with bf_smp_locals_free), *n.
 * Errors: -EINVAL f is not a frame of h's last sample or not a Python frame;
 * -ENOTSUP this Python version/build (message on h); -EIO the frame or its
 * code object is unreadable now; -ESRCH target gone; -ENOMEM. */
int bf_smp_locals(bf_smp *h, const bf_smp_frame *f, bf_smp_local **out, size_t *n);

void bf_smp_locals_free(bf_smp_local *v, size_t n);

#endif
