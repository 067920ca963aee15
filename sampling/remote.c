/* remote.c — the one choke point for reading the target's memory
 * (process_vm_readv), mapping OS errors to domain errors, plus the prefetch
 * pool: the regions the recent samples touched are read again, all in one
 * call, at the start of the next sample, so a steady stack costs about one
 * system call.
 *
 * The hot set is sticky: a region the last sample did not touch stays in it
 * for a few more samples (SMP_PREF_KEEP). A stack that grows and shrinks
 * between samples (the common case at 1 kHz) then finds its deeper frames
 * already read instead of paying a system call per frame (about 1.5 us
 * each, against about 0.5 us for one more iovec in the shared call).
 *
 * Also here: the target's thread ids as its PID namespace sees them (what
 * CPython stores) mapped to host tids, from /proc/PID/task/TID/status NSpid.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "smp_int.h"
#include "vec.h"

#define POOL_MAX (1u << 20)
#define PREF_MAX 8192
#define IOV_BATCH 1024
#define SMP_PREF_KEEP 4 /* samples an untouched region stays in the hot set */

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
  h->read_iovs += nr;
  for (size_t i = 0; i < nr; i++) h->read_bytes += r[i].iov_len;
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

static int pref_find(bf_smp *h, uint64_t addr) {
  const smp_pref_slot *e = bf_pmap_get(&h->pref_hash, addr);
  return e ? (int)e->index : -1;
}

static void hash_clear(bf_smp *h) { bf_pmap_clear(&h->pref_hash); }

void smp_prefetch_reset(bf_smp *h) {
  h->npref = h->npref_next = 0;
  h->pool_len = 0;
  h->nmiss = 0;
  h->plan_n = 0;
  hash_clear(h);
}

/* On first use: the prefetch arrays, pool and hash (remember() grows them). */
static int pref_alloc(bf_smp *h) {
  if (!h->pref) {
    h->cap_pref = 1024;
    h->pref = calloc(h->cap_pref, sizeof *h->pref);
    h->pref_next = calloc(h->cap_pref, sizeof *h->pref_next);
    h->pool_cap = 256 * 1024;
    h->pool = malloc(h->pool_cap);
    h->pref_hash = (bf_pmap)BF_PMAP_INIT(smp_pref_slot);
    if (!h->pref || !h->pref_next || !h->pool || bf_pmap_reserve(&h->pref_hash, 8) < 0) return -ENOMEM;
  }
  return 0;
}

/* Remember (addr, len) for the next sample's prefetch (bounded; silently
 * stops remembering past the limits). */
static void remember(bf_smp *h, uint64_t addr, size_t len) {
  if (h->npref_next >= h->cap_pref) {
    if (h->cap_pref >= PREF_MAX) return;
    /* the two arrays swap roles every sample: they keep one capacity */
    size_t ca = h->cap_pref, cb = h->cap_pref;
    if (bf_vec_grow((void **)&h->pref_next, &ca, h->cap_pref + 1, sizeof *h->pref_next, 0) < 0) return;
    if (bf_vec_grow((void **)&h->pref, &cb, h->cap_pref + 1, sizeof *h->pref, 0) < 0) return;
    h->cap_pref = ca;
  }
  h->pref_next[h->npref_next++] = (smp_pref){addr, (uint32_t)len, 0, 0, 0, 0};
}

/* Regions of the hot set sorted by address and merged into spans when close
 * (each iovec costs a page pin in the kernel; copying a gap is cheaper). The
 * plan is kept while the hot set stays the same, which is the steady state. */
#define MERGE_GAP 4096
#define SPAN_MAX (256u * 1024)

static int by_addr(const void *a, const void *b, void *ud) {
  const smp_pref *base = ud;
  const smp_pref *x = &base[*(const uint32_t *)a], *y = &base[*(const uint32_t *)b];
  return (x->addr > y->addr) - (x->addr < y->addr);
}

static int plan_same(const bf_smp *h) {
  if (h->plan_n != h->npref) return 0;
  for (size_t i = 0; i < h->npref; i++)
    if (h->plan_key[i].addr != h->pref[i].addr || h->plan_key[i].len != h->pref[i].len) return 0;
  return 1;
}

