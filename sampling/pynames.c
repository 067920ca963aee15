/* pynames.c — Python thread names from the target: each interpreter's
 * sys.modules["threading"]._active (ident -> Thread) and each Thread's _name,
 * through small bounded readers for dicts, ints, modules and instance
 * attributes. Run on attach and then rarely, never per sample; any doubt, no name.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "clock.h"
#include "smp_int.h"


/* Every read of a lookup goes through here: one budget bounds its work. */
static int pn_read(bf_smp *h, uint64_t addr, void *dst, size_t len) {
  if (h->pn_budget <= 0 || !addr) return -EIO;
  h->pn_budget--;
  return smp_read(h, addr, dst, len);
}

/* OUT: *v (0 on failure). */
static int pn_read64(bf_smp *h, uint64_t addr, uint64_t *v) {
  unsigned char b[8];
  int rc = pn_read(h, addr, b, 8);
  *v = rc == 0 ? rd64(b) : 0;
  return rc < 0 ? rc : 0;
}

/* The object at addr has type want (want 0: unchecked, fake memory only). */
static int type_is(bf_smp *h, uint64_t addr, uint64_t want) {
  uint64_t t;
  if (!want) return 1;
  return pn_read64(h, addr + h->lay.ob_type, &t) == 0 && t == want;
}

/* Return non-zero to stop the walk. */
typedef smp_pn_visit pn_visit;

#define PN_CHUNK 128

/* While threads have names, they are looked up again this often: a thread
 * renamed (Thread.name = ...) shows its new name within this time. */
#define PN_RENAME_NS 2000000000LL

/* Where a dict keys object's entries are: OUT: *entries (address), *esize,
 * *ekey, *eval (entry size, key / value offsets), *nent (entries used). */
static int keys_geom(bf_smp *h, uint64_t keys, uint64_t *entries, uint64_t *esize_out,
                     uint64_t *ekey_out, uint64_t *eval_out, int64_t *nent_out) {
  const struct smp_names_layout *n = &h->lay.nm;
  unsigned char hdr[64];
  if (!keys || n->dk_indices > sizeof hdr || n->dk_nentries + 8 > n->dk_indices) return -EIO;
  if (pn_read(h, keys, hdr, (size_t)n->dk_indices) < 0) return -EIO;
  int64_t nent = (int64_t)rd64(hdr + n->dk_nentries);
  uint64_t size, index_bytes;
  uint64_t esize = n->dk_entry_size, ekey = n->dk_entry_key, eval = n->dk_entry_value;
  if (n->dk_log2) {
    unsigned lsz = hdr[n->dk_log2_size], lib = hdr[n->dk_log2_index_bytes], kind = hdr[n->dk_kind];
    if (lsz < 3 || lsz > 30 || lib < lsz || lib > lsz + 3 || kind > 2) return -EIO;
    size = 1ull << lsz;
    index_bytes = 1ull << lib;
    if (kind != 0) { /* DICT_KEYS_UNICODE / SPLIT: PyDictUnicodeEntry */
      esize = n->dk_uentry_size;
      ekey = n->dk_uentry_key;
      eval = n->dk_uentry_value;
    }
  } else {
    size = rd64(hdr + n->dk_size);
    if (size < 8 || size > (1ull << 30) || (size & (size - 1))) return -EIO;
    index_bytes = size * (size <= 0xff ? 1 : size <= 0xffff ? 2 : 4);
  }
  if (nent < 0 || (uint64_t)nent > size || !esize || esize > 32 || ekey + 8 > esize ||
      eval + 8 > esize)
    return -EIO;
  *entries = keys + n->dk_indices + index_bytes;
  *esize_out = esize;
  *ekey_out = ekey;
  *eval_out = eval;
  *nent_out = nent;
  return 0;
}

/* Visit the live entries of a dict keys object, in insertion order; values
 * come from the split-table array values (0: from the entries) holding at
 * most max_values slots. Returns 1 if fn stopped the walk, 0, or -EIO. */
