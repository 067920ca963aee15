/* remote.c — the one choke point for reading the target's memory
 * (process_vm_readv), mapping OS errors to domain errors, plus the prefetch
 * pool: the regions a sample touched are read again, all in one call, at the
 * start of the next sample, so a steady stack costs about one system call.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>

#include "smp_int.h"

#define POOL_MAX (1u << 20)
#define PREF_MAX 8192
#define IOV_BATCH 1024

int smp_errno_remote(int e) {
  switch (e) {
    case ESRCH: return -ESRCH;
    case EPERM: return -EPERM;
    case ENOMEM: /* unmapped region in the target: stale pointer */
    case EFAULT:
    default: return -EIO;
  }
}

static ssize_t do_readv(bf_smp *h, const struct iovec *l, size_t nl, const struct iovec *r,
                        size_t nr) {
  h->read_calls++;
  return h->readv(h->readv_ud, l, nl, r, nr);
}

int smp_read(bf_smp *h, uint64_t addr, void *dst, size_t len) {
  if (len == 0) return 0;
  if (addr == 0 || addr + len < addr) return -EIO;
  struct iovec l = {dst, len}, r = {(void *)(uintptr_t)addr, len};
  ssize_t n = do_readv(h, &l, 1, &r, 1);
  if (n < 0) return smp_errno_remote(errno);
  if ((size_t)n != len) return -EIO;
  return 0;
}

static size_t hash_addr(uint64_t a, size_t cap) {
  return (size_t)((a * 0x9E3779B97F4A7C15ull) >> 20) & (cap - 1);
}

static int pref_find(bf_smp *h, uint64_t addr) {
  if (!h->pref_hash_cap) return -1;
  size_t i = hash_addr(addr, h->pref_hash_cap);
  for (size_t probe = 0; probe < h->pref_hash_cap; probe++) {
    int32_t k = h->pref_hash[i];
    if (k < 0) return -1;
    if (h->pref[k].addr == addr) return k;
    i = (i + 1) & (h->pref_hash_cap - 1);
  }
  return -1;
}

void smp_prefetch_reset(bf_smp *h) {
  h->npref = h->npref_next = 0;
  h->pool_len = h->pool_next_len = 0;
  if (h->pref_hash) memset(h->pref_hash, 0xff, h->pref_hash_cap * sizeof *h->pref_hash);
}

static int grow(bf_smp *h) {
  if (!h->pref) {
    h->cap_pref = 1024;
    h->pref = calloc(h->cap_pref, sizeof *h->pref);
    h->pref_next = calloc(h->cap_pref, sizeof *h->pref_next);
    h->pool_cap = 64 * 1024;
    h->pool = malloc(h->pool_cap);
    h->pool_next = malloc(h->pool_cap);
    h->pref_hash_cap = 4096;
    h->pref_hash = malloc(h->pref_hash_cap * sizeof *h->pref_hash);
    if (!h->pref || !h->pref_next || !h->pool || !h->pool_next || !h->pref_hash) return -ENOMEM;
    memset(h->pref_hash, 0xff, h->pref_hash_cap * sizeof *h->pref_hash);
  }
  return 0;
}

/* Remember (addr, len) for the next sample's prefetch (bounded; silently
 * stops remembering past the limits). */
static void remember(bf_smp *h, uint64_t addr, size_t len) {
  if (h->npref_next >= h->cap_pref) {
    if (h->cap_pref >= PREF_MAX) return;
    size_t nc = h->cap_pref * 2;
    smp_pref *a = realloc(h->pref_next, nc * sizeof *a);
    if (!a) return;
    h->pref_next = a;
    smp_pref *b = realloc(h->pref, nc * sizeof *b);
    if (!b) return;
    h->pref = b;
    h->cap_pref = nc;
  }
  h->pref_next[h->npref_next++] = (smp_pref){addr, (uint32_t)len, 0, 0};
}

