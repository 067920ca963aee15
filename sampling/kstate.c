/* kstate.c — the kernel lens: what /proc says a thread of the target is
 * doing when sampled. State R is on a CPU or waiting for one (the run-queue
 * delay is schedstat's field 2); any other state is explained by the
 * thread's syscall (/proc/PID/task/TID/syscall) and, for a syscall on a
 * descriptor, what the descriptor is (/proc/PID/fd/N, then /proc/PID/net/
 * tcp, tcp6, udp, udp6, unix for a socket's peer). A thread that has not
 * run since its last read (same state, same switch count) is not read
 * again; descriptor links are cached by their text ("socket:[72195]").
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "map.h"
#include "smp_int.h"

#define KC_MAX_LINKS 4096    /* fd links cached; the cache starts over when full */
#define KC_MAX_TARGETS 8192  /* distinct target texts kept for the handle's life */
#define KC_NET_MAX_LINES 200000 /* lines of one /proc/PID/net table scanned at most */

typedef struct kc_ent {
  uint64_t key; /* the bf_pmap key: bf_pmap_hkey of the text's hash, or its chain */
  char *text;
  void *val; /* links: kc_link; targets: bf_smp_ktarget */
} kc_ent;

typedef bf_pmap kc_table; /* of kc_ent; BF_PMAP_INIT(kc_ent) or zeroed */

typedef struct kc_link {
  uint8_t cls;   /* BF_SMP_K_* of a wait on it */
  char desc[280]; /* "tcp 127.0.0.1:5432", "pipe", "/var/lib/x.db" */
} kc_link;

struct smp_kcache {
  kc_table links, targets;
  kc_table net;      /* socket inode ("72195") → kc_link, from the last net tables read */
  int64_t net_ns;    /* when they were read (monotonic), 0 never */
  unsigned long net_missed; /* the last socket inode not in them */
  bf_smp_ktarget *gil, *full; /* "futex GIL", and the target of every text past KC_MAX_TARGETS */
};

/* The value cached under text (whose bf_hash_str is hash), or NULL. */
static void *kc_find(const kc_table *t, const char *text, uint64_t hash) {
  for (uint64_t k = bf_pmap_hkey(hash);; k = bf_pmap_hnext(k)) {
    const kc_ent *e = bf_pmap_get(t, k);
    if (!e) return NULL;
    if (strcmp(e->text, text) == 0) return e->val;
  }
}

/* Cache val under text (both owned by the table from now on; text is not
 * there yet). Returns 0 or -ENOMEM (nothing taken). */
static int kc_add(kc_table *t, char *text, uint64_t hash, void *val) {
  t->slot_size = sizeof(kc_ent);
  for (uint64_t k = bf_pmap_hkey(hash);; k = bf_pmap_hnext(k)) {
    int added;
    kc_ent *e = bf_pmap_put(t, k, &added);
    if (!e) return -ENOMEM;
    if (!added) continue; /* another text with this hash */
    e->text = text;
    e->val = val;
    return 0;
  }
}

static void kc_clear(kc_table *t, int free_vals_text) {
  size_t it = 0;
  for (kc_ent *e; (e = bf_pmap_next(t, &it));) {
    free(e->text);
    if (free_vals_text) free((char *)((bf_smp_ktarget *)e->val)->text);
    free(e->val);
  }
  bf_pmap_free(t);
}

void smp_kcache_free(bf_smp *h) {
  if (!h->kc) return;
  kc_clear(&h->kc->links, 0);
  kc_clear(&h->kc->net, 0);
  kc_clear(&h->kc->targets, 1);
  if (h->kc->full) free((char *)h->kc->full->text);
  free(h->kc->full);
  free(h->kc);
  h->kc = NULL;
}

/* The one target of text; NULL when out of memory. */
static bf_smp_ktarget *kc_target(struct smp_kcache *kc, const char *text) {
  uint64_t hash = bf_hash_str(text, strlen(text));
  bf_smp_ktarget *t = kc_find(&kc->targets, text, hash);
  if (t) return t;
  if (kc->targets.len >= KC_MAX_TARGETS) {
    if (!kc->full && (kc->full = calloc(1, sizeof *kc->full)) && !(kc->full->text = strdup("(more targets)"))) {
      free(kc->full);
      kc->full = NULL;
    }
    return kc->full;
  }
  t = calloc(1, sizeof *t);
  char *key = strdup(text), *txt = strdup(text);
  if (!t || !key || !txt || kc_add(&kc->targets, key, hash, t) < 0) {
    free(t);
    free(key);
    free(txt);
    return NULL;
  }
  t->text = txt;
  return t;
}