static int plan_build(bf_smp *h) {
  size_t n = h->npref;
  h->plan_builds++;
  if (n > h->plan_cap) {
    size_t nc = n * 2;
    uint32_t *o = realloc(h->plan_ord, nc * sizeof *o);
    if (o) h->plan_ord = o;
    smp_span *sp = realloc(h->plan_sp, nc * sizeof *sp);
    if (sp) h->plan_sp = sp;
    smp_pref *k = realloc(h->plan_key, nc * sizeof *k);
    if (k) h->plan_key = k;
    if (!o || !sp || !k) return -ENOMEM;
    h->plan_cap = nc;
  }
  uint32_t *ord = h->plan_ord;
  smp_span *sp = h->plan_sp;
  for (size_t i = 0; i < n; i++) ord[i] = (uint32_t)i;
  qsort_r(ord, n, sizeof *ord, by_addr, h->pref);
  size_t ns = 0;
  for (size_t k = 0; k < n; k++) {
    const smp_pref *p = &h->pref[ord[k]];
    uint64_t end = p->addr + p->len;
    if (end < p->addr) continue;
    if (ns && p->addr <= sp[ns - 1].end + MERGE_GAP && end - sp[ns - 1].addr <= SPAN_MAX) {
      if (end > sp[ns - 1].end) sp[ns - 1].end = end;
      sp[ns - 1].last = k;
    } else {
      sp[ns++] = (smp_span){p->addr, end, k, k, 0};
    }
  }
  size_t total = 0;
  for (size_t i = 0; i < ns; i++) {
    sp[i].off = total;
    total += sp[i].end - sp[i].addr;
  }
  if (total > h->span_cap) {
    unsigned char *nb = realloc(h->span_buf, total);
    if (!nb) return -ENOMEM;
    h->span_buf = nb;
    h->span_cap = total;
  }
  for (size_t i = 0; i < ns; i++)
    for (size_t r = sp[i].first; r <= sp[i].last; r++) {
      smp_pref *p = &h->pref[ord[r]];
      p->off = (uint32_t)(sp[i].off + (p->addr - sp[i].addr));
    }
  h->plan_ns = ns;
  h->plan_total = total;
  h->plan_n = n;
  for (size_t i = 0; i < n; i++) h->plan_key[i] = h->pref[i];
  /* address -> region index; the first of duplicate regions wins */
  bf_pmap_clear(&h->pref_hash);
  if (bf_pmap_reserve(&h->pref_hash, n) < 0) return -ENOMEM;
  for (size_t i = 0; i < n; i++) {
    int added;
    smp_pref_slot *e = bf_pmap_put(&h->pref_hash, h->pref[i].addr, &added);
    if (e && added) e->index = (int64_t)i;
  }
  return 0;
}

/* Regions of the last plan that the last sample did not touch, still read
 * fine and not too old, join the regions it touched (appended after them,
 * so a touched duplicate wins the hash). */
static void carry_over(bf_smp *h) {
  size_t touched = h->npref_next, kept = 0;
  for (size_t i = 0; i < h->npref && h->npref_next < PREF_MAX; i++) {
    const smp_pref p = h->pref[i]; /* a copy: remember() may move h->pref */
    if (p.used || !p.ok || p.age + 1 >= SMP_PREF_KEEP) continue;
    if (kept >= touched + 8) break; /* never let the stale part dwarf the live one */
    size_t before = h->npref_next;
    remember(h, p.addr, p.len);
    if (h->npref_next == before) break;
    h->pref_next[before].age = (uint8_t)(p.age + 1);
    kept++;
  }
}