static int keys_each(bf_smp *h, uint64_t keys, uint64_t values, uint64_t max_values, pn_visit fn,
                     void *ud) {
  uint64_t entries, esize, ekey, eval;
  int64_t nent;
  if (keys_geom(h, keys, &entries, &esize, &ekey, &eval, &nent) < 0) return -EIO;
  if (nent > SMP_DICT_MAX) nent = SMP_DICT_MAX;
  if (values && (uint64_t)nent > max_values) nent = (int64_t)max_values;
  unsigned char eb[PN_CHUNK * 32], vb[PN_CHUNK * 8];
  for (int64_t i = 0; i < nent; i += PN_CHUNK) {
    size_t c = (size_t)(nent - i < PN_CHUNK ? nent - i : PN_CHUNK);
    if (pn_read(h, entries + (uint64_t)i * esize, eb, c * esize) < 0) return -EIO;
    if (values && pn_read(h, values + (uint64_t)i * 8, vb, c * 8) < 0) return -EIO;
    for (size_t j = 0; j < c; j++) {
      uint64_t k = rd64(eb + j * esize + ekey);
      uint64_t v = values ? rd64(vb + j * 8) : rd64(eb + j * esize + eval);
      if (!k || !v) continue; /* unused or deleted */
      if (fn(h, k, v, ud)) return 1;
    }
  }
  return 0;
}

/* Visit a dict object's entries (combined or split table). */
static int dict_each(bf_smp *h, uint64_t dict, pn_visit fn, void *ud) {
  const struct smp_names_layout *n = &h->lay.nm;
  unsigned char d[64];
  if (!dict || n->dict_size > sizeof d || n->dict_keys + 8 > n->dict_size ||
      n->dict_values + 8 > n->dict_size)
    return -EIO;
  if (pn_read(h, dict, d, (size_t)n->dict_size) < 0) return -EIO;
  if (h->dict_type_addr && rd64(d + h->lay.ob_type) != h->dict_type_addr) return -EIO;
  uint64_t values = rd64(d + n->dict_values);
  return keys_each(h, rd64(d + n->dict_keys), values ? values + n->dv_values : 0, SMP_DICT_MAX,
                   fn, ud);
}

/* addr is a compact ASCII str equal to s (short s only). */
static int str_is(bf_smp *h, uint64_t addr, const char *s) {
  const smp_layout *l = &h->lay;
  unsigned char b[160];
  size_t len = strlen(s), need = (size_t)l->uni_ascii_size + len;
  if (need > sizeof b || l->uni_length + 8 > l->uni_ascii_size ||
      l->uni_state + 4 > l->uni_ascii_size)
    return 0;
  if (pn_read(h, addr, b, need) < 0) return 0;
  uint32_t st = rd32(b + l->uni_state);
  unsigned kind = (st >> 2) & 7, compact = (st >> 5) & 1, ascii = (st >> 6) & 1;
  return rd64(b + l->uni_length) == len && kind == 1 && compact && ascii &&
         memcmp(b + l->uni_ascii_size, s, len) == 0;
}

/* A non-negative int below 2**64 (a thread ident). OUT: *out. */
static int long_read(bf_smp *h, uint64_t addr, uint64_t *out) {
  const struct smp_names_layout *n = &h->lay.nm;
  unsigned char b[64];
  size_t need = (size_t)n->long_digit + 4; /* one digit is always allocated */
  if (need > sizeof b || n->long_size + 8 > n->long_digit) return -EIO;
  if (pn_read(h, addr, b, need) < 0) return -EIO;
  if (h->long_type_addr && rd64(b + h->lay.ob_type) != h->long_type_addr) return -EIO;
  uint64_t sz = rd64(b + n->long_size), ndig;
  if (n->long_tagged) {
    if ((sz & 3) == 1) { /* zero */
      *out = 0;
      return 0;
    }
    if (sz & 3) return -EIO; /* negative */
    ndig = sz >> 3;
  } else {
    if ((int64_t)sz < 0) return -EIO;
    ndig = sz;
  }
  if (ndig > 3) return -EIO;
  unsigned char dg[12];
  memcpy(dg, b + n->long_digit, 4);
  if (ndig > 1 && pn_read(h, addr + n->long_digit + 4, dg + 4, (size_t)(ndig - 1) * 4) < 0)
    return -EIO;
  uint64_t v = 0;
  for (uint64_t i = 0; i < ndig; i++) {
    uint32_t d = rd32(dg + 4 * i);
    if (d >> 30 || (i == 2 && d > 15)) return -EIO; /* 30-bit digits; 64 bits at most */
    v |= (uint64_t)d << (30 * i);
  }
  *out = v;
  return 0;
}

typedef struct find_ctx {
  const char *name;
  uint64_t value;
} find_ctx;

static int find_visit(bf_smp *h, uint64_t key, uint64_t value, void *ud) {
  find_ctx *f = ud;
  if (!str_is(h, key, f->name)) return 0;
  f->value = value;
  return 1;
}

