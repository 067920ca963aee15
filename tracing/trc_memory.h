/* trc_memory.h — `trace --memory`: exact allocation accounting through the
 * PEP 445 allocator hooks (RAW, MEM and OBJ domains), charged to the shadow
 * stacks of trc_stack.h. The hooks are process-wide, so their state is too
 * (one enabled Profile at a time); results move into the Profile at stop.
 */
#ifndef BF_TRC_MEMORY_H
#define BF_TRC_MEMORY_H

#include "trc_module.h"

#pragma GCC visibility push(hidden)

/* Blocks at least this big have their allocating stack kept, so the largest
 * live ones can be shown with it. */
#define TRC_MEM_STACK_MIN 512
/* How many of the largest live blocks are kept at stop. */
#define TRC_MEM_TOP 20

/* Hook the three allocator domains (chaining to whatever is installed, so
 * tracemalloc or memray under bifocal keep working) and start counting for
 * p. 0, or -1 with a Python error. GIL held. */
int trc_mem_start(ProfileObject *p);

/* Stop counting; the totals and the largest live blocks move into p (kept
 * until trc_mem_free). The hooks are removed where nothing chained on top of
 * them since; else they stay as a pass-through. GIL held. */
void trc_mem_stop(ProfileObject *p);

/* Free p's memory results. Accepts a p without any. */
void trc_mem_free(ProfileObject *p);

/* p's results for the writer (borrowed from p), or NULL when none. */
const bf_trc_mem *trc_mem_result(ProfileObject *p);

/* p's results as Python data for Profile.stats() (names must be filled):
 * {"functions": [...], "edges": [...], "top": [...], "unattributed": {...},
 *  "peak_live_bytes": n, "untracked_frees": n, "partial": bool}; a new
 * reference, or NULL with a Python error. */
PyObject *trc_mem_stats(ProfileObject *p);

/* The session's extra_json member for p's memory run ("\"memory\":{...}"),
 * into buf; empty when p traced no memory. */
void trc_mem_extra_json(ProfileObject *p, char *buf, size_t len);

#pragma GCC visibility pop

#endif