void smp_prefetch(bf_smp *h) {
  if (grow(h) < 0) return;
  /* the hot set recorded during the previous sample becomes the pool */
  smp_pref *t = h->pref;
  h->pref = h->pref_next;
  h->pref_next = t;
  h->npref = h->npref_next;
  h->npref_next = 0;
  size_t total = 0;
  for (size_t i = 0; i < h->npref; i++) total += h->pref[i].len;
  if (total > POOL_MAX) {
    h->npref = 0;
    total = 0;
  }
  if (total > h->pool_cap) {
    unsigned char *a = realloc(h->pool, total), *b = realloc(h->pool_next, total);
    if (a) h->pool = a;
    if (b) h->pool_next = b;
    if (!a || !b) {
      h->npref = 0;
      return;
    }
    h->pool_cap = total;
  }
  /* hash for lookup; twice the entries keeps probes short */
  size_t need = 16;
  while (need < h->npref * 2) need <<= 1;
  if (need > h->pref_hash_cap) {
    int32_t *nh = realloc(h->pref_hash, need * sizeof *nh);
    if (!nh) {
      h->npref = 0;
      return;
    }
    h->pref_hash = nh;
    h->pref_hash_cap = need;
  }
  memset(h->pref_hash, 0xff, h->pref_hash_cap * sizeof *h->pref_hash);
  size_t off = 0;
  for (size_t i = 0; i < h->npref; i++) {
    h->pref[i].off = (uint32_t)off;
    h->pref[i].ok = 0;
    off += h->pref[i].len;
    if (pref_find(h, h->pref[i].addr) >= 0) continue; /* duplicate region */
    size_t k = hash_addr(h->pref[i].addr, h->pref_hash_cap);
    while (h->pref_hash[k] >= 0) k = (k + 1) & (h->pref_hash_cap - 1);
    h->pref_hash[k] = (int32_t)i;
  }
  h->pool_len = off;
  /* one process_vm_readv per IOV_BATCH regions; a failing region stops the
   * call there, so the rest is retried from the region after it */
  struct iovec lv[IOV_BATCH], rv[IOV_BATCH];
  size_t i = 0;
  while (i < h->npref) {
    size_t nb = 0;
    for (size_t k = i; k < h->npref && nb < IOV_BATCH; k++, nb++) {
      lv[nb].iov_base = h->pool + h->pref[k].off;
      lv[nb].iov_len = h->pref[k].len;
      rv[nb].iov_base = (void *)(uintptr_t)h->pref[k].addr;
      rv[nb].iov_len = h->pref[k].len;
    }
    ssize_t n = do_readv(h, lv, nb, rv, nb);
    if (n < 0) {
      if (errno == ESRCH) return;
      i++; /* first region unreadable: skip it */
      continue;
    }
    size_t got = (size_t)n, k = 0;
    while (k < nb && got >= h->pref[i + k].len) {
      got -= h->pref[i + k].len;
      h->pref[i + k].ok = 1;
      k++;
    }
    i += k;
    if (k < nb) i++; /* the partial one is not ok; go on after it */
  }
}

const unsigned char *smp_read_hot(bf_smp *h, uint64_t addr, size_t len, int *err) {
  if (len > sizeof h->scratch || addr == 0) {
    *err = -EIO;
    return NULL;
  }
  remember(h, addr, len);
  int k = pref_find(h, addr);
  if (k >= 0 && h->pref[k].ok && h->pref[k].len >= len) return h->pool + h->pref[k].off;
  /* miss: read into the next free part of the pool so earlier pointers stay valid */
  if (h->pool_len + len > h->pool_cap) {
    /* no room: a private scratch copy (valid until the next miss) */
    int rc = smp_read(h, addr, h->scratch, len);
    if (rc < 0) {
      *err = rc;
      return NULL;
    }
    return h->scratch;
  }
  unsigned char *dst = h->pool + h->pool_len;
  int rc = smp_read(h, addr, dst, len);
  if (rc < 0) {
    *err = rc;
    return NULL;
  }
  h->pool_len += len;
  return dst;
}
