/* pyalloc.h — the Python allocator's state read from outside (pyalloc.c):
 * pymalloc's arenas allocated and pools in use, where the layout is known
 * and checks out. */
#ifndef BF_PYALLOC_H
#define BF_PYALLOC_H

#include <stdint.h>

#include "sampler.h"

typedef struct smp_pyalloc {
  int state;            /* 0 not tried, 1 readable, -1 not readable (why says why) */
  uint64_t mgmt;        /* &interp->obmalloc->mgmt of the main interpreter; 0: 3.8-3.11's statics */
  int64_t arena;        /* ARENA_SIZE of its version */
  int64_t arena_bytes;  /* arenas allocated x arena size, at the last read */
  int64_t pool_bytes;   /* pools with a live block x pool size, at the last read */
  int64_t reads, failed;
  char why[160];
} smp_pyalloc;

/* Read pymalloc's totals of h's main interpreter into p (finding its state
 * on the first call). 0, or a negative errno: -ENOTSUP for an interpreter
 * whose allocator state is not known from outside (p->why says why; it is
 * not tried again), -EIO for one failed read. */
int smp_pyalloc_read(bf_smp *h, smp_pyalloc *p);

#endif
