/* walker.c — the sampler's hot path: walk every thread's frame chain into
 * bf_smp_thread records, check the stack read is consistent (torn-stack
 * checks, cuts, settled reads), with a code-object cache keyed by remote
 * address. Attaching is attach.c, thread slots and /proc are threads.c.
 * Remote memory is untrusted: every pointer is read through remote.c, every
 * count and length is bounded.
 */
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "clock.h"
#include "gen/opcodes.h"
#include "smp_int.h"
#include "vec.h"

static void code_free(smp_code *c) {
  free((char *)c->pub.filename);
  free((char *)c->pub.qualname);
  free(c->ranges);
  free(c->calls);
  free(c);
}

static void retired_clear(bf_smp *h) {
  while (h->retired) {
    smp_code *n = h->retired->next;
    code_free(h->retired);
    h->retired = n;
  }
  h->nretired = 0;
}

/* Identity of a code object from the fingerprint window (see smp_layout). */
static uint64_t code_fp(const smp_layout *l, const unsigned char *w) {
  uint64_t v, h = 0x9E3779B97F4A7C15ull;
  uint64_t fields[] = {l->co_filename, l->co_name, l->co_qualname, l->co_linetable};
  for (size_t i = 0; i < 4; i++) {
    if (!fields[i] && i == 2) continue;
    memcpy(&v, w + (fields[i] - l->co_fp_lo), 8);
    h = (h ^ v) * 0xBF58476D1CE4E5B9ull;
  }
  uint32_t fl;
  memcpy(&fl, w + (l->co_firstlineno - l->co_fp_lo), 4);
  return (h ^ fl) * 0x94D049BB133111EBull;
}

/* Retire c: callers may still hold its strings. */
static void code_retire(bf_smp *h, smp_code *c) {
  c->next = h->retired;
  h->retired = c;
  h->nretired++;
}

void smp_code_cache_clear(bf_smp *h) {
  size_t it = 0;
  for (smp_code_slot *e; (e = bf_pmap_next(&h->codes, &it));) code_retire(h, e->code);
  bf_pmap_clear(&h->codes);
}

void smp_code_cache_free(bf_smp *h) {
  smp_code_cache_clear(h);
  retired_clear(h);
  bf_pmap_free(&h->codes);
}

/* ---- code objects ----------------------------------------------------- */

/* Read a str object as UTF-8 (bounded). OUT: malloc'd string. */
int smp_read_str(bf_smp *h, uint64_t addr, char **out) {
  const smp_layout *l = &h->lay;
  unsigned char hdr[128];
  size_t hl = (size_t)l->uni_compact_size;
  if (hl > sizeof hdr || !addr) return -EIO;
  int rc = smp_read(h, addr, hdr, hl);
  if (rc < 0) return rc;
  uint64_t len = rd64(hdr + l->uni_length);
  uint32_t state = rd32(hdr + l->uni_state);
  unsigned kind = (state >> 2) & 7, compact = (state >> 5) & 1, ascii = (state >> 6) & 1;
  /* a longer name is kept cut after SMP_MAX_STR code points, with "…"
   * (the tracer cuts the same way); a length no str can have is garbage */
  if (len > (1ull << 31) || !compact || (kind != 1 && kind != 2 && kind != 4)) return -EIO;
  if (ascii && kind != 1) return -EIO;
  int cut = len > SMP_MAX_STR;
  if (cut) len = SMP_MAX_STR;
  uint64_t data = addr + (ascii ? l->uni_ascii_size : l->uni_compact_size);
  unsigned char raw[SMP_MAX_STR * 4];
  if ((rc = smp_read(h, data, raw, (size_t)len * kind)) < 0) return rc;
  char *s = malloc((size_t)len * 4 + 4);
  if (!s) return -ENOMEM;
  size_t o = 0;
  for (uint64_t i = 0; i < len; i++) {
    uint32_t c = kind == 1 ? raw[i] : kind == 2 ? (uint32_t)(raw[2 * i] | raw[2 * i + 1] << 8)
                                                 : rd32(raw + 4 * i);
    if (c < 0x80) {
      s[o++] = c ? (char)c : '?';
    } else if (c < 0x800) {
      s[o++] = (char)(0xc0 | (c >> 6));
      s[o++] = (char)(0x80 | (c & 63));
    } else if (c < 0x10000) {
      if (c >= 0xd800 && c <= 0xdfff) c = 0xfffd;
      s[o++] = (char)(0xe0 | (c >> 12));
      s[o++] = (char)(0x80 | ((c >> 6) & 63));
      s[o++] = (char)(0x80 | (c & 63));
    } else if (c < 0x110000) {
      s[o++] = (char)(0xf0 | (c >> 18));
      s[o++] = (char)(0x80 | ((c >> 12) & 63));
      s[o++] = (char)(0x80 | ((c >> 6) & 63));
      s[o++] = (char)(0x80 | (c & 63));
    } else {
      free(s);
      return -EIO;
    }
  }
  if (cut) {
    s[o++] = (char)0xe2; /* U+2026 */
    s[o++] = (char)0x80;
    s[o++] = (char)0xa6;
  }
  s[o] = 0;
  *out = s;
  return 0;
}

/* ---- the torn-stack check ------------------------------------------------
 * A stack is read frame by frame while the target runs on, so it can mix
 * moments: a caller read after its callee returned, a frame freed and reused.
 * Each caller frame must be stopped where a frame can have a live child:
 * sampling/gen/opcodes.h classes every opcode of each version (3.11+: the
 * instructions that push a frame inside the eval loop, for a child entered
 * without a C call in between; 3.8-3.10, where every call goes through C:
 * any instruction that can run code). The code bytes are read once per code
 * object into calls[] (one byte per code unit). */

static const uint8_t *op_table(uint32_t version_hex) {
  switch ((version_hex >> 16) & 0xff) {
    case 8: return smp_op_3_8;
    case 9: return smp_op_3_9;
    case 10: return smp_op_3_10;
    case 11: return smp_op_3_11;
    case 12: return smp_op_3_12;
    case 13: return smp_op_3_13;
    case 14: return smp_op_3_14;
    case 15: return smp_op_3_15;
    default: return NULL; /* unknown opcodes: callers are not checked */
  }
}