/* ---- syscalls ---- */

enum { SK_OTHER, SK_FD, SK_POLL, SK_SELECT, SK_SLEEP, SK_FUTEX, SK_EPOLL };

typedef struct sys_desc {
  int nr;
  const char *name;
  int kind;
} sys_desc;

static const sys_desc sys_table[] = {
#if defined(__x86_64__)
    {0, "read", SK_FD},        {1, "write", SK_FD},          {2, "open", SK_OTHER},
    {7, "poll", SK_POLL},      {16, "ioctl", SK_FD},         {17, "pread64", SK_FD},
    {18, "pwrite64", SK_FD},   {19, "readv", SK_FD},         {20, "writev", SK_FD},
    {23, "select", SK_SELECT}, {34, "pause", SK_OTHER},      {35, "nanosleep", SK_SLEEP},
    {40, "sendfile", SK_FD},   {42, "connect", SK_FD},       {43, "accept", SK_FD},
    {44, "sendto", SK_FD},     {45, "recvfrom", SK_FD},      {46, "sendmsg", SK_FD},
    {47, "recvmsg", SK_FD},    {61, "wait4", SK_OTHER},      {72, "fcntl", SK_FD},
    {73, "flock", SK_FD},      {74, "fsync", SK_FD},         {75, "fdatasync", SK_FD},
    {202, "futex", SK_FUTEX},  {230, "clock_nanosleep", SK_SLEEP}, {232, "epoll_wait", SK_EPOLL},
    {247, "waitid", SK_OTHER}, {257, "openat", SK_OTHER},    {270, "pselect6", SK_SELECT},
    {271, "ppoll", SK_POLL},   {275, "splice", SK_FD},       {281, "epoll_pwait", SK_EPOLL},
    {288, "accept4", SK_FD},   {295, "preadv", SK_FD},       {296, "pwritev", SK_FD},
    {299, "recvmmsg", SK_FD},  {307, "sendmmsg", SK_FD},     {441, "epoll_pwait2", SK_EPOLL},
    {327, "preadv2", SK_FD},   {328, "pwritev2", SK_FD},     {262, "newfstatat", SK_OTHER},
    {4, "stat", SK_OTHER},     {5, "fstat", SK_FD},          {6, "lstat", SK_OTHER},
    {26, "msync", SK_OTHER},   {28, "madvise", SK_OTHER},    {9, "mmap", SK_OTHER},
#elif defined(__aarch64__)
    {22, "epoll_pwait", SK_EPOLL}, {29, "ioctl", SK_FD},      {32, "flock", SK_FD},
    {56, "openat", SK_OTHER},  {63, "read", SK_FD},          {64, "write", SK_FD},
    {65, "readv", SK_FD},      {66, "writev", SK_FD},        {67, "pread64", SK_FD},
    {68, "pwrite64", SK_FD},   {72, "pselect6", SK_SELECT},  {73, "ppoll", SK_POLL},
    {82, "fsync", SK_FD},      {83, "fdatasync", SK_FD},     {95, "waitid", SK_OTHER},
    {98, "futex", SK_FUTEX},   {101, "nanosleep", SK_SLEEP}, {115, "clock_nanosleep", SK_SLEEP},
    {202, "accept", SK_FD},    {203, "connect", SK_FD},      {206, "sendto", SK_FD},
    {207, "recvfrom", SK_FD},  {211, "sendmsg", SK_FD},      {212, "recvmsg", SK_FD},
    {242, "accept4", SK_FD},   {260, "wait4", SK_OTHER},     {441, "epoll_pwait2", SK_EPOLL},
    {286, "preadv2", SK_FD},   {287, "pwritev2", SK_FD},     {69, "preadv", SK_FD},
    {70, "pwritev", SK_FD},
#endif
    {-1, NULL, SK_OTHER}};

static const sys_desc *sys_find(long nr) {
  for (const sys_desc *d = sys_table; d->name; d++)
    if (d->nr == nr) return d;
  return NULL;
}

/* ---- descriptors ---- */