void smp_prefetch(bf_smp *h) {
  if (pref_alloc(h) < 0) return;
  carry_over(h);
  /* the hot set recorded during the previous samples becomes the pool */
  smp_pref *t = h->pref;
  h->pref = h->pref_next;
  h->pref_next = t;
  h->npref = h->npref_next;
  h->npref_next = 0;
  h->pool_len = 0;
  h->nmiss = 0;
  h->pref_cursor = 0;
  h->pref_all_ok = 0;
  for (size_t i = 0; i < h->npref; i++) h->pref[i].used = 0;
  if (!h->npref) {
    h->plan_n = 0;
    hash_clear(h);
    return;
  }
  if (plan_same(h)) {
    for (size_t i = 0; i < h->npref; i++) h->pref[i].off = h->plan_key[i].off;
  } else if (plan_build(h) < 0) {
    h->npref = 0;
    h->plan_n = 0;
    hash_clear(h);
    return;
  } else {
    for (size_t i = 0; i < h->npref; i++) h->plan_key[i].off = h->pref[i].off;
  }
  struct iovec lv[IOV_BATCH], rv[IOV_BATCH];
  const smp_span *sp = h->plan_sp;
  size_t ns = h->plan_ns, i = 0, bad = 0;
  while (i < ns) {
    size_t nb = 0;
    for (size_t k = i; k < ns && nb < IOV_BATCH; k++, nb++) {
      size_t len = sp[k].end - sp[k].addr;
      lv[nb].iov_base = h->span_buf + sp[k].off;
      lv[nb].iov_len = len;
      rv[nb].iov_base = (void *)(uintptr_t)sp[k].addr;
      rv[nb].iov_len = len;
    }
    ssize_t got = do_readv(h, lv, nb, rv, nb);
    size_t want = 0;
    for (size_t k = 0; k < nb; k++) want += lv[k].iov_len;
    if (got < 0 || (size_t)got != want) {
      /* a span failed (stale pointer): mark what arrived, region by region */
      size_t left = got > 0 ? (size_t)got : 0;
      for (size_t k = i; k < i + nb; k++) {
        size_t len = sp[k].end - sp[k].addr, have = left < len ? left : len;
        left -= have;
        for (size_t r = sp[k].first; r <= sp[k].last; r++) {
          smp_pref *p = &h->pref[h->plan_ord[r]];
          p->ok = p->addr + p->len <= sp[k].addr + have;
        }
      }
      bad = 1;
      if (got < 0 && errno == ESRCH) break;
    } else {
      for (size_t k = i; k < i + nb; k++)
        for (size_t r = sp[k].first; r <= sp[k].last; r++) h->pref[h->plan_ord[r]].ok = 1;
    }
    i += nb;
  }
  if (!bad) h->pref_all_ok = 1;
}

static const unsigned char *read_pooled(bf_smp *h, uint64_t addr, size_t len, int remembered, int *err);

const unsigned char *smp_read_hot(bf_smp *h, uint64_t addr, size_t len, int *err) {
  return read_pooled(h, addr, len, 1, err);
}

/* A region read once in a while (a cached code object's identity, once a
 * millisecond): not worth a place in the next samples' prefetch, where it
 * would only add an iovec and change the plan twice. */
const unsigned char *smp_read_cold(bf_smp *h, uint64_t addr, size_t len, int *err) {
  return read_pooled(h, addr, len, 0, err);
}