/* Fill c->calls from the code object's bytes (co: its first cl bytes as read).
 * Leaves it NULL (unchecked) on any doubt: unreadable, too big, an opcode the
 * table does not know (e.g. 3.12+ INSTRUMENTED_LINE hides the real one). */
static void code_calls(bf_smp *h, smp_code *c, const unsigned char *co, size_t cl) {
  const smp_layout *l = &h->lay;
  const uint8_t *tab = op_table(l->version_hex);
  uint64_t at, nbytes;
  if (!tab) return;
  if (l->co_code) { /* 3.8-3.10: a bytes object */
    unsigned char bh[64];
    if (l->co_code + 8 > cl || l->bytes_sval > sizeof bh) return;
    uint64_t b = rd64(co + l->co_code);
    if (!b || smp_read(h, b, bh, (size_t)l->bytes_sval) < 0) return;
    nbytes = rd64(bh + l->bytes_size);
    at = b + l->bytes_sval;
  } else if (l->co_ob_size && l->co_code_adaptive && l->co_ob_size + 8 <= cl) {
    nbytes = rd64(co + l->co_ob_size) * 2; /* 3.11+: code units inline */
    at = c->addr + l->co_code_adaptive;
  } else {
    return;
  }
  if (!nbytes || nbytes > SMP_MAX_BYTECODE || nbytes % 2) return;
  size_t n = (size_t)nbytes / 2;
  unsigned char *code = malloc((size_t)nbytes);
  uint8_t *calls = calloc(n, 1);
  if (!code || !calls || smp_read(h, at, code, (size_t)nbytes) < 0) goto fail;
  for (size_t i = 0, start = 0; i < n;) {
    unsigned v = tab[code[2 * i]], cls = v >> 4;
    if (cls == 3) { /* EXTENDED_ARG: belongs to the next instruction */
      i++;
      continue;
    }
    if (cls == 2) goto fail;
    size_t end = i + 1 + (v & 15); /* the instruction and its inline caches */
    if (end > n) end = n;
    /* bit 0: may have a child; bits 1-4: units back to the instruction
     * (its inline caches; an EXTENDED_ARG before it is its own start) */
    for (size_t u = start; u < end; u++) calls[u] = (uint8_t)((cls == 1) | (u > i ? (u - i) << 1 : 0));
    i = start = end;
  }
  free(code);
  c->calls = calls;
  c->nunits = (uint32_t)n;
  return;
fail:
  free(code);
  free(calls);
}

/* May a frame of code c (at code_addr) stopped at instr have a live child? */
static int caller_ok(const smp_layout *l, const smp_code *c, uint64_t code_addr, uint64_t instr) {
  uint64_t u;
  if (!c->calls) return 1;
  if (l->instr_is_lasti) {
    int32_t lasti = (int32_t)instr;
    if (lasti < 0) return 0; /* not started */
    u = l->lasti_in_units ? (uint64_t)lasti : (uint64_t)lasti / 2;
  } else {
    uint64_t base = code_addr + l->co_code_adaptive;
    if (instr < base) return 0; /* not started */
    u = (instr - base) / 2;
  }
  return u < c->nunits && (c->calls[u] & 1);
}

static uint64_t sig_mix(uint64_t h, uint64_t v) {
  h ^= v + 0x9E3779B97F4A7C15ull + (h << 6) + (h >> 2);
  return h * 0xBF58476D1CE4E5B9ull;
}

/* Signature of a read: acc (what the walk read of each frame) mixed with the
 * threads, frames and lines as returned, from frame index first on. A torn
 * walk's: h->walk_acc (every frame's address, code, instruction and state)
 * from 0, to tell a stack that is not changing from one that is; a settled
 * read's: h->settle_acc from 1, without the innermost frames' lines. */
static uint64_t read_sig(const bf_smp *h, uint64_t acc, size_t first) {
  uint64_t s = sig_mix(h->nthreads, acc);
  for (size_t i = 0; i < h->nthreads; i++) {
    s = sig_mix(sig_mix(s, h->threads[i].thread_id), h->threads[i].nframes);
    const bf_smp_frame *f = h->threads[i].frames;
    for (size_t k = first; k < h->threads[i].nframes; k++)
      s = sig_mix(sig_mix(s, (uintptr_t)f[k].code), (uint64_t)(uint32_t)f[k].line);
  }
  return s;
}

static void torn(bf_smp *h, const char *why) {
  if (!h->torn) h->torn_why = why;
  h->torn = h->torn_here = 1;
}

/* A torn stack whose outermost frame cannot be a thread's first: never
 * kept in a recording (only a settled read of a stopped thread keeps it). */
static void torn_root(bf_smp *h, const char *why) {
  torn(h, why);
  h->torn_root = 1;
}

/* Cached code object at addr, or NULL. */
static smp_code *code_find(bf_smp *h, uint64_t addr) {
  const smp_code_slot *e = bf_pmap_get(&h->codes, addr);
  return e ? e->code : NULL;
}

/* Cached code object at addr, reading it on a miss or when fp (the identity
 * fingerprint read this sample; 0 = not checked) no longer matches: freed code
 * objects' addresses get reused by new ones. NULL + *err on garbage. */
