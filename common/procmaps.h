/* procmaps.h — the one /proc/PID/maps parser: each mapping as numbers, its
 * permissions and its path. No project includes. */
#ifndef BF_PROCMAPS_H
#define BF_PROCMAPS_H

#include <stdint.h>

typedef struct bf_procmap {
  uint64_t lo, hi;  /* [lo, hi) */
  uint64_t off;     /* file offset of lo */
  char perms[8];    /* e.g. "r-xp" */
  const char *name; /* pathname field, newline removed: "/usr/lib/x.so", "[heap]", or "" (anonymous);
                       borrowed until the callback returns */
} bf_procmap;

/* fn returns 0 to go on, anything else to stop (that value is returned). */
typedef int (*bf_procmap_fn)(void *ud, const bf_procmap *m);

/* Parse one line of a maps file. 0, or -EINVAL when it is not a mapping line.
 * line is modified (its newline removed); m->name points into it. */
int bf_procmap_parse(char *line, bf_procmap *m);

/* Call fn for each mapping of process pid, in the file's (address) order.
 * Lines longer than 1023 bytes are read in pieces (a piece that does not
 * parse is skipped). Returns 0, fn's non-zero value, or -errno when the file
 * cannot be opened (-ENOENT: no such process). */
int bf_procmaps_foreach(int pid, bf_procmap_fn fn, void *ud);

#endif
