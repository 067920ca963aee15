/* native_unwind.c — the C half of a mixed stack: libunwind's remote accessors
 * over a thread's snapshot, the target's maps, symbols per address, and the
 * merge of C frames with the Python frames the eval loop runs. */
#include "ident.h"
#include "native_int.h"

/* ---- the accessors libunwind reads the snapshot through ----------------- */

/* libunwind hands the accessors only the argument given at unw_init_remote,
 * and _UPT_find_proc_info passes its own UPT handle on, so the snapshot being
 * unwound is found through this one pointer (bifocal unwinds on one thread). */
static __thread bf_smp_native *nat_active;


static int acc_mem(unw_addr_space_t as, unw_word_t addr, unw_word_t *val, int write, void *arg) {
  (void)as;
  (void)arg;
  bf_smp_native *n = nat_active;
  if (write || !n) return -UNW_EINVAL;
  nat_thread *t = n->cur;
  if (t && t->snap_ok) {
    if (addr >= t->stack_lo && addr + sizeof *val <= t->stack_lo + t->stack_len) {
      memcpy(val, t->stack + (addr - t->stack_lo), sizeof *val);
      if (addr + sizeof *val > t->deepest) t->deepest = addr + sizeof *val;
      return 0;
    }
    if (addr >= t->map_lo && addr < t->map_hi && addr + sizeof *val > t->deepest)
      t->deepest = addr + sizeof *val;
  }
  /* unwind tables: from the page cache when the mapping is read-only */
  uint64_t pa = addr & ~(uint64_t)(NAT_PAGE - 1);
  if (n->pages && addr - pa <= NAT_PAGE - sizeof *val) {
    nat_page *pg = &n->pages[(pa / NAT_PAGE) % NAT_PAGES];
    if (pg->addr == pa + 1) {
      memcpy(val, pg->data + (addr - pa), sizeof *val);
      return 0;
    }
    const nat_map *m = nat_maps_find(n, addr);
    if (m && !m->writable && pa >= m->lo && pa + NAT_PAGE <= m->hi) {
      struct iovec pl = {pg->data, NAT_PAGE}, pr = {(void *)(uintptr_t)pa, NAT_PAGE};
      if (process_vm_readv(n->pid, &pl, 1, &pr, 1, 0) == NAT_PAGE) {
        pg->addr = pa + 1;
        memcpy(val, pg->data + (addr - pa), sizeof *val);
        return 0;
      }
      pg->addr = 0;
    }
  }
  /* stack beyond the copy, or writable data: read live (process_vm_readv
   * needs no stopped thread; outer frames rarely change meanwhile) */
  struct iovec l = {val, sizeof *val}, r = {(void *)(uintptr_t)addr, sizeof *val};
  if (process_vm_readv(n->pid, &l, 1, &r, 1, 0) != (ssize_t)sizeof *val) return -UNW_EINVAL;
  return 0;
}

static int acc_reg(unw_addr_space_t as, unw_regnum_t reg, unw_word_t *val, int write, void *arg) {
  (void)as;
  (void)arg;
  bf_smp_native *n = nat_active;
  if (write) return -UNW_EREADONLYREG;
  if (!n || !n->cur) return -UNW_EBADREG;
  const struct user_regs_struct *r = &n->cur->regs;
  switch (reg) {
    case UNW_X86_64_RAX: *val = r->rax; break;
    case UNW_X86_64_RDX: *val = r->rdx; break;
    case UNW_X86_64_RCX: *val = r->rcx; break;
    case UNW_X86_64_RBX: *val = r->rbx; break;
    case UNW_X86_64_RSI: *val = r->rsi; break;
    case UNW_X86_64_RDI: *val = r->rdi; break;
    case UNW_X86_64_RBP: *val = r->rbp; break;
    case UNW_X86_64_RSP: *val = r->rsp; break;
    case UNW_X86_64_R8: *val = r->r8; break;
    case UNW_X86_64_R9: *val = r->r9; break;
    case UNW_X86_64_R10: *val = r->r10; break;
    case UNW_X86_64_R11: *val = r->r11; break;
    case UNW_X86_64_R12: *val = r->r12; break;
    case UNW_X86_64_R13: *val = r->r13; break;
    case UNW_X86_64_R14: *val = r->r14; break;
    case UNW_X86_64_R15: *val = r->r15; break;
    case UNW_X86_64_RIP: *val = r->rip; break;
    default: return -UNW_EBADREG;
  }
  return 0;
}