/* Format a /proc/net address "0100007F:1F90" (v4) or 32 hex digits (v6). */
static void net_addr(const char *hex, char *out, size_t len) {
  const char *colon = strchr(hex, ':');
  size_t hl = colon ? (size_t)(colon - hex) : 0;
  unsigned port = colon ? (unsigned)strtoul(colon + 1, NULL, 16) : 0;
  char ip[INET6_ADDRSTRLEN] = "?";
  if (hl == 8) {
    uint32_t a = (uint32_t)strtoul(hex, NULL, 16); /* the kernel prints the word in host order */
    inet_ntop(AF_INET, &a, ip, sizeof ip);
  } else if (hl == 32) {
    uint32_t w[4];
    for (int i = 0; i < 4; i++) {
      char part[9];
      memcpy(part, hex + 8 * i, 8);
      part[8] = 0;
      w[i] = (uint32_t)strtoul(part, NULL, 16);
    }
    inet_ntop(AF_INET6, w, ip, sizeof ip);
    if (strncmp(ip, "::ffff:", 7) == 0 && strchr(ip + 7, '.')) memmove(ip, ip + 7, strlen(ip + 7) + 1);
  }
  snprintf(out, len, hl == 32 && !strchr(ip, '.') ? "[%s]:%u" : "%s:%u", ip, port);
}

static int all_zero_addr(const char *hex) {
  for (; *hex && *hex != ':'; hex++)
    if (*hex != '0') return 0;
  return 1;
}

/* Add one socket of /proc/PID/net/<tab> (line of table k) to the net map. */
static void net_add(struct smp_kcache *kc, int k, const char *line) {
  kc_link l = {.cls = BF_SMP_K_NET};
  unsigned long ino = 0;
  if (k == 4) { /* unix: Num RefCount Protocol Flags Type St Inode Path */
    char p[256] = "";
    if (sscanf(line, "%*s %*s %*s %*s %*s %*s %lu %255s", &ino, p) < 1 || !ino) return;
    snprintf(l.desc, sizeof l.desc, p[0] ? "unix %s" : "unix", p);
  } else {
    char loc[80], rem[80], a[80];
    unsigned st = 0;
    if (sscanf(line, "%*s %79s %79s %x %*s %*s %*s %*u %*u %lu", loc, rem, &st, &ino) != 4 || !ino) return;
    const char *proto = k < 2 ? "tcp" : "udp";
    if (all_zero_addr(rem)) { /* listening or unconnected: its own port */
      net_addr(loc, a, sizeof a);
      const char *port = strrchr(a, ':');
      snprintf(l.desc, sizeof l.desc, "%s %s%s", proto, k < 2 && st == 0x0A ? "listen " : "", port ? port : a);
    } else {
      net_addr(rem, a, sizeof a);
      snprintf(l.desc, sizeof l.desc, "%s %s", proto, a);
    }
  }
  char key[32];
  snprintf(key, sizeof key, "%lu", ino);
  uint64_t hash = bf_hash_str(key, strlen(key));
  if (kc_find(&kc->net, key, hash)) return;
  kc_link *v = malloc(sizeof *v);
  char *kd = strdup(key);
  if (!v || !kd || kc_add(&kc->net, kd, hash, v) < 0) {
    free(v);
    free(kd);
    return;
  }
  *v = l;
}

/* Read the target's net tables (its network namespace) into the map: every
 * socket at once, since the kernel makes each read of a table walk it (a
 * lookup per socket would cost a walk each). Bounded: KC_NET_MAX_LINES per
 * table. */
static void net_reload(bf_smp *h) {
  static const char *const tabs[] = {"tcp", "tcp6", "udp", "udp6", "unix"};
  struct smp_kcache *kc = h->kc;
  kc_clear(&kc->net, 0);
  char path[64], line[512];
  static char iobuf[1 << 16];
  for (int k = 0; k < 5; k++) {
    snprintf(path, sizeof path, "/proc/%d/net/%s", h->pid, tabs[k]);
    FILE *f = fopen(path, "re");
    if (!f) continue;
    setvbuf(f, iobuf, _IOFBF, sizeof iobuf);
    for (int n = 0; n < KC_NET_MAX_LINES && fgets(line, sizeof line, f); n++)
      if (n) net_add(kc, k, line);
    fclose(f);
  }
  kc->net_ns = h->now_ns ? h->now_ns : 1;
}

/* The peer of socket inode ino: 1 and link->desc, or 0. The tables are read
 * again on a miss at most once a second, or after 100 ms for a socket not
 * missed just before (one made since the last read: a new connection is
 * named within 0.1 s, at most ten walks a second however many come). */