static smp_code *code_get(bf_smp *h, uint64_t addr, uint64_t fp, int *err) {
  smp_code_slot *e = bf_pmap_get(&h->codes, addr);
  if (e) {
    if (!fp || e->code->fp == fp) return e->code;
    /* another code object now lives at this address (the old one was
     * freed): retire the entry, callers may still hold its strings */
    code_retire(h, e->code);
    bf_pmap_del(&h->codes, addr);
  }
  if (++h->code_misses > SMP_MAX_CODE_MISSES) {
    *err = -EIO; /* this many new code objects in one sample: garbage */
    return NULL;
  }
  /* a bound on distinct code objects: past it start over */
  if (h->codes.len > 200000) smp_code_cache_clear(h);
  const smp_layout *l = &h->lay;
  unsigned char co[512];
  size_t cl = (size_t)l->co_size;
  if (cl > sizeof co) cl = sizeof co;
  int rc;
  if ((rc = smp_read(h, addr, co, cl)) < 0) {
    *err = rc;
    return NULL;
  }
  if (h->code_type_addr && rd64(co + l->ob_type) != h->code_type_addr) {
    *err = -EINVAL; /* not a code object */
    return NULL;
  }
  smp_code *c = calloc(1, sizeof *c);
  if (!c) {
    *err = -ENOMEM;
    return NULL;
  }
  c->addr = addr;
  if (l->co_fp_lo + l->co_fp_len <= cl) c->fp = code_fp(l, co + l->co_fp_lo);
  char *fn = NULL, *qn = NULL;
  uint64_t qaddr = rd64(co + (l->co_qualname ? l->co_qualname : l->co_name));
  if ((rc = smp_read_str(h, rd64(co + l->co_filename), &fn)) < 0 ||
      (rc = smp_read_str(h, qaddr, &qn)) < 0) {
    free(fn);
    free(c);
    *err = rc;
    return NULL;
  }
  c->pub.filename = fn;
  c->pub.qualname = qn;
  c->pub.firstlineno = (int32_t)rd32(co + l->co_firstlineno);
  /* line table: a bytes object */
  uint64_t lt = rd64(co + l->co_linetable);
  unsigned char bh[64];
  if (lt && l->bytes_sval <= sizeof bh && smp_read(h, lt, bh, (size_t)l->bytes_sval) == 0) {
    uint64_t blen = rd64(bh + l->bytes_size);
    if (blen <= SMP_MAX_LINETABLE) {
      unsigned char *tab = malloc(blen ? blen : 1);
      if (tab && smp_read(h, lt + l->bytes_sval, tab, (size_t)blen) == 0)
        smp_linetable_decode(l->lt_kind, tab, (size_t)blen, (int)c->pub.firstlineno, &c->ranges,
                             &c->nranges);
      free(tab);
    }
  }
  /* CO_GENERATOR | CO_COROUTINE | CO_ITERABLE_COROUTINE | CO_ASYNC_GENERATOR */
  if (l->co_flags && l->co_flags + 4 <= cl) c->is_gen = (rd32(co + l->co_flags) & 0x3a0) != 0;
  code_calls(h, c, co, cl);
  if (!h->codes.slot_size) h->codes = (bf_pmap)BF_PMAP_INIT(smp_code_slot);
  if (!(e = bf_pmap_put(&h->codes, addr, NULL))) { /* the reserved keys 0 and ~0 are never read fine */
    *err = -ENOMEM;
    code_free(c);
    return NULL;
  }
  e->code = c;
  return c;
}

static int32_t code_line(const smp_layout *l, const smp_code *c, uint64_t code_addr,
                         uint64_t instr) {
  int64_t a;
  if (l->instr_is_lasti) {
    int32_t lasti = (int32_t)instr;
    if (lasti < 0) return (int32_t)c->pub.firstlineno;
    a = l->lasti_in_units ? (int64_t)lasti * 2 : lasti;
  } else {
    uint64_t base = code_addr + l->co_code_adaptive;
    if (instr < base) return (int32_t)c->pub.firstlineno;
    a = (int64_t)((instr - base) / 2);
  }
  if (a > UINT32_MAX) return (int32_t)c->pub.firstlineno;
  int32_t line = smp_linetable_lookup(c->ranges, c->nranges, (uint32_t)a);
  return line < 0 ? (int32_t)c->pub.firstlineno : line;
}

/* ---- threads (slots: threads.c) -------------------------------------- */

static int push_frame(bf_smp *h, const smp_code *c, int32_t line, uint64_t fa) {
  if (h->nframes == h->cap_frames) { /* frames and frame_addr share cap_frames */
    size_t cf = h->cap_frames, ca = h->cap_frames;
    if (bf_vec_grow((void **)&h->frames, &cf, h->nframes + 1, sizeof *h->frames, 256) < 0 ||
        bf_vec_grow((void **)&h->frame_addr, &ca, h->nframes + 1, sizeof *h->frame_addr, 256) < 0)
      return -ENOMEM;
    h->cap_frames = cf;
  }
  h->frame_addr[h->nframes] = fa;
  h->frames[h->nframes++] = (bf_smp_frame){&c->pub, line, 0};
  return 0;
}

/* The code object at code, through the cache. A cached code object's
 * identity is re-checked (its address may now hold another one) at most once
 * per sample and once per SMP_CODE_TRUST_NS: a code object on a stack is
 * alive, so a death *and* a reuse of the address inside that window is what
 * could slip through. NULL + *err (-EIO for an unreadable fingerprint). */
static inline smp_code *frame_code(bf_smp *h, uint64_t code, int *err) {
  const smp_layout *l = &h->lay;
  smp_code *c = code_find(h, code);
  if (!c || (c->checked_gen != h->gen && h->now_ns - c->checked_ns >= SMP_CODE_TRUST_NS)) {
    const unsigned char *cw = smp_read_cold(h, code + l->co_fp_lo, (size_t)l->co_fp_len, err);
    if (!cw) {
      if (*err == -EINVAL) *err = -EIO;
      return NULL;
    }
    c = code_get(h, code, code_fp(l, cw), err);
    if (c) {
      c->checked_gen = h->gen;
      c->checked_ns = h->now_ns;
    }
  }
  return c;
}

/* ---- record --opcodes / --mode exception -------------------------------- */

/* The opcode byte a frame of code c (at code_addr) is executing at instr
 * (3.11+: an address inside the code object's co_code_adaptive, rewritten in
 * place as instructions specialise), or -1: before 3.11, not started, out of
 * the code's bounds or unreadable (the sample is kept without it). */
static int frame_opcode(bf_smp *h, const smp_code *c, uint64_t code_addr, uint64_t instr) {
  const smp_layout *l = &h->lay;
  /* the instruction starts from the torn check's decode (calls[]): 3.12 puts
   * prev_instr on an instruction's last inline cache around calls, and a
   * cache unit holds data, not an opcode; no decode (an opcode the tables do
   * not know, e.g. sys.monitoring's INSTRUMENTED_LINE): not told */
  if (l->instr_is_lasti || !l->co_code_adaptive || !c->calls) return -1;
  uint64_t base = code_addr + l->co_code_adaptive;
  if (instr < base || (instr - base) % 2 || (instr - base) / 2 >= c->nunits) return -1;
  uint64_t u = (instr - base) / 2;
  u -= (uint64_t)(c->calls[u] >> 1);
  int err = 0;
  const unsigned char *p = smp_read_hot(h, base + 2 * u, 2, &err);
  return p ? p[0] : -1;
}