static const unsigned char *read_pooled(bf_smp *h, uint64_t addr, size_t len, int remembered, int *err) {
  /* garbage links are normal input (a 3.15 frame link read mid-change was
   * -24 once): a region that wraps past 2^64 is refused here, before the
   * page cache below compares its end (wrapped, it fell inside an earlier
   * miss's page and was served at a wild offset: SIGSEGV) */
  if (len > sizeof h->scratch || addr == 0 || addr + len < addr) {
    *err = -EIO;
    return NULL;
  }
  if (remembered) remember(h, addr, len);
  /* a steady stack asks for the regions in the order the last walk did
   * (the order of pref): the next one is tried before the hash */
  size_t c = h->pref_cursor;
  int k = c < h->npref && h->pref[c].addr == addr && h->pref[c].ok && h->pref[c].len >= len
              ? (int)c
              : pref_find(h, addr);
  if (k >= 0 && h->pref[k].ok && h->pref[k].len >= len) {
    h->pref[k].used = 1;
    h->pref_cursor = (size_t)k + 1;
    return h->span_buf + h->pref[k].off;
  }
  /* miss: first this walk's earlier misses, each read as its whole page */
  for (size_t i = 0; i < h->nmiss; i++) {
    const smp_span *m = &h->miss[i];
    if (addr >= m->addr && addr <= m->end && len <= m->end - addr) /* no sum to wrap */
      return h->pool + m->off + (addr - m->addr);
  }
  /* then the page(s) around it, into the next free part of the pool so
   * earlier pointers stay valid: the frames a walk reaches next often lie
   * on the same page (3.11+ callers just below in the frame stack, 3.8-3.10
   * frame objects of one size class in one pool), and copying a page costs
   * far less than a system call per frame. A page is mapped whole, so it
   * reads fine exactly when the region does */
  uint64_t lo = addr & ~(uint64_t)(SMP_PAGE - 1), hi = lo + SMP_PAGE;
  if (hi < addr + len) hi = addr + len;
  if (h->nmiss < SMP_MISS_PAGES && h->pool_len + (hi - lo) <= h->pool_cap) {
    unsigned char *dst = h->pool + h->pool_len;
    if (smp_read(h, lo, dst, (size_t)(hi - lo)) == 0) {
      h->miss[h->nmiss++] = (smp_span){lo, hi, 0, 0, h->pool_len};
      h->pool_len += (size_t)(hi - lo);
      return dst + (addr - lo);
    }
  }
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

/* ---- PID namespaces ---------------------------------------------------- */

#define NS_RESCAN_MIN_NS 20000000 /* a tid not in the map: look again at most this often */

/* The NSpid line of a /proc status file: OUT *first (our namespace's id),
 * *last (the innermost namespace's id); returns the number of ids (0: none). */
static int nspid_line(const char *path, int64_t *first, int64_t *last) {
  char buf[4096];
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (n <= 0) return 0;
  buf[n] = 0;
  char *p = strstr(buf, "\nNSpid:");
  if (!p) return 0;
  p += 7;
  int k = 0;
  for (;;) {
    char *end;
    long long v = strtoll(p, &end, 10);
    if (end == p) break;
    if (k++ == 0) *first = v;
    *last = v;
    p = end;
  }
  return k;
}

static void ns_scan(bf_smp *h) {
  char path[300];
  snprintf(path, sizeof path, "/proc/%d/task", h->pid);
  DIR *d = opendir(path);
  h->ns_n = 0;
  h->ns_scan_ns = bf_mono_ns();
  if (!d) return;
  struct dirent *e;
  while ((e = readdir(d))) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    int64_t host = 0, inner = 0;
    snprintf(path, sizeof path, "/proc/%d/task/%s/status", h->pid, e->d_name);
    if (nspid_line(path, &host, &inner) < 1) continue;
    if (bf_vec_grow((void **)&h->ns_map, &h->ns_cap, h->ns_n + 1, sizeof *h->ns_map, 16)) break;
    h->ns_map[h->ns_n][0] = inner;
    h->ns_map[h->ns_n][1] = host;
    h->ns_n++;
  }
  closedir(d);
}

int64_t smp_host_tid(bf_smp *h, int64_t ns_tid) {
  if (ns_tid <= 0 || h->pid <= 0) return ns_tid;
  if (!h->ns_nested) {
    char path[64];
    int64_t host = 0, inner = 0;
    snprintf(path, sizeof path, "/proc/%d/status", h->pid);
    int k = nspid_line(path, &host, &inner);
    /* no NSpid line (kernels before 4.1): assume one namespace */
    h->ns_nested = k > 1 ? 2 : 1;
    if (h->ns_nested == 2) ns_scan(h);
  }
  if (h->ns_nested == 1) return ns_tid;
  for (int pass = 0; pass < 2; pass++) {
    for (size_t i = 0; i < h->ns_n; i++)
      if (h->ns_map[i][0] == ns_tid) return h->ns_map[i][1];
    /* a thread newer than the map: scan again, but not on every sample for
     * a thread state whose OS thread is gone */
    if (pass || bf_mono_ns() - h->ns_scan_ns < NS_RESCAN_MIN_NS) break;
    ns_scan(h);
  }
  return 0;
}

int64_t smp_ns_tid(const bf_smp *h, int64_t host_tid) {
  if (h->ns_nested != 2) return host_tid;
  for (size_t i = 0; i < h->ns_n; i++)
    if (h->ns_map[i][1] == host_tid) return h->ns_map[i][0];
  return host_tid;
}

int64_t smp_ns_pid(bf_smp *h) {
  char path[64];
  int64_t host = 0, inner = 0;
  snprintf(path, sizeof path, "/proc/%d/status", h->pid);
  return nspid_line(path, &host, &inner) > 0 ? inner : h->pid;
}

void smp_ns_reset(bf_smp *h) {
  free(h->ns_map);
  h->ns_map = NULL;
  h->ns_n = h->ns_cap = 0;
  h->ns_nested = 0;
  h->ns_scan_ns = 0;
}