/* dict[name] for a str key. OUT: *value. */
static int dict_get(bf_smp *h, uint64_t dict, const char *name, uint64_t *value) {
  find_ctx f = {name, 0};
  if (dict_each(h, dict, find_visit, &f) != 1) return -ENOENT;
  *value = f.value;
  return 0;
}

/* Visit the object's own attributes (no type lookup, no descriptors):
 * inline/split values or its instance dict. Returns 1 if fn stopped the
 * walk, 0, -ENOENT (no attributes) or -EIO. */
static int attr_each(bf_smp *h, uint64_t obj, pn_visit fn, void *ud) {
  const struct smp_names_layout *n = &h->lay.nm;
  unsigned char tb[1024];
  uint64_t type;
  if (pn_read64(h, obj + h->lay.ob_type, &type) < 0 || !type) return -EIO;
  size_t tl = (size_t)n->ht_cached_keys + 8;
  if (tl > sizeof tb || n->tp_flags + 8 > tl || n->tp_dictoffset + 8 > tl ||
      n->tp_basicsize + 8 > tl)
    return -EIO;
  if (pn_read(h, type, tb, tl) < 0) return -EIO;
  uint64_t flags = rd64(tb + n->tp_flags);
  int64_t dictoffset = (int64_t)rd64(tb + n->tp_dictoffset);
  uint64_t cached = (flags & n->tpf_heaptype) ? rd64(tb + n->ht_cached_keys) : 0;
  uint64_t dict = 0, p;
  int managed = n->tpf_managed_dict && (flags & n->tpf_managed_dict);
  switch (n->attr_mode) {
    case SMP_ATTR_VALUES_PTR:
      if (!managed) break;
      if (pn_read64(h, obj + (uint64_t)n->obj_values_ptr, &p) < 0) return -EIO;
      if (p) return keys_each(h, cached, p + n->dv_values, SMP_DICT_MAX, fn, ud);
      if (pn_read64(h, obj + (uint64_t)n->obj_managed_dict, &dict) < 0) return -EIO;
      break;
    case SMP_ATTR_DORV:
      if (!managed) break;
      if (pn_read64(h, obj + (uint64_t)n->obj_managed_dict, &p) < 0) return -EIO;
      if (p & 1) /* tagged: values pointer - 1 */
        return keys_each(h, cached, p + 1 + n->dv_values, SMP_DICT_MAX, fn, ud);
      dict = p;
      break;
    case SMP_ATTR_INLINE:
      if (n->tpf_inline_values && (flags & n->tpf_inline_values)) {
        unsigned char vh[8];
        uint64_t vals = obj + n->obj_inline_values;
        if (n->dv_values > sizeof vh || n->dv_valid >= n->dv_values ||
            n->dv_capacity >= n->dv_values)
          return -EIO;
        if (pn_read(h, vals, vh, (size_t)n->dv_values) < 0) return -EIO;
        if (vh[n->dv_valid])
          return keys_each(h, cached, vals + n->dv_values, vh[n->dv_capacity], fn, ud);
      }
      if (!managed) break;
      if (pn_read64(h, obj + (uint64_t)n->obj_managed_dict, &dict) < 0) return -EIO;
      break;
    default:
      break;
  }
  if (!dict && !managed && dictoffset > 0 && dictoffset <= 4096 &&
      pn_read64(h, obj + (uint64_t)dictoffset, &dict) < 0)
    return -EIO;
  if (!dict) return -ENOENT;
  return dict_each(h, dict, fn, ud);
}

/* Instance attribute obj.name from the object's own attributes (enough for
 * Thread._name). OUT: *value. */
static int attr_get(bf_smp *h, uint64_t obj, const char *name, uint64_t *value) {
  find_ctx f = {name, 0};
  if (attr_each(h, obj, find_visit, &f) != 1) return -ENOENT;
  *value = f.value;
  return 0;
}

/* threading._active of one interpreter, or 0. */
static uint64_t find_active(bf_smp *h, uint64_t interp) {
  const struct smp_names_layout *n = &h->lay.nm;
  uint64_t modules, mod, md, active;
  if (pn_read64(h, interp + n->is_modules, &modules) < 0 || !modules) return 0;
  if (dict_get(h, modules, "threading", &mod) < 0) return 0;
  if (!type_is(h, mod, h->module_type_addr)) return 0;
  if (pn_read64(h, mod + n->md_dict, &md) < 0 || !md) return 0;
  if (dict_get(h, md, "_active", &active) < 0) return 0;
  return type_is(h, active, h->dict_type_addr) ? active : 0;
}

