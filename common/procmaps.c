/* procmaps.c — the one /proc/PID/maps parser (see procmaps.h). */
#include "procmaps.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

int bf_procmap_parse(char *line, bf_procmap *m) {
  unsigned long long lo, hi, off;
  int k = 0;
  if (sscanf(line, "%llx-%llx %7s %llx %*s %*s %n", &lo, &hi, m->perms, &off, &k) < 4 || k <= 0) return -EINVAL;
  char *p = line + k;
  p[strcspn(p, "\n")] = 0;
  m->lo = lo;
  m->hi = hi;
  m->off = off;
  m->name = p;
  return 0;
}

int bf_procmaps_foreach(int pid, bf_procmap_fn fn, void *ud) {
  char path[64], line[1024];
  snprintf(path, sizeof path, "/proc/%d/maps", pid);
  FILE *f = fopen(path, "re");
  if (!f) return -errno;
  int rc = 0;
  while (!rc && fgets(line, sizeof line, f)) {
    bf_procmap m;
    if (bf_procmap_parse(line, &m) == 0) rc = fn(ud, &m);
  }
  fclose(f);
  return rc;
}