static int acc_fpreg(unw_addr_space_t as, unw_regnum_t reg, unw_fpreg_t *val, int write,
                     void *arg) {
  (void)as, (void)reg, (void)val, (void)write, (void)arg;
  return -UNW_EBADREG;
}

static int acc_resume(unw_addr_space_t as, unw_cursor_t *c, void *arg) {
  (void)as, (void)c, (void)arg;
  return -UNW_EINVAL;
}

static int acc_dyn_list(unw_addr_space_t as, unw_word_t *addr, void *arg) {
  (void)as, (void)addr, (void)arg;
  return -UNW_ENOINFO; /* no run-time registered (JIT) unwind info */
}

/* ---- /proc/PID/maps --------------------------------------------------- */

const char *nat_intern_path(bf_smp_native *n, const char *p) {
  for (size_t i = 0; i < n->npaths; i++)
    if (strcmp(n->paths[i], p) == 0) return n->paths[i];
  if (bf_vec_grow((void **)&n->paths, &n->cap_paths, n->npaths + 1, sizeof *n->paths, 16) < 0) return NULL;
  char *s = strdup(p);
  if (!s) return NULL;
  n->paths[n->npaths++] = s;
  return s;
}

void nat_read_root(bf_smp_native *n) {
  char link[64];
  snprintf(link, sizeof link, "/proc/%d/root", n->pid);
  n->root_len = 0;
  ssize_t k = readlink(link, n->root, sizeof n->root - 1);
  /* "/" (ours), unreadable, or too long to be sure of: paths are kept as seen */
  if (k <= 1 || (size_t)k >= sizeof n->root - 1 || n->root[0] != '/') {
    n->root[0] = 0;
    return;
  }
  n->root[k] = 0;
  while (k > 1 && n->root[k - 1] == '/') n->root[--k] = 0;
  n->root_len = (size_t)k;
}

const char *nat_target_path(const bf_smp_native *n, const char *p) {
  if (n->root_len && strncmp(p, n->root, n->root_len) == 0 && p[n->root_len] == '/')
    return p + n->root_len;
  return p;
}

static int add_map(void *ud, const bf_procmap *pm) {
  bf_smp_native *n = ud;
  if (bf_vec_grow((void **)&n->maps, &n->cap_maps, n->nmaps + 1, sizeof *n->maps, 16) < 0) return 1;
  nat_map *m = &n->maps[n->nmaps++];
  m->lo = pm->lo;
  m->hi = pm->hi;
  m->off = pm->off;
  m->exec = pm->perms[2] == 'x';
  m->writable = pm->perms[1] == 'w';
  m->path = *pm->name == '/' ? nat_intern_path(n, nat_target_path(n, pm->name)) : NULL;
  m->obj = NAT_OBJ_UNKNOWN;
  return 0;
}

int nat_maps_refresh(bf_smp_native *n) {
  size_t had = n->nmaps;
  int64_t had_sample = n->maps_sample;
  n->nmaps = 0;
  n->maps_sample = n->samples;
  int rc = bf_procmaps_foreach(n->pid, add_map, n);
  if (rc < 0) { /* not opened (add_map never fails with < 0): the table is as it was */
    n->nmaps = had;
    n->maps_sample = had_sample;
    return rc == -ENOENT ? -ESRCH : rc;
  }
  /* code may have moved (dlclose/dlopen): cached unwind rules are stale */
  unw_flush_cache(n->as, 0, 0);
  for (size_t i = 0; n->pages && i < NAT_PAGES; i++) n->pages[i].addr = 0;
  return 0;
}

/* Mapping containing addr, refreshing the table at most once per sample. */
const nat_map *nat_maps_find(bf_smp_native *n, uint64_t addr) {
  for (int pass = 0; pass < 2; pass++) {
    size_t lo = 0, hi = n->nmaps;
    while (lo < hi) { /* maps are sorted by address */
      size_t mid = (lo + hi) / 2;
      if (addr < n->maps[mid].lo)
        hi = mid;
      else if (addr >= n->maps[mid].hi)
        lo = mid + 1;
      else
        return &n->maps[mid];
    }
    if (pass || n->maps_sample == n->samples || nat_maps_refresh(n) < 0) break;
  }
  return NULL;
}

