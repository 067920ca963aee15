/* pyalloc.c — pymalloc's totals read from outside: the arenas the main
 * interpreter's object allocator holds, and its pools that hold at least one
 * live block. CPython keeps no byte counter of its own; these two come from
 * the allocator's management state (struct _obmalloc_mgmt: the arenas
 * vector, its length, narenas_currently_allocated) and the vector itself
 * (struct arena_object: address, nfreepools, ntotalpools), in
 * PyInterpreterState's obmalloc (3.12: the state inside the interpreter;
 * 3.13+: a pointer to it), or on 3.8-3.11 statics of Objects/obmalloc.c
 * (arenas, maxarenas, narenas_currently_allocated) whose addresses only the
 * symbol table of an unstripped build gives (attach.c). The offsets below are
 * offsetof() compiled against each version's own headers
 * (sampling/gen/obmalloc_offsets.sh: pycore_interp.h, pycore_obmalloc.h);
 * 3.8-3.11's struct arena_object (in obmalloc.c) is the same 48 bytes by
 * their debug information (gdb ptype /o). _Py_DebugOffsets does not carry
 * them. Each read is checked (the vector's live arenas must number
 * narenas_currently_allocated, every arena's pools within its total), so a
 * build whose layout differs is refused, not misread. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pyalloc.h"
#include "smp_int.h"

#define ST_MGMT 512 /* offsetof(struct _obmalloc_state, mgmt), 3.12-3.15 */
#define MG_ARENAS 0           /* struct _obmalloc_mgmt: arenas, maxarenas, narenas_currently_allocated */
#define MG_MAXARENAS 8
#define MG_NARENAS 552
#define AO_SIZE 48            /* sizeof(struct arena_object) */
#define AO_ADDRESS 0
#define AO_NFREE 16
#define AO_NTOTAL 20
#define POOLS_PER_ARENA 64    /* ARENA_SIZE / POOL_SIZE, every version */
#define MAX_ARENAS (1u << 16) /* read the vector up to 64 GiB of arenas */

static const struct {
  int minor;
  uint64_t is_obmalloc; /* offsetof(PyInterpreterState, obmalloc) */
  int is_pointer;       /* 3.13+: struct _obmalloc_state * */
} layouts[] = {{12, 3960, 0}, {13, 10800, 1}, {14, 10904, 1}, {15, 10880, 1}};

static int refuse(smp_pyalloc *p, const char *why) {
  p->state = -1;
  snprintf(p->why, sizeof p->why, "%s", why);
  return -ENOTSUP;
}

static int find(bf_smp *h, smp_pyalloc *p) {
  int minor = (int)((h->lay.version_hex >> 16) & 0xff);
  if ((h->lay.version_hex >> 24) != 3 || minor < 8) return refuse(p, "not read: no obmalloc layout for this version");
  /* ARENA_SIZE: 1 MiB with the radix tree (3.10+, 64-bit), else 256 KiB;
   * pools are an arena's 64th either way (sys._debugmallocstats() agrees) */
  p->arena = minor >= 10 ? 1048576 : 262144;
  if (minor <= 11) {
    if (!h->obm_arenas)
      return refuse(p, "not read: 3.8-3.11 keep pymalloc's state in statics of obmalloc.c, named only in the "
                       "symbol table of an unstripped build (this one has none)");
    return 0;
  }
  size_t i = 0;
  while (i < sizeof layouts / sizeof layouts[0] && layouts[i].minor != minor) i++;
  if (i == sizeof layouts / sizeof layouts[0]) return refuse(p, "not read: no obmalloc layout for this version");
  /* the main interpreter: the last of the list (the first made) */
  uint64_t interp = 0, next = 0;
  if (smp_read(h, h->runtime_addr + h->lay.rt_interp_head, &interp, 8) < 0 || !interp) return -EIO;
  for (int k = 0; k < 256 && smp_read(h, interp + h->lay.is_next, &next, 8) == 0 && next; k++) interp = next;
  uint64_t st = interp + layouts[i].is_obmalloc;
  if (layouts[i].is_pointer && (smp_read(h, st, &st, 8) < 0 || !st)) return -EIO;
  p->mgmt = st + ST_MGMT;
  return 0;
}

/* arenas (the vector), maxarenas, narenas_currently_allocated. 0 or -EIO. */
static int read_mgmt(bf_smp *h, const smp_pyalloc *p, uint64_t *arenas, uint32_t *maxarenas, uint64_t *narenas) {
  if (!p->mgmt) /* 3.8-3.11: the statics */
    return smp_read(h, h->obm_arenas, arenas, 8) < 0 || smp_read(h, h->obm_maxarenas, maxarenas, 4) < 0 ||
                   smp_read(h, h->obm_narenas, narenas, 8) < 0
               ? -EIO
               : 0;
  unsigned char mg[MG_NARENAS + 8];
  if (smp_read(h, p->mgmt, mg, sizeof mg) < 0) return -EIO;
  *arenas = rd64(mg + MG_ARENAS);
  *narenas = rd64(mg + MG_NARENAS);
  *maxarenas = rd32(mg + MG_MAXARENAS);
  return 0;
}

int smp_pyalloc_read(bf_smp *h, smp_pyalloc *p) {
  if (p->state < 0) return -ENOTSUP;
  int rc;
  if (!p->state && (rc = find(h, p)) < 0) return rc;
  uint64_t arenas = 0, narenas = 0;
  uint32_t maxarenas = 0;
  if (read_mgmt(h, p, &arenas, &maxarenas, &narenas) < 0) {
    p->failed++;
    return -EIO;
  }
  if (maxarenas > MAX_ARENAS || narenas > maxarenas || (maxarenas && !arenas))
    return refuse(p, "not read: pymalloc's state does not check out (another build's layout)");
  unsigned char *v = maxarenas ? malloc((size_t)maxarenas * AO_SIZE) : NULL;
  if (maxarenas && !v) return -ENOMEM;
  if (maxarenas && smp_read(h, arenas, v, (size_t)maxarenas * AO_SIZE) < 0) {
    free(v);
    p->failed++;
    return -EIO;
  }
  uint64_t live = 0, used = 0;
  int bad = 0;
  for (uint32_t a = 0; a < maxarenas; a++) {
    const unsigned char *ao = v + (size_t)a * AO_SIZE;
    if (!rd64(ao + AO_ADDRESS)) continue;
    uint32_t nfree = rd32(ao + AO_NFREE), ntotal = rd32(ao + AO_NTOTAL);
    if (ntotal > POOLS_PER_ARENA || nfree > ntotal) bad = 1;
    else used += ntotal - nfree;
    live++;
  }
  free(v);
  /* the allocator runs meanwhile: an arena made or freed between the two
   * reads is one off, not a layout that does not fit */
  if (bad || live > narenas + 1 || live + 1 < narenas) {
    if (p->state == 1 && !bad) {
      p->failed++;
      return -EIO;
    }
    return refuse(p, "not read: pymalloc's arenas do not check out (another build's layout)");
  }
  p->state = 1;
  p->arena_bytes = (int64_t)narenas * p->arena;
  p->pool_bytes = (int64_t)used * (p->arena / POOLS_PER_ARENA);
  p->reads++;
  return 0;
}