static int net_lookup(bf_smp *h, unsigned long ino, kc_link *link) {
  struct smp_kcache *kc = h->kc;
  char key[32];
  snprintf(key, sizeof key, "%lu", ino);
  uint64_t hash = bf_hash_str(key, strlen(key));
  for (int pass = 0; pass < 2; pass++) {
    const kc_link *hit = kc_find(&kc->net, key, hash);
    if (hit) {
      *link = *hit;
      return 1;
    }
    int64_t since = h->now_ns - kc->net_ns;
    if (pass || (kc->net_ns && since < 1000000000LL && (ino == kc->net_missed || since < 100000000LL))) break;
    kc->net_missed = ino;
    net_reload(h);
  }
  return 0;
}

/* What fd of the target is, cached by its link text. NULL when it cannot
 * be read (closed meanwhile, no rights) or out of memory. */
static const kc_link *fd_link(bf_smp *h, long fd) {
  char path[64], text[272];
  if (fd < 0 || fd > (1L << 30)) return NULL;
  snprintf(path, sizeof path, "/proc/%d/fd/%ld", h->pid, fd);
  ssize_t n = readlink(path, text, sizeof text - 1);
  if (n <= 0) return NULL;
  text[n] = 0;
  struct smp_kcache *kc = h->kc;
  uint64_t hash = bf_hash_str(text, (size_t)n);
  const kc_link *hit = kc_find(&kc->links, text, hash);
  if (hit) return hit;
  if (kc->links.len >= KC_MAX_LINKS) kc_clear(&kc->links, 0);
  kc_link *l = calloc(1, sizeof *l);
  if (!l) return NULL;
  unsigned long ino = 0;
  l->cls = BF_SMP_K_OTHER;
  if (sscanf(text, "socket:[%lu]", &ino) == 1) {
    l->cls = BF_SMP_K_NET;
    if (!net_lookup(h, ino, l)) { /* newer than the tables read: not cached, looked up again */
      static kc_link unknown = {BF_SMP_K_NET, "socket"};
      free(l);
      return &unknown;
    }
  } else if (strncmp(text, "pipe:", 5) == 0) {
    snprintf(l->desc, sizeof l->desc, "pipe");
  } else if (strncmp(text, "anon_inode:", 11) == 0) {
    const char *k = text + 11;
    snprintf(l->desc, sizeof l->desc, "%.*s", (int)strcspn(k[0] == '[' ? k + 1 : k, "]"), k[0] == '[' ? k + 1 : k);
  } else if (text[0] == '/' && strncmp(text, "/dev/", 5) != 0) {
    l->cls = BF_SMP_K_DISK;
    snprintf(l->desc, sizeof l->desc, "%s", text);
  } else {
    snprintf(l->desc, sizeof l->desc, "%s", text);
  }
  char *key = strdup(text);
  if (!key || kc_add(&kc->links, key, hash, l) < 0) {
    free(l);
    free(key);
    return NULL;
  }
  return l;
}

/* ---- one thread ---- */

/* Classify the syscall line of a thread in state st. OUT: s->k_class,
 * s->k_target, s->k_futex_timed. */
