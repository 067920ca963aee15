/* test_smp_remote.c — the prefetch pool of sampling/remote.c over a fake
 * memory image: a region is read right whether it comes from the prefetch,
 * from a page an earlier miss of the same walk read whole, or from a fresh
 * read; and a garbage address whose end wraps past 2^64 (a 3.15 frame link
 * of -24, say) is refused, not served from a cached page at a wild offset
 * (the SIGSEGV of issue #26's first merge). */
#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <sys/uio.h>

#include "smp_int.h" /* sampling/internal/: on this test's include path only */
#include "check.h"

#define BASE 0x7f0000000000ull
#define SIZE 65536
#include "fake_remote.h"

static void fill(void) {
  for (size_t i = 0; i < SIZE; i++) mem[i] = (unsigned char)(i * 7 + (i >> 8));
}

/* Reads region (addr, len) hot and checks it against the image. */
static void check_region(bf_smp *h, uint64_t addr, size_t len) {
  int err = 0;
  const unsigned char *p = smp_read_hot(h, addr, len, &err);
  CHECK(p != NULL);
  if (p) CHECK(memcmp(p, mem + (addr - BASE), len) == 0);
}

/* A walk's misses, then the same regions from the next sample's prefetch,
 * then after the image changed between samples. */
static void test_regions_read_right(void) {
  bf_smp *h = bf_smp_new();
  CHECK(h != NULL);
  smp_set_reader(h, fake_readv, NULL);
  fill();
  static const struct {
    uint64_t off;
    size_t len;
  } regs[] = {{0x100, 64}, {0x180, 80}, {0xff8, 64} /* across a page end */, {0x1000, 8},
              {0x5010, 200}, {0x5100, 16}, {SIZE - 64, 64} /* the image's last bytes */};
  size_t n = sizeof regs / sizeof regs[0];
  for (int sample = 0; sample < 4; sample++) {
    if (sample == 2) { /* the target wrote meanwhile: the next prefetch sees it */
      for (size_t i = 0; i < SIZE; i++) mem[i] ^= 0x5a;
      put(BASE + 0x180, 0x1122334455667788ull);
    }
    smp_prefetch(h);
    for (size_t i = 0; i < n; i++) check_region(h, BASE + regs[i].off, regs[i].len);
  }
  /* more misses in one walk than pages it keeps: still read right */
  smp_prefetch(h);
  for (uint64_t off = 0; off + 4096 <= SIZE; off += 2048) check_region(h, BASE + off + 24, 40);
  bf_smp_free(h);
}

/* Addresses whose region ends past 2^64, or outside the image, once a page
 * of the image was read whole by this walk. */
static void test_wrapping_region_refused(void) {
  bf_smp *h = bf_smp_new();
  CHECK(h != NULL);
  smp_set_reader(h, fake_readv, NULL);
  fill();
  for (int sample = 0; sample < 2; sample++) {
    smp_prefetch(h);
    check_region(h, BASE + 0x200, 72); /* a miss: its page is now in the pool */
    static const struct {
      uint64_t addr;
      size_t len;
    } bad[] = {{UINT64_MAX - 23, 72},            /* -24: ends at 48 after the wrap */
               {0 - (uint64_t)72, 72},           /* ends exactly at 2^64 */
               {UINT64_MAX, 1},                  /* ends exactly at 2^64 */
               {UINT64_MAX - 4095, 4096 + 16},   /* wraps from the last page */
               {UINT64_MAX - 4095, 16},          /* in the last page (its page end wraps) */
               {BASE + SIZE, 8},                 /* just past the image */
               {BASE - 8, 16}};                  /* straddles its start */
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
      int err = 0;
      const unsigned char *p = smp_read_hot(h, bad[i].addr, bad[i].len, &err);
      CHECK(p == NULL);
      CHECK_EQ_INT(err, -EIO);
      p = smp_read_cold(h, bad[i].addr, bad[i].len, &err);
      CHECK(p == NULL);
    }
  }
  bf_smp_free(h);
}

int main(void) {
  test_regions_read_right();
  test_wrapping_region_refused();
  return CHECK_DONE();
}
