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

static int add_map(void *ud, const bf_procmap *pm) {
  bf_smp_native *n = ud;
  if (bf_vec_grow((void **)&n->maps, &n->cap_maps, n->nmaps + 1, sizeof *n->maps, 16) < 0) return 1;
  nat_map *m = &n->maps[n->nmaps++];
  m->lo = pm->lo;
  m->hi = pm->hi;
  m->off = pm->off;
  m->exec = pm->perms[2] == 'x';
  m->writable = pm->perms[1] == 'w';
  m->path = *pm->name == '/' ? nat_intern_path(n, pm->name) : NULL;
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

/* Symbolise addr (a pc, or a return address minus one). Cached per address.
 * c: the cursor at that frame, asked for the function's start (from the
 * unwind tables) only on a miss: in a stripped library the nearest exported
 * symbol may belong to an earlier function, and such frames are named by
 * their function's file offset instead ("0x3a40"), which is stable, or "??"
 * when no unwind table covers the address either. */
static const nat_ip *ip_lookup(bf_smp_native *n, uint64_t addr, unw_cursor_t *c) {
  if (n->nips * 2 >= n->cap_ips) {
    if (n->cap_ips && n->nips < NAT_MAX_IPS) {
      size_t oc = n->cap_ips;
      nat_ip *old = n->ips;
      nat_ip *ni = calloc(oc * 2, sizeof *ni);
      if (!ni) return NULL;
      n->ips = ni;
      n->cap_ips = oc * 2;
      for (size_t i = 0; i < oc; i++) {
        if (!old[i].addr) continue;
        size_t j = (size_t)((old[i].addr * 0x9E3779B97F4A7C15ull) >> 20) & (n->cap_ips - 1);
        while (ni[j].addr) j = (j + 1) & (n->cap_ips - 1);
        ni[j] = old[i];
      }
      free(old);
    } else {
      free(n->ips);
      n->cap_ips = 8192;
      n->nips = 0;
      if (!(n->ips = calloc(n->cap_ips, sizeof *n->ips))) {
        n->cap_ips = 0;
        return NULL;
      }
    }
  }
  size_t j = (size_t)((addr * 0x9E3779B97F4A7C15ull) >> 20) & (n->cap_ips - 1);
  while (n->ips[j].addr) {
    if (n->ips[j].addr == addr) return &n->ips[j];
    j = (j + 1) & (n->cap_ips - 1);
  }
  const nat_map *m = nat_maps_find(n, addr);
  const char *path = m && m->path ? m->path : nat_intern_path(n, BF_IDENT_ANONYMOUS);
  if (!path) return NULL;
  char name[512];
  unw_word_t off = 0;
  unw_proc_info_t pi;
  uint64_t start = addr;
  if (c && unw_get_proc_info(c, &pi) == 0 && pi.start_ip && pi.start_ip <= addr &&
      addr < pi.end_ip)
    start = pi.start_ip;
  int named = m && m->path &&
              _UPT_get_proc_name(n->as, addr, name, sizeof name, &off, n->upt_pid) == 0 &&
              off <= addr - start;
  /* unknown function: named by its start when the unwind tables know it,
   * else "??" (one per library) rather than one name per address */
  bf_ident_native_name(name, sizeof name, named ? name : NULL, start != addr || !m,
                       m ? start - m->lo + m->off : start);
  nat_code *code = code_intern(n, path, name);
  if (!code) return NULL;
  nat_ip *e = &n->ips[j];
  e->addr = addr;
  e->code = code;
  e->eval = is_eval_symbol(name);
  e->interp = path == n->interp_path;
  n->nips++;
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
  if (bf_vec_grow((void **)&n->cf, &n->cap_cf, NAT_MAX_DEPTH, sizeof *n->cf, 16) < 0 ||
      unw_init_remote(&c, n->as, t->upt) < 0) {
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
  for (size_t i = 0; i < nc; i++) {
    const nat_ip *e = n->cf[i].ip;
    if (ng && k >= ng) break; /* outside the outermost Python frame */
    if (e->eval && k < ng) {
      for (size_t j = gstart[k]; j < gstart[k + 1]; j++)
        if ((rc = nat_push_out_frame(n, py[j].code, py[j].line, py[j].flags)) < 0) return rc;
      k++;
      continue;
    }
    if (k > 0 && e->interp) continue;
    if ((rc = nat_push_out_frame(n, &e->code->pub, 0, BF_SMP_FRAME_NATIVE)) < 0) return rc;
  }
  if (neval > ng && ng) n->mismatch++;
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
}