/* ---- symbols ------------------------------------------------------------ */

static nat_code *code_intern(bf_smp_native *n, const char *path, const char *name) {
  int64_t h = (int64_t)bf_hash_str(name, strlen(name)), k = 0;
  for (const int64_t *hit; (hit = bf_map3_get(&n->code_map, (int64_t)(uintptr_t)path, h, k)); k++) {
    nat_code *c = n->codes[*hit];
    if (strcmp(c->pub.qualname, name) == 0) return c; /* paths are interned: same pointer, same path */
  }
  if (bf_vec_grow((void **)&n->codes, &n->cap_codes, n->ncodes + 1, sizeof *n->codes, 4096) < 0) return NULL;
  nat_code *c = calloc(1, sizeof *c);
  char *q = strdup(name);
  if (!c || !q || bf_map3_put(&n->code_map, (int64_t)(uintptr_t)path, h, k, (int64_t)n->ncodes)) {
    free(c);
    free(q);
    return NULL;
  }
  c->pub.filename = path;
  c->pub.qualname = q;
  c->pub.firstlineno = 0;
  n->codes[n->ncodes++] = c;
  return c;
}

static int is_eval_symbol(const char *s) {
  /* the eval loop itself (also its GCC-split ".cold" part); wrappers like
   * PyEval_EvalFrameEx call it and stay ordinary frames */
  static const char ev[] = "_PyEval_EvalFrameDefault";
  return strncmp(s, ev, sizeof ev - 1) == 0 && (s[sizeof ev - 1] == 0 || s[sizeof ev - 1] == '.');
}

/* ---- ELF objects: symbols, unwind index, the eval loop ------------------ */

static uint64_t rd_rel32(const unsigned char *p) {
  int32_t v;
  memcpy(&v, p, 4);
  return (uint64_t)(int64_t)v;
}

/* Calls at (target) for each rel32 jmp (E9) or jcc (0F 80..8F) at any byte
 * of code; stops when it returns non-zero and returns that. */
static int each_jump(const unsigned char *code, size_t len, uint64_t va,
                     int (*at)(void *ud, uint64_t target), void *ud) {
  for (size_t i = 0; i + 5 <= len; i++) {
    uint64_t t;
    if (code[i] == 0xe9)
      t = va + i + 5 + rd_rel32(code + i + 1);
    else if (code[i] == 0x0f && i + 6 <= len && (code[i + 1] & 0xf0) == 0x80)
      t = va + i + 6 + rd_rel32(code + i + 2);
    else
      continue;
    int r = at(ud, t);
    if (r) return r;
  }
  return 0;
}

typedef struct jump_vec {
  uint64_t *v;
  size_t n, cap;
  uint64_t lo, hi; /* the code's own range: jumps inside it are not collected */
} jump_vec;

static int jump_collect(void *ud, uint64_t t) {
  jump_vec *j = ud;
  if (t >= j->lo && t < j->hi) return 0;
  if (bf_vec_grow((void **)&j->v, &j->cap, j->n + 1, sizeof *j->v, 64) < 0) return -ENOMEM;
  j->v[j->n++] = t;
  return 0;
}