/* Whether thread state ts (tb: its first ts_read bytes as prefetched, or NULL
 * to read afresh) is raising an exception or handling one: sys.exc_info()'s
 * walk of the exc_info chain (the first item whose value is neither NULL nor
 * None; generators push their own). */
static int thread_has_exc(bf_smp *h, uint64_t ts, const unsigned char *tb) {
  const smp_layout *l = &h->lay;
  unsigned char f[16], it[32];
  if (!l->ts_exc_info || !h->none_addr || l->ei_prev + 8 > sizeof it) return 0;
  uint64_t cur = 0, item = 0;
  if (tb) {
    cur = l->ts_cur_exc ? rd64(tb + l->ts_cur_exc) : 0;
    item = rd64(tb + l->ts_exc_info);
  } else { /* exc_info follows the current exception (3.12+) or not: two reads */
    if (l->ts_cur_exc && smp_read(h, ts + l->ts_cur_exc, f, 8) == 0) cur = rd64(f);
    if (smp_read(h, ts + l->ts_exc_info, f + 8, 8) < 0) return 0;
    item = rd64(f + 8);
  }
  if (cur) return 1;
  for (int i = 0; item && i < 256; i++) { /* a chain longer than this is garbage */
    int err = 0;
    const unsigned char *p = it;
    if (tb ? !(p = smp_read_hot(h, item, (size_t)l->ei_prev + 8, &err))
           : smp_read(h, item, it, (size_t)l->ei_prev + 8) < 0)
      return 0;
    uint64_t value = rd64(p); /* the item's first field */
    if (value && value != h->none_addr) return 1;
    uint64_t prev = rd64(p + l->ei_prev);
    if (prev == item) return 0;
    item = prev;
  }
  return 0;
}

int bf_smp_can(bf_smp *h, unsigned want) {
  const smp_layout *l = &h->lay;
  if ((want & BF_SMP_WANT_OPCODE) && (l->instr_is_lasti || !l->co_code_adaptive))
    return smp_seterr(h, -ENOTSUP,
                      "--opcodes needs Python 3.11 or newer (process %d runs Python %s, whose frames "
                      "keep no instruction pointer into adaptive bytecode); record without --opcodes",
                      h->pid, h->version);
  if ((want & BF_SMP_WANT_EXC) && (!l->ts_exc_info || !h->none_addr))
    return smp_seterr(h, -ENOTSUP,
                      "--mode exception: the thread state's exception fields of Python %s (process %d) "
                      "are not known to this build (%s); record without it",
                      h->version, h->pid, !h->none_addr ? "no _Py_NoneStruct symbol" : "layout without exc_info");
  return 0;
}

/* End of a thread's walk (its frames from first on): the checks on the
 * chain as a whole, and the cut at the outermost caller found not at a call
 * (cut; 0: none). last_owner: 3.11+ owner of the outermost frame. base:
 * 3.15+ the thread's base frame (0: unknown), bottom: the last frame the
 * chain reached (0: none). */
static inline void walk_end(bf_smp *h, size_t first, size_t cut, int last_owner, int64_t max_py,
                            uint64_t base, uint64_t bottom) {
  const smp_layout *l = &h->lay;
  if (base && bottom) {
    /* 3.15+: every frame of a running thread's stack links down to the base
     * frame embedded in its thread state; a chain that ends elsewhere went
     * through a frame freed or a generator that yielded while it was read.
     * This replaces the eval-call guess below: the outermost frame is proven */
    if (bottom != base) torn_root(h, "the chain did not end at the thread's base frame");
  }
  if (max_py >= 0 && (int64_t)(h->nframes - first) > max_py)
    torn(h, "more frames than the recursion depth");
  if (cut >= h->nframes && cut > first) /* nothing left to keep */
    torn(h, "no frame of the stack was still running");
  if (cut > first && !h->torn) { /* keep the outermost cut frame's callers */
    size_t keep = h->nframes - cut;
    memmove(h->frames + first, h->frames + cut, keep * sizeof *h->frames);
    memmove(h->frame_addr + first, h->frame_addr + cut, keep * sizeof *h->frame_addr);
    h->nframes = first + keep;
    h->cut_here = 1;
    h->leaf_op = -1; /* the opcode read was the cut-off frame's */
  }
  /* a generator runs on top of the frame that resumed it; as the outermost
   * frame it had yielded when its link was read (3.8-3.10 by its code's
   * flags, 3.11+ by the frame's owner) */
  if (h->nframes > first && h->frames[h->nframes - 1].code != &h->trunc.pub &&
      (((const smp_code *)h->frames[h->nframes - 1].code)->is_gen ||
       (l->fr_owner && last_owner == 1))) /* 3.11+: FRAME_OWNED_BY_GENERATOR */
    torn_root(h, "a generator frame is outermost");
  /* 3.11+: a thread's outermost frame began an eval call (3.11 is_entry,
   * 3.12+ a C-stack shim below it); a chain that ends elsewhere went
   * through a generator that yielded meanwhile (its link is cleared) */
  if (!base && h->nframes > first && !l->frames_are_objects && (l->fr_entry || l->fr_owner) &&
      !(h->frames[h->nframes - 1].flags & BF_SMP_FRAME_ENTRY))
    torn_root(h, "the outermost frame did not begin an eval call");
}

/* Walk one thread's frames starting at frame address fa. max_py: the
 * thread's recursion depth + 1 (more Python frames cannot be live), or -1
 * when unknown; base: 3.15+ its base frame (0: unknown). Marks h->torn when
 * the chain cannot have existed. */
