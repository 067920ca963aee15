/* bench_readv.c — what the kernel charges for process_vm_readv on this
 * machine, independent of bifocal: one call reading k small regions that lie
 * on k different pages, against one region, against k pages in one region.
 * It gives the floor under the sampler's per-sample cost: a stack whose
 * frames lie on k separate pages (CPython 3.8-3.10 frame objects) cannot be
 * read for less than the k-region figure.
 * usage: bench_readv   (prints; not a test)
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

enum { PAGES = 32, REPS = 100000, ROUNDS = 5 };

static int64_t mono(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* Median over ROUNDS of the mean cost of one call (us). */
static double cost(pid_t pid, const struct iovec *l, const struct iovec *r, int n) {
  double best[ROUNDS];
  for (int k = 0; k < ROUNDS; k++) {
    int64_t t = mono();
    for (int i = 0; i < REPS / ROUNDS; i++)
      if (process_vm_readv(pid, l, (unsigned long)n, r, (unsigned long)n, 0) < 0) {
        perror("process_vm_readv");
        exit(1);
      }
    best[k] = (double)(mono() - t) / 1e3 / (REPS / ROUNDS);
  }
  for (int i = 1; i < ROUNDS; i++) /* insertion sort, ROUNDS is tiny */
    for (int j = i; j > 0 && best[j] < best[j - 1]; j--) {
      double x = best[j];
      best[j] = best[j - 1];
      best[j - 1] = x;
    }
  return best[ROUNDS / 2];
}

int main(void) {
  size_t pg = (size_t)sysconf(_SC_PAGESIZE);
  unsigned char *mem = mmap(NULL, PAGES * pg, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                            -1, 0);
  if (mem == MAP_FAILED) return 1;
  memset(mem, 1, PAGES * pg); /* fault every page in before the fork */
  pid_t c = fork();
  if (c == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    for (;;) pause();
  }
  static unsigned char dst[PAGES * 4096 * 2];
  struct iovec l[PAGES], r[PAGES];
  printf("bench_readv: one process_vm_readv call (median of %d rounds of %d calls)\n", ROUNDS,
         REPS / ROUNDS);
  const int ks[] = {1, 2, 4, 6, 8, 10, 16};
  for (size_t i = 0; i < sizeof ks / sizeof ks[0]; i++) {
    int k = ks[i];
    for (int j = 0; j < k; j++) { /* 112 bytes (a 3.8 frame's fields) on page j */
      l[j] = (struct iovec){dst + (size_t)j * 256, 112};
      r[j] = (struct iovec){mem + (size_t)j * pg + 64, 112};
    }
    double sep = cost(c, l, r, k);
    for (int j = 0; j < k; j++) { /* k regions in one page */
      l[j] = (struct iovec){dst + (size_t)j * 256, 112};
      r[j] = (struct iovec){mem + 64 + (size_t)j * 256 % (pg - 256), 112};
    }
    double same = cost(c, l, r, k);
    struct iovec l1 = {dst, (size_t)k * pg}, r1 = {mem, (size_t)k * pg};
    double one = cost(c, &l1, &r1, 1);
    printf("  %2d regions of 112 B on %2d pages: %5.2f us | on one page: %5.2f us | one region "
           "of %2d whole pages: %5.2f us\n",
           k, k, sep, same, k, one);
  }
  kill(c, SIGKILL);
  waitpid(c, NULL, 0);
  return 0;
}