/* names kept per lookup: as many as one _active dict is scanned for (the
 * table grows; SMP_PYNAME_MAX was a fixed 1,024 and left the rest unnamed) */
#define PN_TABLE_MAX SMP_DICT_MAX
/* remote reads for one lookup: about 11 per name, so 16 each for a full table */
#define PN_REFRESH_BUDGET (16 * PN_TABLE_MAX > SMP_PYNAME_BUDGET ? 16 * PN_TABLE_MAX : SMP_PYNAME_BUDGET)

typedef struct collect_ctx {
  smp_pyname *tab;
  size_t n, cap;
} collect_ctx;

/* Keep at most SMP_PYNAME_LEN bytes of s, cut on a character boundary. */
static void clip_utf8(char *s) {
  size_t len = strlen(s);
  if (len <= SMP_PYNAME_LEN) return;
  len = SMP_PYNAME_LEN;
  while (len && ((unsigned char)s[len] & 0xc0) == 0x80) len--;
  s[len] = 0;
}

static int collect_visit(bf_smp *h, uint64_t key, uint64_t value, void *ud) {
  collect_ctx *c = ud;
  uint64_t ident, nm;
  char *s = NULL;
  if (c->n >= PN_TABLE_MAX) return 1;
  if (c->n == c->cap) {
    size_t cap = c->cap * 2 > PN_TABLE_MAX ? PN_TABLE_MAX : c->cap * 2;
    smp_pyname *t = realloc(c->tab, cap * sizeof *t);
    if (!t) return 1;
    c->tab = t;
    c->cap = cap;
  }
  if (h->pn_budget <= 0) return 1;
  if (long_read(h, key, &ident) < 0 || !ident) return 0;
  for (size_t i = 0; i < c->n; i++)
    if (c->tab[i].ident == ident) return 0; /* another interpreter named it first */
  if (attr_get(h, value, "_name", &nm) < 0) return 0;
  if (h->pn_budget <= 0 || smp_read_str(h, nm, &s) < 0) return 0;
  h->pn_budget--;
  clip_utf8(s);
  c->tab[c->n].ident = ident;
  c->tab[c->n].name = s;
  c->n++;
  return 0;
}

static void table_free(smp_pyname *t, size_t n) {
  for (size_t i = 0; i < n; i++) free(t[i].name);
  free(t);
}

void smp_pynames_clear(bf_smp *h) {
  table_free(h->pn, h->npn);
  h->pn = NULL;
  h->npn = 0;
  h->pn_gen++;
  h->pn_last_ns = h->pn_start_ns = 0;
  h->pn_cover_next = h->pn_unnamed = 0;
  memset(h->pn_interp, 0, sizeof h->pn_interp);
  memset(h->pn_active, 0, sizeof h->pn_active);
}


void smp_pynames_refresh(bf_smp *h, int64_t start_ns) {
  const smp_layout *l = &h->lay;
  collect_ctx c = {NULL, 0, SMP_PYNAME_MAX};
  int64_t old_start = h->pn_start_ns;
  h->pn_last_ns = bf_mono_ns();
  h->pn_start_ns = start_ns;
  h->pn_gen++;
  h->pn_lookups++;
  /* on a real target the dict type check is what keeps garbage out */
  if (!l->nm.minor || (!h->dict_type_addr && h->pid > 0) || !h->runtime_addr) goto out;
  c.tab = calloc(SMP_PYNAME_MAX, sizeof *c.tab);
  if (!c.tab) goto out;
  h->pn_budget = PN_REFRESH_BUDGET;
  uint64_t interp = 0;
  if (pn_read64(h, h->runtime_addr + l->rt_interp_head, &interp) < 0) goto out;
  for (size_t ni = 0; interp && ni < sizeof h->pn_active / sizeof h->pn_active[0]; ni++) {
    /* the _active dict lives as long as the threading module: keep its
     * address, re-found when it stops looking like a dict and every 32nd
     * lookup */
    uint64_t active = h->pn_interp[ni] == interp && (h->pn_lookups & 31) ? h->pn_active[ni] : 0;
    int rc = active ? dict_each(h, active, collect_visit, &c) : -EIO;
    if (rc < 0 && (active = find_active(h, interp)) != 0)
      rc = dict_each(h, active, collect_visit, &c);
    h->pn_interp[ni] = interp;
    h->pn_active[ni] = rc < 0 ? 0 : active;
    uint64_t next;
    if (pn_read64(h, interp + l->is_next, &next) < 0 || next == interp) break;
    interp = next;
  }
out:
  /* no name at all (threading not imported yet, or _active read torn):
   * this lookup does not count, threads waiting for a name keep waiting */
  if (!c.n) h->pn_start_ns = old_start;
  table_free(h->pn, h->npn);
  h->pn = c.tab;
  h->npn = c.n;
}