static int walk_frames(bf_smp *h, uint64_t fa, int64_t max_py, uint64_t base) {
  const smp_layout *l = &h->lay;
  int err = 0;
  uint64_t bottom = 0;   /* the last frame read */
  size_t first = h->nframes;
  int child_entry = 0; /* the last pushed frame was entered by a C call */
  int last_owner = 0;  /* 3.11+: owner of the last pushed frame (1: a generator) */
  size_t cut = 0;      /* the outermost caller found not at a call (0: none) */
  for (int steps = 0; fa; steps++) {
    /* garbage memory can look like endless chains: bound a sample's work */
    if (++h->walk_steps > SMP_MAX_STEPS || steps > 4 * SMP_MAX_DEPTH) return -EIO;
    if (fa == base) {
      /* 3.15+: the base frame embedded in the thread state ends every chain
       * (interpreter-owned, no code, no link): reached, it needs no read (a
       * page less to pin where it lies past the thread state's own page) */
      bottom = fa;
      break;
    }
    const unsigned char *fb = smp_read_hot(h, fa, (size_t)l->fr_read, &err);
    if (!fb) return err;
    uint64_t code = rd64(fb + l->fr_code), back = rd64(fb + l->fr_back);
    uint64_t instr = l->instr_is_lasti ? rd32(fb + l->fr_instr) : rd64(fb + l->fr_instr);
    int owner = l->fr_owner ? fb[l->fr_owner] : 0;
    if (back == fa) return -EIO;
    bottom = fa;
    /* what was read, for read_sig (one multiply a frame) */
    h->walk_acc = (h->walk_acc + (fa ^ (code << 1) ^ instr ^
                                  (l->fr_state ? (uint64_t)fb[l->fr_state] << 48 : 0))) *
                  0x9E3779B97F4A7C15ull;
    /* what a settled read compares: all of it but the innermost frame's
     * instruction, which moves on while the stack holds still */
    h->settle_acc = (h->settle_acc + (fa ^ (code << 1) ^ (back << 3) ^
                                      (steps ? instr : 0) ^
                                      (l->fr_state ? (uint64_t)fb[l->fr_state] << 48 : 0))) *
                    0x9E3779B97F4A7C15ull;
    if (l->executable_tagged) code &= ~(uint64_t)7; /* _PyStackRef tag bits */
    if (owner >= 3) { /* C-stack shim / interpreter-owned: no Python code */
      /* native.c: the frame below a C-stack shim (owner 3) began its eval call */
      if (owner == 3 && h->nframes > first) h->frames[h->nframes - 1].flags |= BF_SMP_FRAME_ENTRY;
      child_entry = 1;
      fa = back;
      continue;
    }
    if (!code && l->executable_tagged) {
      /* 3.14+: a frame that returned has its executable cleared before it
       * is popped; its link still names its caller, which was running then.
       * The frames read as its children are cut off (below), as for a
       * caller read after its child returned: no re-read needed */
      if (h->no_cut) torn(h, "a frame had returned");
      if (h->nframes > first) cut = h->nframes;
      child_entry = 0;
      fa = back;
      continue;
    }
    if (max_py >= 0 && (int64_t)(h->nframes - first) >= max_py) {
      /* the chain goes on past the recursion depth: through frames freed
       * and reused (a cycle, maybe); no need to read it to the end */
      torn(h, "more frames than the recursion depth");
      return 0;
    }
    if (cut) { /* behind a frame that had returned: a cycle of freed frames */
      if (h->nframes - first >= SMP_MAX_DEPTH - 1) {
        torn(h, "no frame of the stack was still running");
        return 0;
      }
    } else if (h->nframes - first == SMP_MAX_DEPTH - 1) { /* one more real frame: cut here */
      h->truncated++;
      return push_frame(h, &h->trunc, 0, 0); /* no frame behind it */
    }
    smp_code *c = frame_code(h, code, &err);
    if (!c) {
      if (err == -EINVAL && l->version_hex >= 0x030D0000) { /* non-code executable */
        fa = back;
        continue;
      }
      return err == -EINVAL ? -EIO : err;
    }
    /* 3.8-3.10: every frame in the chain is executing (freed or reused
     * ones, generators that yielded meanwhile, are not), but for the
     * innermost one just pushed, not started yet (f_lasti -1) */
    if (l->fr_state && fb[l->fr_state] != (unsigned char)l->fr_state_running &&
        !(h->nframes == first && l->instr_is_lasti && (int32_t)instr < 0)) {
      /* read after it returned: it and the frames read as its children are
       * cut off (below), its caller as read may still be running */
      if (h->no_cut) torn(h, "a frame is not executing");
      cut = h->nframes + 1;
    } else if (h->nframes > first && (l->frames_are_objects || !child_entry) &&
               !caller_ok(l, c, code, instr)) { /* a caller: stopped where a child can run? */
      /* read after its child returned: what it shows is where it ran then,
       * with its callers; the frames read as its children are cut off
       * (below), unless a cut is not wanted (a settled read retries) */
      if (h->no_cut) torn(h, "a caller frame is not at a call");
      cut = h->nframes;
    }
    /* a caller's instruction stays put from sample to sample: its line once */
    if (instr != c->line_instr || !c->line_known) {
      c->line_instr = instr;
      c->line = code_line(l, c, code, instr);
      c->line_known = 1;
    }
    int rc = push_frame(h, c, c->line, fa);
    if (rc < 0) return rc;
    if (h->want_op && h->nframes == first + 1) h->leaf_op = frame_opcode(h, c, code, instr);
    int entry = l->frames_are_objects || (l->fr_entry && fb[l->fr_entry]);
    if (entry) h->frames[h->nframes - 1].flags |= BF_SMP_FRAME_ENTRY; /* for native.c */
    child_entry = entry;
    last_owner = owner;
    fa = back;
  }
  walk_end(h, first, cut, last_owner, max_py, base, bottom);
  return 0;
}

/* Start of a walk: reset the per-sample state, read the clock, prefetch. */
static inline void walk_begin(bf_smp *h, unsigned want) {
  h->gen++;
  h->nthreads = h->nframes = 0;
  h->walk_steps = 0;
  h->code_misses = 0;
  h->torn = 0;
  h->torn_why = NULL;
  h->ntorn_tids = h->torn_tids_over = h->cut_here = h->torn_root = 0;
  h->no_cut = (want & BF_SMP_WANT_SETTLED) != 0;
  h->want_op = (want & BF_SMP_WANT_OPCODE) != 0;
  h->walk_acc = h->settle_acc = 0;
  { /* always: the code cache's trust window runs on it too (native.c walks
     * without WANT_STATE, and a stale clock would trust stale code forever) */
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    h->now_ns = (int64_t)now.tv_sec * 1000000000 + now.tv_nsec;
  }
  smp_pynames_tick(h); /* a thread-name lookup when due: rare, not per sample */
  smp_prefetch(h);
}

/* Who holds the GIL and whether a collection runs, as last read (3.8-3.11
 * keep them in _PyRuntime, 3.12+ per interpreter). */