static void classify(bf_smp *h, smp_tslot *s, char st, const char *line) {
  struct smp_kcache *kc = h->kc;
  char text[360];
  unsigned cls = BF_SMP_K_OTHER;
  s->k_futex_timed = 0;
  unsigned long long a[6] = {0};
  long nr = -2;
  if (strncmp(line, "running", 7) == 0) {
    s->k_class = BF_SMP_K_CPU;
    s->k_target = NULL;
    return;
  }
  if (sscanf(line, "%ld %llx %llx %llx %llx %llx %llx", &nr, &a[0], &a[1], &a[2], &a[3], &a[4], &a[5]) < 1)
    nr = -2;
  const sys_desc *d = nr >= 0 ? sys_find(nr) : NULL;
  char nrname[32];
  snprintf(nrname, sizeof nrname, "syscall %ld", nr);
  const char *name = d ? d->name : nrname;
  if (nr < 0) { /* blocked outside any syscall */
    cls = st == 'D' ? BF_SMP_K_FAULT : BF_SMP_K_OTHER;
    snprintf(text, sizeof text, "%s", st == 'D' ? "page fault" : st == 'T' || st == 't' ? "stopped" : "kernel");
  } else if (!d || d->kind == SK_OTHER) {
    snprintf(text, sizeof text, "%s", name);
  } else if (d->kind == SK_SLEEP) {
    cls = BF_SMP_K_SLEEP;
    snprintf(text, sizeof text, "%s", name);
  } else if (d->kind == SK_FUTEX) {
    cls = BF_SMP_K_LOCK;
    s->k_futex_timed = a[3] != 0;
    snprintf(text, sizeof text, "futex lock");
  } else if (d->kind == SK_EPOLL) {
    snprintf(text, sizeof text, "%s", name);
  } else if (d->kind == SK_SELECT && a[0] == 0) {
    cls = BF_SMP_K_SLEEP;
    snprintf(text, sizeof text, "%s", name);
  } else if (d->kind == SK_SELECT) {
    snprintf(text, sizeof text, "%s %llu fds", name, a[0]);
  } else {
    long fd = (long)a[0];
    unsigned long long nfds = 0;
    if (d->kind == SK_POLL) { /* the first pollfd's descriptor, read from the target */
      nfds = a[1];
      int32_t pfd[2] = {-1, 0};
      if (nfds == 0) {
        s->k_class = BF_SMP_K_SLEEP;
        s->k_target = kc_target(kc, name);
        return;
      }
      fd = smp_read(h, a[0], pfd, sizeof pfd) == 0 ? pfd[0] : -1;
    }
    const kc_link *l = fd_link(h, fd);
    if (l) {
      cls = l->cls;
      if (nfds > 1)
        snprintf(text, sizeof text, "%s %s (+%llu fds)", name, l->desc, nfds - 1);
      else
        snprintf(text, sizeof text, "%s %s", name, l->desc);
    } else {
      snprintf(text, sizeof text, "%s fd %ld", name, fd);
    }
  }
  if (st == 'D' && cls != BF_SMP_K_NET && cls != BF_SMP_K_FAULT) cls = BF_SMP_K_DISK;
  s->k_class = (uint8_t)cls;
  s->k_target = kc_target(kc, text);
}

/* Field n (1-based, counted from the state letter as field 3) of stat. */
static const char *stat_field(const char *rest, int n) {
  const char *p = rest;
  for (int f = 3; f < n && p; f++) {
    p = strchr(p, ' ');
    if (p) p++;
  }
  return p;
}

void smp_kstate_copy(const bf_smp *h, const smp_tslot *s, bf_smp_thread *t) {
  if (!s->k_state) return;
  t->kclass = s->k_class;
  t->ktarget = s->k_target;
  t->run_delay_ns = s->k_run_delay;
  t->krun_ns = s->k_run;
  t->kswitch_in = s->k_pcount;
  t->majflt = s->k_majflt;
  if (s->k_class == BF_SMP_K_LOCK && s->k_futex_timed && h->k_gil_locked && !(t->flags & BF_SMP_GIL) &&
      h->kc && h->kc->gil) {
    t->kclass = BF_SMP_K_GIL;
    t->ktarget = h->kc->gil;
  }
}

/* Three decimal fields of schedstat. 0 when they are all there. */
static int sched_parse(const char *p, unsigned long long v[3]) {
  for (int i = 0; i < 3; i++) {
    char *end;
    while (*p == ' ') p++;
    if (*p < '0' || *p > '9') return -1;
    v[i] = strtoull(p, &end, 10);
    p = end;
  }
  return 0;
}

void smp_kstate_read(bf_smp *h, smp_tslot *s, const char *rest, bf_smp_thread *t) {
  char buf[512];
  if (!h->kc) {
    if (!(h->kc = calloc(1, sizeof *h->kc))) return;
    h->kc->gil = kc_target(h->kc, "futex GIL");
  }
  char st = rest[0];
  if (!st || st == 'Z' || st == 'X') return;
  const char *mf = stat_field(rest, 12);
  uint64_t majflt = mf ? strtoull(mf, NULL, 10) : s->k_majflt;
  unsigned long long v[3];
  if (smp_proc_pread(h, s, &s->sched_fd, "schedstat", buf, sizeof buf) < 0 || sched_parse(buf, v) < 0)
    return; /* gone: costs nothing more */
  unsigned long long run = v[0], wait = v[1], pc = v[2];
  int again = s->k_state == st && s->k_pcount == pc && s->k_class;
  s->k_run_delay = (int64_t)wait;
  s->k_run = (int64_t)run;
  s->k_majflt = majflt;
  s->k_pcount = pc;
  s->k_state = st;
  if (st == 'R') {
    s->k_class = BF_SMP_K_CPU;
    s->k_target = NULL;
  } else if (!again) { /* it ran since: a new wait */
    if (smp_proc_pread(h, s, &s->sys_fd, "syscall", buf, sizeof buf) < 0) {
      s->k_state = 0;
      return;
    }
    classify(h, s, st, buf);
  }
  smp_kstate_copy(h, s, t);
}
