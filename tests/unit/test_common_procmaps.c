/* test_common_procmaps.c — the /proc/PID/maps parser: exact fields of known
 * lines (path with spaces, pseudo and anonymous mappings, malformed lines),
 * then this process's own maps against what the process knows of itself:
 * main() in an executable mapping of /proc/self/exe, a stack variable in
 * [stack], a fresh anonymous mmap in an anonymous read-write mapping. */
#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "check.h"
#include "procmaps.h"

typedef struct probe {
  uint64_t addr;
  int hits;
  bf_procmap m;
  char name[PATH_MAX];
} probe;

typedef struct walk {
  probe p[3];
  uint64_t last_lo;
  int ordered, n;
} walk;

static int visit(void *ud, const bf_procmap *m) {
  walk *w = ud;
  if (w->n++ && m->lo < w->last_lo) w->ordered = 0;
  w->last_lo = m->lo;
  for (int i = 0; i < 3; i++)
    if (w->p[i].addr >= m->lo && w->p[i].addr < m->hi) {
      w->p[i].hits++;
      w->p[i].m = *m;
      snprintf(w->p[i].name, sizeof w->p[i].name, "%s", m->name);
    }
  return 0;
}

static int stop_at_third(void *ud, const bf_procmap *m) {
  (void)m;
  return ++*(int *)ud == 3 ? 42 : 0;
}

int main(void) {
  bf_procmap m;
  char l1[] = "7f3a1c000000-7f3a1c021000 r-xp 0001a000 08:01 1234567                    /usr/lib/my lib.so (deleted)\n";
  CHECK_EQ_INT(bf_procmap_parse(l1, &m), 0);
  CHECK(m.lo == 0x7f3a1c000000ULL && m.hi == 0x7f3a1c021000ULL && m.off == 0x1a000);
  CHECK(strcmp(m.perms, "r-xp") == 0);
  CHECK(strcmp(m.name, "/usr/lib/my lib.so (deleted)") == 0);
  char l2[] = "55d0c0e2a000-55d0c0e4b000 rw-p 00000000 00:00 0                          [heap]\n";
  CHECK_EQ_INT(bf_procmap_parse(l2, &m), 0);
  CHECK(strcmp(m.name, "[heap]") == 0 && m.perms[1] == 'w');
  char l3[] = "7ffd5c1e0000-7ffd5c1e2000 rw-p 00000000 00:00 0\n"; /* anonymous: no name */
  CHECK_EQ_INT(bf_procmap_parse(l3, &m), 0);
  CHECK(strcmp(m.name, "") == 0);
  char l4[] = "not a mapping line\n", l5[] = "", l6[] = "1000-2000 r-xp\n";
  CHECK_EQ_INT(bf_procmap_parse(l4, &m), -EINVAL);
  CHECK_EQ_INT(bf_procmap_parse(l5, &m), -EINVAL);
  CHECK_EQ_INT(bf_procmap_parse(l6, &m), -EINVAL);

  int on_stack = 0;
  void *anon = mmap(NULL, 3 * 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  CHECK(anon != MAP_FAILED);
  char exe[PATH_MAX] = "";
  ssize_t k = readlink("/proc/self/exe", exe, sizeof exe - 1);
  CHECK(k > 0);
  if (k > 0) exe[k] = 0;
  walk w = {.ordered = 1};
  w.p[0].addr = (uint64_t)(uintptr_t)&main;
  w.p[1].addr = (uint64_t)(uintptr_t)&on_stack;
  w.p[2].addr = (uint64_t)(uintptr_t)anon + 4096;
  CHECK_EQ_INT(bf_procmaps_foreach(getpid(), visit, &w), 0);
  CHECK(w.n > 5 && w.ordered);
  CHECK_EQ_INT(w.p[0].hits, 1);
  CHECK(w.p[0].m.perms[2] == 'x' && strcmp(w.p[0].name, exe) == 0);
  CHECK_EQ_INT(w.p[1].hits, 1);
  CHECK(strcmp(w.p[1].name, "[stack]") == 0);
  CHECK_EQ_INT(w.p[2].hits, 1);
  CHECK(strcmp(w.p[2].name, "") == 0 && w.p[2].m.perms[0] == 'r' && w.p[2].m.perms[1] == 'w');
  CHECK(w.p[2].m.lo <= (uint64_t)(uintptr_t)anon && w.p[2].m.hi >= (uint64_t)(uintptr_t)anon + 3 * 4096);
  munmap(anon, 3 * 4096);

  int calls = 0;
  CHECK_EQ_INT(bf_procmaps_foreach(getpid(), stop_at_third, &calls), 42); /* fn's value, and it stops */
  CHECK_EQ_INT(calls, 3);
  CHECK_EQ_INT(bf_procmaps_foreach(INT_MAX, visit, &w), -ENOENT); /* no such process */
  return CHECK_DONE();
}