typedef struct walk_gil {
  int gc;
  uint64_t holder;
  int locked;
} walk_gil;

static inline int runtime_gil(bf_smp *h, walk_gil *g) {
  const smp_layout *l = &h->lay;
  const unsigned char *p;
  int err = 0;
  if (l->rt_gc_collecting) {
    if (!(p = smp_read_hot(h, h->runtime_addr + l->rt_gc_collecting, 4, &err))) return err;
    g->gc = rd32(p) != 0;
  }
  if (l->rt_gil_last_holder) {
    size_t span = (size_t)(l->rt_gil_locked - l->rt_gil_last_holder + 4);
    if (!(p = smp_read_hot(h, h->runtime_addr + l->rt_gil_last_holder, span, &err))) return err;
    g->holder = rd64(p);
    g->locked = rd32(p + (l->rt_gil_locked - l->rt_gil_last_holder)) != 0;
  }
  return 0;
}

/* Interpreter interp: OUT its first thread state, the next interpreter, and
 * its GC and GIL state where it keeps them. */
static inline int interp_state(bf_smp *h, uint64_t interp, uint64_t *ts, uint64_t *next_interp,
                               walk_gil *g) {
  const smp_layout *l = &h->lay;
  const unsigned char *p;
  int err = 0;
  if (!(p = smp_read_hot(h, interp + l->is_tstate_head, 8, &err))) return err;
  *ts = rd64(p);
  if (!(p = smp_read_hot(h, interp + l->is_next, 8, &err))) return err;
  *next_interp = rd64(p);
  if (l->is_gc_collecting) {
    if (!(p = smp_read_hot(h, interp + l->is_gc_collecting, 4, &err))) return err;
    g->gc = rd32(p) != 0;
  }
  if (l->is_gil_ptr) {
    if (!(p = smp_read_hot(h, interp + l->is_gil_ptr, 8, &err))) return err;
    uint64_t gp = rd64(p);
    size_t span = (size_t)(l->gil_locked - l->gil_last_holder + 4);
    if (gp && (p = smp_read_hot(h, gp + l->gil_last_holder, span, &err))) {
      g->holder = rd64(p);
      g->locked = rd32(p + (l->gil_locked - l->gil_last_holder)) != 0;
    } else if (gp) {
      return err;
    }
  }
  if (l->is_gil_holder) {
    if (!(p = smp_read_hot(h, interp + l->is_gil_holder, 8, &err))) return err;
    g->holder = rd64(p);
    if (!(p = smp_read_hot(h, interp + l->is_gil_locked, 4, &err))) return err;
    g->locked = rd32(p) != 0;
  }
  return 0;
}

/* The innermost frame of thread state tb (its first ts_read bytes). OUT: *fa. */
static inline int thread_frame(bf_smp *h, const unsigned char *tb, uint64_t *fa) {
  const smp_layout *l = &h->lay;
  int err = 0;
  if (l->has_cframe) {
    uint64_t cf = rd64(tb + l->ts_cframe);
    *fa = 0;
    if (cf) {
      const unsigned char *p = smp_read_hot(h, cf + l->cf_current_frame, 8, &err);
      if (!p) return err;
      *fa = rd64(p);
    }
  } else {
    *fa = rd64(tb + l->ts_frame);
  }
  return 0;
}

/* The slot of thread state ts (Python thread id thread_id). *tid: the host
 * tid read from the thread state (0 when it has none), updated on 3.8-3.10. */
static inline smp_tslot *thread_slot(bf_smp *h, uint64_t ts, uint64_t thread_id, int64_t *tid) {
  if (h->lay.ts_native_thread_id || h->pthread_tid_off < 0 || !thread_id) return smp_slot_get(h, ts, *tid);
  /* 3.8-3.10: the tid lives in glibc's struct pthread (cached per slot) */
  smp_tslot *slot = NULL;
  for (size_t i = 0; i < h->nslots; i++)
    if (h->slots[i].tstate == thread_id) slot = &h->slots[i];
  if (slot && slot->tid > 0) { /* tid 0: not mapped to the host yet, look again */
    *tid = slot->tid;
    slot->seen = h->gen;
    return slot;
  }
  uint32_t t32 = 0;
  if (smp_read(h, thread_id + (uint64_t)h->pthread_tid_off, &t32, 4) == 0) *tid = smp_host_tid(h, t32);
  return smp_slot_get(h, thread_id, *tid);
}

/* Recursion depth + 1 of thread state tb (the push/pop window): more Python
 * frames cannot be live. -1 when unknown. */
static inline int64_t thread_max_py(const smp_layout *l, const unsigned char *tb) {
  int64_t max_py = -1;
  if (l->ts_rec_depth) {
    max_py = (int64_t)(int32_t)rd32(tb + l->ts_rec_depth) + 1;
  } else if (l->ts_rec_limit) {
    int32_t lim = (int32_t)rd32(tb + l->ts_rec_limit), rem = (int32_t)rd32(tb + l->ts_rec_remaining);
    if (lim > 0) max_py = (int64_t)lim - rem + 1;
  }
  return max_py < 1 ? -1 : max_py; /* unreadable or not sensible: no bound */
}

/* A new thread record for the thread of slot (may be NULL). */
static inline bf_smp_thread *thread_add(bf_smp *h, smp_tslot *slot, int64_t tid, uint64_t thread_id,
                                        int holds, int gc) {
  if (h->nthreads == h->cap_threads &&
      bf_vec_grow((void **)&h->threads, &h->cap_threads, h->nthreads + 1, sizeof *h->threads, 16) < 0)
    return NULL;
  bf_smp_thread *t = &h->threads[h->nthreads++];
  memset(t, 0, sizeof *t);
  t->native_tid = tid;
  t->ns_tid = smp_ns_tid(h, tid);
  t->thread_id = thread_id;
  t->name = slot ? slot->name : NULL;
  if (slot) {
    if (slot->py_ident != thread_id || slot->py_gen != h->pn_gen) smp_pynames_resolve(h, slot, thread_id);
    t->py_name = slot->py_name;
    t->py_name_pending = !slot->py_name && slot->py_first_ns + SMP_PYNAME_GRACE_NS >= h->pn_start_ns &&
                         h->now_ns - slot->py_first_ns < SMP_PYNAME_PENDING_MAX_NS;
    if (!slot->py_name) h->pn_unnamed |= 1 | (t->py_name_pending << 1);
  }
  t->cpu_ns = -1;
  t->leaf_opcode = -1;
  t->flags = (holds ? BF_SMP_GIL : 0) | (gc ? BF_SMP_GC : 0);
  return t;
}