static int u64_cmp(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

int nat_jump_targets(const unsigned char *code, size_t len, uint64_t va, uint64_t **out, size_t *n) {
  jump_vec j = {NULL, 0, 0, va, va + len};
  if (each_jump(code, len, va, jump_collect, &j) < 0) {
    free(j.v);
    return -ENOMEM;
  }
  if (j.n) qsort(j.v, j.n, sizeof *j.v, u64_cmp);
  size_t w = 0;
  for (size_t i = 0; i < j.n; i++)
    if (!w || j.v[w - 1] != j.v[i]) j.v[w++] = j.v[i];
  *out = j.v;
  *n = w;
  return 0;
}

typedef struct jump_range {
  uint64_t lo, hi;
} jump_range;

static int jump_in_range(void *ud, uint64_t t) {
  const jump_range *r = ud;
  return t >= r->lo && t < r->hi;
}

int nat_jumps_into(const unsigned char *code, size_t len, uint64_t va, uint64_t lo, uint64_t hi) {
  jump_range r = {lo, hi};
  return each_jump(code, len, va, jump_in_range, &r) == 1;
}

int nat_is_eval_part(uint64_t ev_lo, uint64_t ev_hi, const uint64_t *ev_jumps, size_t nj,
                     uint64_t start, uint64_t end, const unsigned char *code, size_t len) {
  if (ev_lo >= ev_hi || start >= end || (start < ev_hi && end > ev_lo)) return 0;
  size_t lo = 0, hi = nj;
  while (lo < hi) { /* first jump target at or above start */
    size_t mid = lo + (hi - lo) / 2;
    if (ev_jumps[mid] < start)
      lo = mid + 1;
    else
      hi = mid;
  }
  if (lo == nj || ev_jumps[lo] >= end) return 0;
  return nat_jumps_into(code, len, start, ev_lo, ev_hi);
}

static void obj_free(nat_obj *o) {
  smp_elf_free(&o->elf);
  free(o->syms);
  free(o->ev_jumps);
  free(o->parts);
}

void nat_objs_free(bf_smp_native *n) {
  for (size_t i = 0; i < n->nobjs; i++) obj_free(&n->objs[i]);
  free(n->objs);
  n->objs = NULL;
  n->nobjs = n->cap_objs = 0;
}

/* Open the file behind mapping m: through /proc/PID/map_files (the very
 * file mapped, whatever root or mount namespace the target has), else its
 * path (as the target sees it) under the target's root. */
static int obj_open(bf_smp_native *n, const nat_map *m, smp_elf *e) {
  char p[4200];
  snprintf(p, sizeof p, "/proc/%d/map_files/%llx-%llx", n->pid, (unsigned long long)m->lo,
           (unsigned long long)m->hi);
  if (smp_elf_load(p, e) == 0) return 0;
  snprintf(p, sizeof p, "/proc/%d/root%s", n->pid, m->path);
  return smp_elf_load(p, e);
}

/* Fill o from its file (o->elf loaded, o->bias set). Fails only for memory. */
static int obj_read(nat_obj *o) {
  const smp_elf *e = &o->elf;
  if (smp_elf_functions(e, &o->syms, &o->nsyms) < 0) return -ENOMEM;
  uint64_t hdr, table, nfde;
  if (smp_elf_eh_frame_index(e, &hdr, &table, &nfde) == 0) {
    o->hdr = hdr;
    o->table = table;
    o->nfde = nfde;
  }
  if (smp_elf_load_span(e, &o->lo, &o->hi) < 0) o->nfde = 0;
  /* the eval loop as named; its unnamed split parts are judged per FDE */
  uint64_t v, sz;
  const unsigned char *code;
  if (smp_elf_symbol(e, "_PyEval_EvalFrameDefault", &v, &sz) == 0 && sz && sz <= NAT_MAX_PART &&
      smp_elf_bytes_at(e, v, sz, &code) == 0) {
    o->ev_lo = v;
    o->ev_hi = v + sz;
    if (nat_jump_targets(code, sz, v, &o->ev_jumps, &o->nev_jumps) < 0) return -ENOMEM;
  }
  return 0;
}

/* The object mapping index mi belongs to, read on first use; NULL when the
 * mapping has no readable ELF file behind it. */
static nat_obj *obj_of(bf_smp_native *n, size_t mi) {
  nat_map *m = &n->maps[mi];
  if (m->obj >= 0) return &n->objs[m->obj];
  if (m->obj == NAT_OBJ_NONE || !m->path) return NULL;
  m->obj = NAT_OBJ_NONE;
  /* same path and load address as an object read before: that one */
  for (size_t i = 0; i < n->nobjs; i++) {
    nat_obj *o = &n->objs[i];
    uint64_t va;
    if (o->path == m->path && smp_elf_vaddr_of_offset(&o->elf, m->off, &va) == 0 && m->lo - va == o->bias) {
      m->obj = (int)i;
      return o;
    }
  }
  if (n->nobjs >= NAT_MAX_OBJS ||
      bf_vec_grow((void **)&n->objs, &n->cap_objs, n->nobjs + 1, sizeof *n->objs, 16) < 0)
    return NULL;
  nat_obj *o = &n->objs[n->nobjs];
  memset(o, 0, sizeof *o);
  uint64_t va;
  if (obj_open(n, m, &o->elf) < 0) return NULL;
  if (smp_elf_vaddr_of_offset(&o->elf, m->off, &va) < 0 || obj_read(o) < 0) {
    obj_free(o);
    return NULL;
  }
  o->path = m->path;
  o->bias = m->lo - va;
  m->obj = (int)n->nobjs++;
  return o;
}

/* Index of the mapping containing addr (see nat_maps_find), or -1. */
static long map_index(bf_smp_native *n, uint64_t addr) {
  const nat_map *m = nat_maps_find(n, addr);
  return m ? (long)(m - n->maps) : -1;
}

/* libunwind's find_proc_info: the FDE for ip from the object's .eh_frame_hdr
 * table, read in the target's memory through the accessors (the object's
 * file is only used to find the table: libunwind's own lookup opens the
 * mapping's path under /proc/PID/root, wrong when the path we see already
 * leads into the target's root). */
extern int _Ux86_64_dwarf_search_unwind_table(unw_addr_space_t as, unw_word_t ip, unw_dyn_info_t *di,
                                              unw_proc_info_t *pi, int need_unwind_info, void *arg);

static int acc_find_proc_info(unw_addr_space_t as, unw_word_t ip, unw_proc_info_t *pi,
                              int need_unwind_info, void *arg) {
  bf_smp_native *n = nat_active;
  long mi = n ? map_index(n, ip) : -1;
  nat_obj *o = mi >= 0 ? obj_of(n, (size_t)mi) : NULL;
  if (!o || !o->nfde || ip - o->bias < o->lo || ip - o->bias >= o->hi) return -UNW_ENOINFO;
  unw_dyn_info_t di;
  memset(&di, 0, sizeof di);
  di.format = UNW_INFO_FORMAT_REMOTE_TABLE;
  di.start_ip = o->lo + o->bias;
  di.end_ip = o->hi + o->bias;
  di.u.rti.segbase = o->hdr + o->bias;
  di.u.rti.table_data = o->table + o->bias;
  di.u.rti.table_len = o->nfde * 8 / sizeof(unw_word_t);
  return _Ux86_64_dwarf_search_unwind_table(as, ip, &di, pi, need_unwind_info, arg);
}

/* Is the unnamed function [start, end) (vaddrs) of o a split part of the
 * eval loop? Judged once per function. */
static int obj_eval_part(nat_obj *o, uint64_t start, uint64_t end) {
  if (!o->ev_hi) return 0;
  for (size_t i = 0; i < o->nparts; i++)
    if (o->parts[i].start == start) return o->parts[i].eval;
  const unsigned char *code = NULL;
  uint64_t len = end - start > NAT_MAX_PART ? NAT_MAX_PART : end - start;
  int ev = smp_elf_bytes_at(&o->elf, start, len, &code) == 0 &&
           nat_is_eval_part(o->ev_lo, o->ev_hi, o->ev_jumps, o->nev_jumps, start, end, code, len);
  if (o->nparts < 4096 &&
      bf_vec_grow((void **)&o->parts, &o->cap_parts, o->nparts + 1, sizeof *o->parts, 16) == 0)
    o->parts[o->nparts++] = (nat_part){start, ev};
  return ev;
}

/* Symbolise addr (a pc, or a return address minus one). Cached per address.
 * c: the cursor at that frame, asked for the function's bounds (from the
 * unwind tables) only on a miss. The name is the object's function symbol
 * covering addr (by its size; a size-less one only from the function's
 * start on): in a stripped object the nearest symbol may belong to an
 * earlier function, and such frames are named by their function's file
 * offset instead ("0x3a40"), which is stable, or "??" when no unwind table
 * covers the address either. The eval loop is known by its symbol's range,
 * by a ".cold"-like symbol, or as an unnamed split part (obj_eval_part). */
static const nat_ip *ip_lookup(bf_smp_native *n, uint64_t addr, unw_cursor_t *c) {
  nat_ip *hit = bf_pmap_get(&n->ips, addr);
  if (hit) return hit;
  long mi = map_index(n, addr);
  const nat_map *m = mi >= 0 ? &n->maps[mi] : NULL;
  nat_obj *o = mi >= 0 ? obj_of(n, (size_t)mi) : NULL;
  const char *path = m && m->path ? m->path : nat_intern_path(n, BF_IDENT_ANONYMOUS);
  if (!path) return NULL;
  unw_proc_info_t pi;
  uint64_t start = addr, end = 0;
  if (c && unw_get_proc_info(c, &pi) == 0 && pi.start_ip && pi.start_ip <= addr && addr < pi.end_ip &&
      pi.end_ip - pi.start_ip > 1) { /* a one-byte "function" is libunwind's stand-in for none */
    start = pi.start_ip;
    end = pi.end_ip;
  }
  const char *sym = NULL;
  int eval = 0;
  if (o) {
    uint64_t va = addr - o->bias;
    const smp_elf_sym *s = smp_elf_function_at(o->syms, o->nsyms, va);
    if (s && (s->size ? va - s->value < s->size : end && s->value >= start - o->bias)) sym = s->name;
    eval = (sym && is_eval_symbol(sym)) || (va >= o->ev_lo && va < o->ev_hi) ||
           (!sym && end && obj_eval_part(o, start - o->bias, end - o->bias));
  }
  char name[512];
  /* unknown function: named by its start when the unwind tables know it,
   * else "??" (one per library) rather than one name per address */
  bf_ident_native_name(name, sizeof name, sym, start != addr || !m, m ? start - m->lo + m->off : start);
  nat_code *code = code_intern(n, path, name);
  if (!code) return NULL;
  nat_ip *e = bf_pmap_put(&n->ips, addr, NULL); /* room reserved by nat_unwind */
  if (!e) return NULL;
  e->code = code;
  e->eval = eval;
  e->interp = path == n->interp_path;
  return e;
}


/* Unwind t's snapshot into n->cf. Returns the number of C frames. */
size_t nat_unwind(bf_smp_native *n, nat_thread *t) {
  unw_cursor_t c;
  size_t k = 0;
  nat_active = n;
  n->cur = t;
  n->unwind_complete = 0;
  t->deepest = 0;
  /* n->cf holds slots of n->ips: reserve one unwind's worth so none moves
   * before the frames are read; a bound on distinct addresses, then start over */
  if (!n->ips.slot_size) n->ips = (bf_pmap)BF_PMAP_INIT(nat_ip);
  if (n->ips.len >= NAT_MAX_IPS) bf_pmap_clear(&n->ips);
  if (bf_vec_grow((void **)&n->cf, &n->cap_cf, NAT_MAX_DEPTH, sizeof *n->cf, 16) < 0 ||
      bf_pmap_reserve(&n->ips, n->ips.len + NAT_MAX_DEPTH) < 0 || unw_init_remote(&c, n->as, t->upt) < 0) {
    n->unwind_failed++;
    goto out;
  }
  int after_signal = 1; /* the first pc is exact, not a return address */
  while (k < NAT_MAX_DEPTH) {
    unw_word_t ip = 0;
    if (unw_get_reg(&c, UNW_REG_IP, &ip) < 0 || !ip) break;
    const nat_map *m = nat_maps_find(n, ip);
    if (!m || !m->exec) break; /* garbage past the last real frame */
    /* a return address points after the call: look up the call itself */
    const nat_ip *e = ip_lookup(n, after_signal ? ip : ip - 1, &c);
    if (!e) break;
    n->cf[k++].ip = e;
    after_signal = unw_is_signal_frame(&c) > 0;
    int st = unw_step(&c);
    if (st == 0) n->unwind_complete = 1; /* reached the outermost frame */
    if (st <= 0) break;
  }
  if (!k) n->unwind_failed++;
out:
  n->cur = NULL;
  nat_active = NULL;
  return k;
}

int nat_push_out_frame(bf_smp_native *n, const bf_smp_code *code, int32_t line, uint32_t fl) {
  if (bf_vec_grow((void **)&n->frames, &n->cap_frames, n->nframes + 1, sizeof *n->frames, 16) < 0)
    return -ENOMEM;
  n->frames[n->nframes++] = (bf_smp_frame){code, line, fl};
  return 0;
}

/* Returns 0 (merged), 1 (only Python frames could be kept), -ENOMEM.
 * Merge nc unwound C frames (n->cf, innermost first) with the Python frames
 * py[0..np) (innermost first) into n->frames. The rule:
 *  - the Python frames split into groups, each ending (outwards) at a frame
 *    flagged ENTRY: the frames one C call of the eval loop runs;
 *  - the k-th eval-loop C frame from the inside is replaced by group k;
 *    when a whole C stack has more eval frames than there are groups, the
 *    innermost extra ones (a call being entered or left) are dropped and
 *    the groups go to the outer ones;
 *  - other C frames stay, except frames of the interpreter's own object
 *    between two eval frames (call machinery: _PyFunction_Vectorcall, ...)
 *    and every C frame outside the outermost Python frame (thread start,
 *    main, Py_RunMain), so stacks keep the roots of Python-only samples;
 *  - groups left over when the unwind stopped short go on the outer end. */
int nat_merge(bf_smp_native *n, const bf_smp_frame *py, size_t np, size_t nc) {
  size_t gstart[NAT_MAX_DEPTH + 1], ng = 0;
  int any_entry = 0;
  for (size_t i = 0; i < np; i++) any_entry |= (py[i].flags & BF_SMP_FRAME_ENTRY) != 0;
  size_t neval = 0;
  for (size_t i = 0; i < nc; i++) neval += n->cf[i].ip->eval;
  if (any_entry) {
    for (size_t i = 0; i < np && ng < NAT_MAX_DEPTH; i++) {
      if (i == 0 || (py[i - 1].flags & BF_SMP_FRAME_ENTRY)) gstart[ng++] = i;
    }
  } else {
    /* no boundaries known: one Python frame per eval frame from the inside,
     * the rest to the outermost one */
    for (size_t i = 0; i < np && ng < NAT_MAX_DEPTH && (ng + 1 < neval || ng == 0); i++)
      gstart[ng++] = i;
  }
  gstart[ng] = np;
  size_t k = 0;
  int rc;
  if (ng && !neval && n->unwind_complete) {
    /* a whole C stack without the eval loop in it: its symbol is unknown
     * (stripped interpreter); C frames cannot be placed, keep Python's */
    n->mismatch++;
    for (size_t j = 0; j < np; j++)
      if ((rc = nat_push_out_frame(n, py[j].code, py[j].line, py[j].flags)) < 0) return rc;
    return 1;
  }
  /* more eval calls than Python groups on a whole C stack: the innermost
   * ones are entering or leaving a call (their frame not yet, or no longer,
   * the thread's current one): the groups belong to the outer ones */
  size_t skip = 0;
  if (any_entry && ng && neval > ng && n->unwind_complete) {
    skip = neval - ng;
    n->realigned++;
  }
  for (size_t i = 0; i < nc; i++) {
    const nat_ip *e = n->cf[i].ip;
    if (ng && k >= ng) break; /* outside the outermost Python frame */
    if (e->eval && skip) {
      skip--;
      continue;
    }
    if (e->eval && k < ng) {
      for (size_t j = gstart[k]; j < gstart[k + 1]; j++)
        if ((rc = nat_push_out_frame(n, py[j].code, py[j].line, py[j].flags)) < 0) return rc;
      k++;
      continue;
    }
    if (k > 0 && e->interp) continue;
    if ((rc = nat_push_out_frame(n, &e->code->pub, 0, BF_SMP_FRAME_NATIVE)) < 0) return rc;
  }
  if (neval > ng && ng && !n->unwind_complete) n->mismatch++;
  if (k < ng) {
    n->truncated++;
    for (size_t j = gstart[k]; j < np; j++)
      if ((rc = nat_push_out_frame(n, py[j].code, py[j].line, py[j].flags)) < 0) return rc;
  }
  return 0;
}

/* libunwind's accessors: its ptrace ones, with memory, registers and the
 * dynamic-info list served from the snapshot being unwound. */
void nat_accessors(unw_accessors_t *acc) {
  *acc = _UPT_accessors;
  acc->access_mem = acc_mem;
  acc->access_reg = acc_reg;
  acc->access_fpreg = acc_fpreg;
  acc->resume = acc_resume;
  acc->get_dyn_info_list_addr = acc_dyn_list;
  acc->find_proc_info = acc_find_proc_info;
}
