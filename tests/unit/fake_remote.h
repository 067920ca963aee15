/* fake_remote.h — a fake remote process for the sampler's unit tests: SIZE
 * bytes of memory at address BASE, read through fake_readv (install it with
 * smp_set_reader(h, fake_readv, NULL)). Define BASE and SIZE before including;
 * a read past the image fails with EFAULT, or returns what was read before it,
 * as process_vm_readv does. */
#ifndef BF_FAKE_REMOTE_H
#define BF_FAKE_REMOTE_H

#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <sys/types.h>
#include <sys/uio.h>

static unsigned char mem[SIZE];
static unsigned long readv_calls; /* reads asked, for tests that count them */

static ssize_t fake_readv(void *ud, const struct iovec *l, size_t nl, const struct iovec *r, size_t nr) {
  (void)ud;
  (void)nl;
  ssize_t total = 0;
  readv_calls++;
  for (size_t i = 0; i < nr; i++) {
    uint64_t a = (uint64_t)(uintptr_t)r[i].iov_base;
    if (a < BASE || a - BASE + r[i].iov_len > SIZE) {
      if (total) return total;
      errno = EFAULT;
      return -1;
    }
    memcpy(l[i].iov_base, mem + (a - BASE), r[i].iov_len);
    total += (ssize_t)r[i].iov_len;
  }
  return total;
}

/* One 8-byte word at addr. */
static void put(uint64_t addr, uint64_t v) { memcpy(mem + (addr - BASE), &v, 8); }

#endif