/* One thread: thread state ts (its first ts_read bytes tb), innermost frame fa. */
static inline int walk_thread(bf_smp *h, unsigned want, uint64_t ts, const unsigned char *tb, uint64_t fa,
                              int holds, int gc) {
  const smp_layout *l = &h->lay;
  uint64_t thread_id = rd64(tb + l->ts_thread_id);
  /* host tids: the target may live in its own PID namespace (remote.c) */
  int64_t tid = l->ts_native_thread_id ? smp_host_tid(h, (int64_t)rd64(tb + l->ts_native_thread_id)) : 0;
  smp_tslot *slot = thread_slot(h, ts, thread_id, &tid);
  bf_smp_thread *t = thread_add(h, slot, tid, thread_id, holds, gc);
  if (!t) return -ENOMEM;
  size_t first = h->nframes;
  h->torn_here = 0;
  h->leaf_op = -1;
  int exc = (want & BF_SMP_WANT_EXC) && thread_has_exc(h, ts, tb);
  int rc = walk_frames(h, fa, thread_max_py(l, tb), l->ts_base_frame ? rd64(tb + l->ts_base_frame) : 0);
  if (rc < 0) return rc;
  /* as the stack was prefetched and again once it was read: a thread that
   * entered or left a handler meanwhile does not count. The first read and
   * the stack come from the same prefetch, so a sampler preempted before
   * the second cannot pair a handler with code outside one */
  if (exc && thread_has_exc(h, ts, NULL)) t->flags |= BF_SMP_EXC;
  if (h->torn_here) { /* which threads were torn: see smp_thread_off_cpu */
    if (tid > 0 && h->ntorn_tids < (int)(sizeof h->torn_tids / sizeof *h->torn_tids))
      h->torn_tids[h->ntorn_tids++] = tid;
    else
      h->torn_tids_over = 1;
  }
  t->nframes = h->nframes - first;
  t->leaf_opcode = h->leaf_op;
  if (!t->nframes && !tid) { /* a thread state whose OS thread has not started */
    h->nthreads--;
    return 0;
  }
  t->frames = (const bf_smp_frame *)(uintptr_t)first; /* fixed up in smp_walk */
  if (want & (BF_SMP_WANT_STATE | BF_SMP_WANT_CPU_TIME)) smp_thread_status(h, slot, want, t);
  return 0;
}

int smp_walk(bf_smp *h, unsigned want) {
  const smp_layout *l = &h->lay;
  int err = 0;
  walk_begin(h, want);
  /* the interpreter list head barely ever changes: re-read it every 256
   * samples (and after any failed sample) rather than every time */
  if (!h->interp_head || (h->gen & 255) == 0) {
    uint64_t v = 0;
    int rc = smp_read(h, h->runtime_addr + l->rt_interp_head, &v, 8);
    if (rc < 0) return rc;
    h->interp_head = v;
  }
  uint64_t interp = h->interp_head;
  walk_gil g = {0, 0, 0};
  if ((err = runtime_gil(h, &g)) < 0) return err;
  for (int ni = 0; interp && ni < SMP_MAX_INTERPS; ni++) {
    uint64_t ts = 0, next_interp = 0;
    if ((err = interp_state(h, interp, &ts, &next_interp, &g)) < 0) return err;
    h->k_gil_locked = g.locked;
    for (int nt = 0; ts && nt < SMP_MAX_THREADS; nt++) {
      if (++h->walk_steps > SMP_MAX_STEPS) return -EIO;
      const unsigned char *tb = smp_read_hot(h, ts, (size_t)l->ts_read, &err);
      if (!tb) return err;
      uint64_t next = rd64(tb + l->ts_next), fa;
      if ((err = thread_frame(h, tb, &fa)) < 0) return err;
      if (next == ts) return -EIO;
      int holds = g.locked && g.holder == ts;
      uint64_t cur = ts;
      ts = next;
      if ((want & BF_SMP_WANT_GIL_ONLY) && !holds) continue;
      if ((err = walk_thread(h, want, cur, tb, fa, holds, g.gc)) < 0) return err;
    }
    interp = next_interp;
  }
  for (size_t i = 0; i < h->nthreads; i++) h->threads[i].frames = h->frames + (uintptr_t)h->threads[i].frames;
  if ((h->gen & 63) == 0) smp_slots_sweep(h);
  return 0;
}

/* A sample that failed with rc (why: the last torn read's reason): the
 * process exited, or the error for h->err. */
static int sample_failed(bf_smp *h, int rc, const char *why) {
  h->interp_head = 0;
  if (rc == -ESRCH || (h->pid > 0 && kill(h->pid, 0) < 0 && errno == ESRCH)) {
    h->attached = 0;
    return smp_seterr(h, -ESRCH, "process %d exited", h->pid);
  }
  if (rc == -ENOMEM) return smp_seterr(h, rc, "out of memory");
  if (rc == -EPERM) return smp_seterr(h, rc, "lost permission to read process %d", h->pid);
  h->torn_invalid++;
  return smp_seterr(h, -EIO,
                    "stack of process %d changed while it was read, every read in a row (%s); "
                    "sample skipped",
                    h->pid, why ? why : "torn");
}

/* One sample, consistent. A walk that found a torn stack (or failed on a
 * stale pointer) is read again at once, up to SMP_TORN_TRIES reads within
 * SMP_TORN_SPAN_NS, so the retry stays close in time (a read stretched past
 * that by the sampler's own preemption starts the window afresh); a caller
 * or frame read after it returned does not count as torn (walk_frames cuts
 * the stack at its callers instead), so the common tears cost neither a
 * re-read, which would move the sample later, nor a dropped sample. A stack that fails a
 * check can still be real (a trace function, a signal handler or __del__
 * running where no call is, a frame caught between two stores): it is kept
 * when its thread provably did not run while it was read (off CPU before
 * the read, not scheduled in until after it: smp_thread_off_cpu), looked at once
 * a torn walk has read the same twice in a row; or when it read the same
 * SMP_TORN_SAME_READS times over SMP_TORN_SAME_NS (no running thread holds
 * a window of a few instructions that long). Two equal torn reads alone
 * are no proof: a loop tears the same way each time round. A stack torn at
 * its outermost frame is never kept by a recording.
 * BF_SMP_WANT_SETTLED (dump): no cuts; read until two reads in a row agree
 * (a torn stack only counts when its thread was proven off CPU). */