void smp_pynames_attach(bf_smp *h) {
  smp_pynames_clear(h);
  smp_pynames_refresh(h, 0);
  /* a launched program is attached before it imports threading: its first
   * threads wait for a lookup that finds names */
  h->pn_cover_next = h->npn > 0;
}

void smp_pynames_tick(bf_smp *h) {
  if (h->pn_cover_next) { /* threads of the first sample were there at attach */
    h->pn_start_ns = h->now_ns + SMP_PYNAME_GRACE_NS + 1;
    h->pn_cover_next = 0;
  }
  int64_t since = h->now_ns - h->pn_last_ns;
  if (((h->pn_unnamed & 2) && since >= SMP_PYNAME_EVERY_NS) ||
      (h->pn_unnamed && since >= SMP_PYNAME_RETRY_NS) || (h->npn && since >= PN_RENAME_NS))
    smp_pynames_refresh(h, h->now_ns);
  h->pn_unnamed = 0;
}

void smp_pynames_resolve(bf_smp *h, smp_tslot *s, uint64_t ident) {
  if (s->py_ident != ident || !s->py_first_ns) {
    free(s->py_name);
    s->py_name = NULL;
    s->py_ident = ident;
    s->py_first_ns = h->now_ns;
  }
  s->py_gen = h->pn_gen;
  for (size_t i = 0; i < h->npn; i++) {
    if (h->pn[i].ident != ident) continue;
    /* a thread gone from _active keeps its last name; a renamed one changes */
    if (s->py_name && strcmp(s->py_name, h->pn[i].name) == 0) return;
    char *c = strdup(h->pn[i].name);
    if (!c) return;
    free(s->py_name);
    s->py_name = c;
    return;
  }
}

/* tasks.c reads the asyncio registry with the same bounded readers; each
 * call runs on a fresh budget of SMP_PYNAME_BUDGET reads. */
int smp_pn_dict_get(bf_smp *h, uint64_t dict, const char *name, uint64_t *value) {
  h->pn_budget = SMP_PYNAME_BUDGET;
  return dict_get(h, dict, name, value);
}
int smp_pn_attr_get(bf_smp *h, uint64_t obj, const char *name, uint64_t *value) {
  h->pn_budget = SMP_PYNAME_BUDGET;
  return attr_get(h, obj, name, value);
}
int smp_pn_attr_each(bf_smp *h, uint64_t obj, smp_pn_visit fn, void *ud) {
  h->pn_budget = SMP_PYNAME_BUDGET;
  return attr_each(h, obj, fn, ud);
}
int smp_pn_str_is(bf_smp *h, uint64_t addr, const char *s) { return str_is(h, addr, s); }
int smp_pn_long_read(bf_smp *h, uint64_t addr, uint64_t *out) {
  h->pn_budget = SMP_PYNAME_BUDGET;
  return long_read(h, addr, out);
}

int smp_pn_keys_index(bf_smp *h, uint64_t keys, const char *const *names, int n, int *idx,
                      int max_entries, int64_t *nentries) {
  uint64_t entries, esize, ekey, eval;
  int64_t nent;
  unsigned char eb[PN_CHUNK * 32];
  h->pn_budget = SMP_PYNAME_BUDGET;
  for (int f = 0; f < n; f++) idx[f] = -1;
  if (keys_geom(h, keys, &entries, &esize, &ekey, &eval, &nent) < 0 || nent > max_entries ||
      nent > PN_CHUNK)
    return -EIO;
  if (nent && pn_read(h, entries, eb, (size_t)nent * esize) < 0) return -EIO;
  for (int64_t i = 0; i < nent; i++) {
    uint64_t k = rd64(eb + (size_t)i * esize + ekey);
    for (int f = 0; k && f < n; f++)
      if (idx[f] < 0 && str_is(h, k, names[f])) {
        idx[f] = (int)i;
        break;
      }
  }
  *nentries = nent;
  return 0;
}