int bf_smp_sample(bf_smp *h, unsigned want, const bf_smp_thread **threads, size_t *n) {
  if (!h->attached) return smp_seterr(h, -EINVAL, "not attached");
  int rc = 0;
  uint64_t last_sig = 0, last_settle = 0;
  int settled = (want & BF_SMP_WANT_SETTLED) != 0, have_settle = 0;
  int max_tries = settled ? SMP_SETTLE_TRIES : SMP_TORN_TRIES;
  int64_t span_ns = settled ? SMP_SETTLE_SPAN_NS : SMP_TORN_SPAN_NS;
  const char *why = NULL;
  int64_t first_ns = 0;
  /* threads seen off CPU before this read, with their schedule-in counts */
  int64_t off_tid[8];
  uint64_t off_pc[8];
  int noff = 0;
  int same = 0; /* torn reads in a row with the same signature, since same_ns */
  int64_t same_ns = 0, last_end_ns = 0;
  int restarted = 0; /* the window was started afresh after a stall (once a tick) */
  for (int tries = 0; tries < max_tries; tries++) {
    /* a retry stays within span_ns of the first read (a sampler preempted
     * meanwhile would move the sample elsewhere; but see the stall below) */
    if (tries && h->now_ns - first_ns > span_ns) break;
    if (tries) h->torn_retries++;
    rc = smp_walk(h, want);
    if (!tries) first_ns = h->now_ns;
    int ok = rc == 0 && !h->torn;
    if (rc == 0 && h->torn && noff && !h->torn_tids_over && (settled || !h->torn_root)) {
      int frozen = 1; /* every torn thread stayed off CPU throughout this read */
      for (int i = 0; i < h->ntorn_tids && frozen; i++) {
        int k = 0;
        uint64_t pc;
        while (k < noff && off_tid[k] != h->torn_tids[i]) k++;
        frozen = k < noff && smp_thread_off_cpu(h, off_tid[k], &pc) >= 0 && pc == off_pc[k];
      }
      if (frozen) h->torn_stable++;
      ok = frozen;
    }
    if (!ok) noff = 0; /* still off CPU since then: the next read may use it too */
    if (ok && !settled) break;
    /* to be read again. A read that took longer than the whole window, or
     * began that long after the last one ended, had the sampler itself
     * preempted: what it saw is spread over the stall, and a stall before
     * the first read would not have cost the tick either, so the window
     * starts afresh after it. Once a tick: a walk that is slow by itself
     * (many threads' /proc reads) must not earn max_tries slow reads */
    int64_t end_ns = bf_mono_ns();
    if (!restarted && (end_ns - h->now_ns > span_ns || (tries && h->now_ns - last_end_ns > span_ns))) {
      first_ns = end_ns;
      restarted = 1;
      h->torn_stalls++;
    }
    last_end_ns = end_ns;
    if (ok) {
      /* settled: this read and the last agree, so the stack held still
       * from the end of one to the start of the other */
      uint64_t st = read_sig(h, h->settle_acc, 1);
      if (have_settle && st == last_settle) break;
      have_settle = 1;
      last_settle = st;
      last_sig = 0;
      rc = -EAGAIN;
      why = "it never held still for two reads in a row";
      continue;
    }
    have_settle = 0;
    uint64_t sig = rc == 0 ? read_sig(h, h->walk_acc, 0) : 0;
    if (rc == 0 && tries && sig == last_sig) {
      same++;
    } else {
      same = 1;
      same_ns = h->now_ns;
    }
    if (rc == 0 && !settled && !h->torn_root && same >= SMP_TORN_SAME_READS &&
        h->now_ns - same_ns >= SMP_TORN_SAME_NS) {
      /* the same torn read, again and again for tens of microseconds: a
       * thread stopped (waiting for a CPU) where no check expects it, not
       * one running through a window of a few instructions */
      h->torn_stable++;
      break;
    }
    if (rc == 0 && same == 2 && !h->torn_tids_over) {
      /* read the same torn stack twice: is its thread stopped? */
      for (int i = 0; i < h->ntorn_tids; i++) {
        off_tid[noff] = h->torn_tids[i];
        if (smp_thread_off_cpu(h, off_tid[noff], &off_pc[noff]) != 1) {
          noff = 0;
          break;
        }
        noff++;
      }
    }
    if (rc == 0) {
      why = h->torn_why;
      last_sig = sig;
      rc = -EAGAIN;
      continue;
    }
    why = "a read failed on a stale pointer";
    last_sig = 0;
    h->interp_head = 0;
    if (rc != -EIO) break;
  }
  if (rc == -EAGAIN) rc = -EIO;
  if (rc < 0) return sample_failed(h, rc, why);
  h->torn_cut += h->cut_here;
  *threads = h->threads;
  *n = h->nthreads;
  return 0;
}

/* tasks.c: the (function, line) of a frame running code at instr (the value
 * of a frame's instruction field), through the code cache. */
int smp_code_frame(bf_smp *h, uint64_t code, uint64_t instr, bf_smp_frame *out) {
  const smp_layout *l = &h->lay;
  int err = 0;
  if (l->executable_tagged) code &= ~(uint64_t)7;
  smp_code *c = code_find(h, code);
  if (!c || (c->checked_gen != h->gen && h->now_ns - c->checked_ns >= SMP_CODE_TRUST_NS)) {
    const unsigned char *cw = smp_read_cold(h, code + l->co_fp_lo, (size_t)l->co_fp_len, &err);
    if (!cw) return err;
    if (!(c = code_get(h, code, code_fp(l, cw), &err))) return err == -EINVAL ? -EIO : err;
    c->checked_gen = h->gen;
    c->checked_ns = h->now_ns;
  }
  *out = (bf_smp_frame){&c->pub, code_line(l, c, code, instr), 0};
  return 0;
}
