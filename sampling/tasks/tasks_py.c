/* tasks_py.c — asyncio's pure-Python Task (asyncio.tasks._PyTask, or the
 * class asyncio.Task is when the C accelerator is missing, or a subclass):
 * its _coro, _fut_waiter, _name and _state read from the instance's own
 * attributes (dict or inline values) with pynames.c's bounded readers. Key
 * objects are interned names: each is compared as text once, then by
 * address. Every value is type-checked before tasks.c follows it.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "tasks_int.h"

#define PY_MAX_ATTRS 64   /* attributes visited per Task (a Task has ~9) */
#define PY_MAX_NEW_KEYS 16 /* keys compared as text per Task read */
#define PY_KEYS 64        /* key objects remembered */
#define PY_STATES 8       /* _state objects remembered */

enum { PY_CORO, PY_WAITER, PY_NAME, PY_STATE, PY_NFIELDS };
static const char *const py_field[PY_NFIELDS] = {"_coro", "_fut_waiter", "_name", "_state"};

struct tk_py {
  uint64_t keys[PY_KEYS]; /* key objects seen */
  signed char key_field[PY_KEYS]; /* their field, or -1: none of ours */
  size_t nkeys;
  uint64_t states[PY_STATES]; /* _state objects seen */
  unsigned char pending[PY_STATES];
  size_t nstates;
  uint64_t none; /* Py_None, once seen */
  struct py_cache *cache; /* the batched reader's layouts (below), made on first use */
};

tk_py *tk_py_new(void) { return calloc(1, sizeof(tk_py)); }

void tk_py_free(tk_py *py) {
  if (py) free(py->cache);
  free(py);
}

typedef struct py_visit {
  tk_py *py;
  uint64_t value[PY_NFIELDS];
  int seen, new_keys, found;
} py_visit;

static int visit(bf_smp *h, uint64_t key, uint64_t value, void *ud) {
  py_visit *v = ud;
  tk_py *py = v->py;
  if (++v->seen > PY_MAX_ATTRS) return 1;
  int f = -2;
  for (size_t i = 0; i < py->nkeys; i++)
    if (py->keys[i] == key) {
      f = py->key_field[i];
      break;
    }
  if (f == -2) { /* a key object not seen yet: compared as text, a few per Task */
    if (++v->new_keys > PY_MAX_NEW_KEYS) return 0;
    f = -1;
    for (int i = 0; i < PY_NFIELDS && f < 0; i++)
      if (smp_pn_str_is(h, key, py_field[i])) f = i;
    if (py->nkeys < PY_KEYS) {
      py->keys[py->nkeys] = key;
      py->key_field[py->nkeys++] = (signed char)f;
    }
  }
  if (f >= 0 && !v->value[f]) {
    v->value[f] = value;
    if (++v->found == PY_NFIELDS) return 1;
  }
  return 0;
}

/* _state is one of asyncio.base_futures' three interned strings. */
static int state_pending(bf_smp_tasks *tk, tk_py *py, uint64_t s) {
  for (size_t i = 0; i < py->nstates; i++)
    if (py->states[i] == s) return py->pending[i];
  if (tk_obj_kind(tk, s) != TK_STR) return -EIO;
  int pending = smp_pn_str_is(tk_sampler(tk), s, "PENDING");
  if (!pending && !smp_pn_str_is(tk_sampler(tk), s, "FINISHED") &&
      !smp_pn_str_is(tk_sampler(tk), s, "CANCELLED"))
    return -EIO;
  if (py->nstates < PY_STATES) {
    py->states[py->nstates] = s;
    py->pending[py->nstates++] = (unsigned char)pending;
  }
  return pending;
}

int tk_py_read(bf_smp_tasks *tk, tk_py *py, uint64_t task, tk_py_task *out) {
  bf_smp *h = tk_sampler(tk);
  if (!h->lay.nm.minor) return -ENOTSUP;
  if (!py) return -EIO;
  py_visit v;
  memset(&v, 0, sizeof v);
  v.py = py;
  if (smp_pn_attr_each(h, task, visit, &v) < 0) return -EIO;
  /* a Task sets _coro, _fut_waiter and _name in __init__; _state only once
   * done (until then the class attribute, PENDING) */
  if (!v.value[PY_CORO] || !v.value[PY_WAITER] || !v.value[PY_NAME]) return -EIO;
  if (v.value[PY_STATE]) {
    int p = state_pending(tk, py, v.value[PY_STATE]);
    if (p <= 0) return p;
  }
  int k = tk_obj_kind(tk, v.value[PY_CORO]);
  if (k != TK_CORO && k != TK_GEN) return -EIO; /* a done Task holds None */
  uint64_t w = v.value[PY_WAITER];
  if (w == py->none) {
    w = 0;
  } else if (tk_obj_kind(tk, w) == TK_NONE) {
    py->none = w;
    w = 0;
  }
  out->coro = v.value[PY_CORO];
  out->waiter = w;
  out->name_obj = v.value[PY_NAME];
  return 1;
}

/* ---- many Tasks at once ----
 * A Task's attributes sit in values that go with a dict keys object shared
 * by the instances of its class (split table, 3.8-3.10; the class's cached
 * keys with the values inline or beside the object, 3.11+). Which entry of
 * those keys holds _coro, _fut_waiter, _name and _state is learned once per
 * keys object (compared as text) and checked again on every call by its
 * entry count (keys are only ever appended); each Task then costs a few
 * bytes in each of two or three batched reads: the object (its values, or
 * where they are), its dict when it has one, its values. */
#define PY_TYPES 8      /* Task classes remembered */
#define PY_KEYSETS 8    /* shared keys objects remembered */
#define PY_MAX_INDEX 63 /* entries of a shared keys object looked at */
#define PY_SLOW_MAX 128 /* Tasks read attribute by attribute per call */
#define PY_CORO_TYPES 16 /* types of coroutines and waiters remembered */

typedef struct py_type {
  uint64_t type, keys, flags, basicsize;
  int64_t dictoffset;
  unsigned gen; /* the call that read it last */
  int ok;
} py_type;

typedef struct py_keys {
  uint64_t keys;
  int64_t nentries;
  int idx[PY_NFIELDS];
  int maxidx; /* highest idx[] (-1: none) */
  unsigned gen;
  int ok;
} py_keys;

typedef struct py_cache {
  py_type types[PY_TYPES];
  size_t ntypes, next_type;
  py_keys keys[PY_KEYSETS];
  size_t nkeys, next_keys;
  uint64_t coro_types[PY_CORO_TYPES];
  unsigned char coro_kind[PY_CORO_TYPES];
  size_t ncoro;
  unsigned gen;
} py_cache;

static py_cache *cache_of(tk_py *py) {
  if (py && !py->cache) py->cache = calloc(1, sizeof *py->cache);
  return py ? py->cache : NULL;
}

/* The class at type, read once per call. NULL: not readable. */
static py_type *type_get(bf_smp *h, py_cache *c, uint64_t type) {
  const struct smp_names_layout *n = &h->lay.nm;
  py_type *t = NULL;
  for (size_t i = 0; i < c->ntypes && !t; i++)
    if (c->types[i].type == type) t = &c->types[i];
  if (!t) {
    t = &c->types[c->ntypes < PY_TYPES ? c->ntypes++ : c->next_type++ % PY_TYPES];
    memset(t, 0, sizeof *t);
    t->type = type;
  }
  if (t->gen == c->gen) return t->ok ? t : NULL;
  t->gen = c->gen;
  t->ok = 0;
  unsigned char tb[1024];
  size_t tl = (size_t)n->ht_cached_keys + 8;
  if (!type || tl > sizeof tb || n->tp_flags + 8 > tl || n->tp_dictoffset + 8 > tl ||
      n->tp_basicsize + 8 > tl || smp_read(h, type, tb, tl) < 0)
    return NULL;
  t->flags = rd64(tb + n->tp_flags);
  t->dictoffset = (int64_t)rd64(tb + n->tp_dictoffset);
  t->basicsize = rd64(tb + n->tp_basicsize);
  t->keys = (t->flags & n->tpf_heaptype) ? rd64(tb + n->ht_cached_keys) : 0;
  if (t->basicsize < 16 || t->basicsize > 4096) return NULL;
  t->ok = 1;
  return t;
}

/* The field entries of shared keys object keys, checked once per call. */
static py_keys *keys_get(bf_smp *h, py_cache *c, uint64_t keys) {
  py_keys *k = NULL;
  if (!keys) return NULL;
  for (size_t i = 0; i < c->nkeys && !k; i++)
    if (c->keys[i].keys == keys) k = &c->keys[i];
  if (!k) {
    k = &c->keys[c->nkeys < PY_KEYSETS ? c->nkeys++ : c->next_keys++ % PY_KEYSETS];
    memset(k, 0, sizeof *k);
    k->keys = keys;
    k->nentries = -1;
  }
  if (k->gen == c->gen) return k->ok ? k : NULL;
  k->gen = c->gen;
  uint64_t ne = 0;
  if (smp_read(h, keys + h->lay.nm.dk_nentries, &ne, 8) < 0) return (k->ok = 0), NULL;
  if ((int64_t)ne == k->nentries && k->ok) return k;
  k->ok = 0;
  if (smp_pn_keys_index(h, keys, py_field, PY_NFIELDS, k->idx, PY_MAX_INDEX + 1, &k->nentries) < 0)
    return NULL;
  k->maxidx = -1;
  for (int f = 0; f < PY_NFIELDS; f++)
    if (k->idx[f] > k->maxidx) k->maxidx = k->idx[f];
  /* a Task sets these three in __init__ */
  k->ok = k->idx[PY_CORO] >= 0 && k->idx[PY_WAITER] >= 0 && k->idx[PY_NAME] >= 0;
  return k->ok ? k : NULL;
}

/* Kind of obj, whose type is type (read in a batch), cached per type. */
static int coro_kind(bf_smp_tasks *tk, py_cache *c, uint64_t coro, uint64_t type) {
  for (size_t i = 0; i < c->ncoro; i++)
    if (c->coro_types[i] == type) return c->coro_kind[i];
  int k = tk_obj_kind(tk, coro);
  uint64_t t2 = 0;
  /* remembered only when the type read again is the one batched */
  if (c->ncoro < PY_CORO_TYPES && smp_read(tk_sampler(tk), coro + tk_sampler(tk)->lay.ob_type, &t2, 8) == 0 &&
      t2 == type) {
    c->coro_types[c->ncoro] = type;
    c->coro_kind[c->ncoro++] = (unsigned char)k;
  }
  return k;
}

/* One tk_py_read_many call: its inputs, per-Task scratch and result. a[]
 * holds the addresses of the level being read (2n: the last level reads
 * coroutine and waiter side by side). */
typedef struct py_batch {
  bf_smp_tasks *tk;
  tk_py *py;
  bf_smp *h;
  const struct smp_names_layout *nm;
  py_cache *c;
  int mode;
  const uint64_t *addrs;
  size_t n;
  tk_py_task *out;
  int *rc;
  uint64_t *a, *vals, *st;
  py_keys **kp;
  unsigned char *slow;
  int64_t lo, hi; /* the object's bytes read: [obj + lo, obj + hi) */
  int ret;        /* the call's result once a step stops it */
} py_batch;

/* The object's bytes: [obj + lo, obj + hi) hold its type, and its values,
 * or where they are, for every class known (the first Task's class is
 * learned before). -1 (b->ret kept) when the layout cannot be read so. */
static int py_span(py_batch *b) {
  bf_smp *h = b->h;
  const struct smp_names_layout *nm = b->nm;
  py_cache *c = b->c;
  int mode = b->mode;
  int64_t lo = h->lay.ob_type, hi = h->lay.ob_type + 8;
  if (mode == SMP_ATTR_VALUES_PTR) lo = nm->obj_values_ptr < nm->obj_managed_dict ? nm->obj_values_ptr : nm->obj_managed_dict;
  if (mode == SMP_ATTR_DORV || mode == SMP_ATTR_INLINE) lo = nm->obj_managed_dict;
  if (lo > (int64_t)h->lay.ob_type || lo < -64) return -1;
  if (!c->ntypes) {
    uint64_t t0 = 0;
    if (smp_read(h, b->addrs[0] + h->lay.ob_type, &t0, 8) == 0) (void)type_get(h, c, t0);
  }
  for (size_t j = 0; j < c->ntypes; j++) {
    py_type *t = type_get(h, c, c->types[j].type);
    if (!t) continue;
    if (mode == SMP_ATTR_DICTOFFSET && t->dictoffset > 0 && t->dictoffset <= 512 && t->dictoffset + 8 > hi)
      hi = t->dictoffset + 8;
    py_keys *k = mode == SMP_ATTR_INLINE ? keys_get(h, c, t->keys) : NULL;
    if (k && (int64_t)(t->basicsize + nm->dv_values) + 8 * (k->maxidx + 1) > hi)
      hi = (int64_t)(t->basicsize + nm->dv_values) + 8 * (k->maxidx + 1);
  }
  if (hi > 1024) hi = 1024;
  b->lo = lo;
  b->hi = hi;
  return 0;
}

/* Task i's fields from values read with its key entries k at v. */
static void py_take(py_batch *b, size_t i, const py_keys *k, const unsigned char *v) {
  b->out[i].coro = rd64(v + 8 * k->idx[PY_CORO]);
  b->out[i].waiter = rd64(v + 8 * k->idx[PY_WAITER]);
  b->out[i].name_obj = rd64(v + 8 * k->idx[PY_NAME]);
  b->st[i] = k->idx[PY_STATE] >= 0 ? rd64(v + 8 * k->idx[PY_STATE]) : 0;
  b->rc[i] = 2; /* fields read */
}

/* 3.13+: Task i (its object's bytes at bo) of class t with inline values. */
static void py_inline(py_batch *b, size_t i, const py_type *t, const unsigned char *bo, int managed) {
  const struct smp_names_layout *nm = b->nm;
  int64_t lo = b->lo, hi = b->hi;
  py_keys *k = nm->tpf_inline_values && (t->flags & nm->tpf_inline_values) ? keys_get(b->h, b->c, t->keys) : NULL;
  int64_t at = (int64_t)t->basicsize;
  if (!k || at + (int64_t)nm->dv_values + 8 * (k->maxidx + 1) > hi || nm->dv_valid >= nm->dv_values ||
      nm->dv_capacity >= nm->dv_values) {
    if (managed) b->a[i] = rd64(bo + nm->obj_managed_dict - lo);
    else b->slow[i] = 1;
    return;
  }
  const unsigned char *vh = bo + at - lo;
  if (!vh[nm->dv_valid]) { /* values moved to a dict */
    b->a[i] = rd64(bo + nm->obj_managed_dict - lo);
    return;
  }
  if (vh[nm->dv_capacity] <= k->maxidx) {
    b->slow[i] = 1;
    return;
  }
  b->kp[i] = k;
  py_take(b, i, k, vh + nm->dv_values);
}

/* Where Task i's values are, from its object's bytes at bo: its dict
 * (a[i]), its values (vals[i], kp[i]), read already (rc[i] 2), or slow. */
static void py_locate(py_batch *b, size_t i, const unsigned char *bo) {
  bf_smp *h = b->h;
  const struct smp_names_layout *nm = b->nm;
  int64_t lo = b->lo;
  py_type *t = type_get(h, b->c, rd64(bo + h->lay.ob_type - lo));
  if (!t) return;
  int managed = nm->tpf_managed_dict && (t->flags & nm->tpf_managed_dict);
  uint64_t p;
  switch (b->mode) {
    case SMP_ATTR_DICTOFFSET:
      if (t->dictoffset <= 0 || t->dictoffset + 8 > b->hi) {
        b->slow[i] = 1;
        break;
      }
      b->a[i] = rd64(bo + t->dictoffset - lo);
      break;
    case SMP_ATTR_VALUES_PTR:
      if (!managed) {
        b->slow[i] = 1;
        break;
      }
      p = rd64(bo + nm->obj_values_ptr - lo);
      if (p) {
        b->vals[i] = p + nm->dv_values;
        b->kp[i] = keys_get(h, b->c, t->keys);
      } else {
        b->a[i] = rd64(bo + nm->obj_managed_dict - lo);
      }
      break;
    case SMP_ATTR_DORV:
      if (!managed) {
        b->slow[i] = 1;
        break;
      }
      p = rd64(bo + nm->obj_managed_dict - lo);
      if (p & 1) {
        b->vals[i] = p + 1 + nm->dv_values;
        b->kp[i] = keys_get(h, b->c, t->keys);
      } else {
        b->a[i] = p;
      }
      break;
    case SMP_ATTR_INLINE:
      py_inline(b, i, t, bo, managed);
      break;
    default:
      break;
  }
}

/* The objects, in one batch. OUT: how many have their values in a dict;
 * <0 (b->ret) when the read failed. */
static int py_objects(py_batch *b) {
  size_t n = b->n, alen = (size_t)(b->hi - b->lo);
  for (size_t i = 0; i < n; i++) b->a[i] = b->addrs[i] ? b->addrs[i] + (uint64_t)b->lo : 0;
  const unsigned char *buf, *ok;
  if ((b->ret = tk_read_many(b->tk, b->a, n, alen, &buf, &ok)) < 0) return -1;
  int ndict = 0;
  for (size_t i = 0; i < n; i++) {
    const unsigned char *bo = buf + i * alen;
    b->a[i] = 0; /* from here: the Task's dict, when its values are in one */
    if (!ok[i]) continue;
    py_locate(b, i, bo);
    ndict += b->a[i] != 0;
  }
  return ndict;
}

/* Values in a dict (a split table: values with the class's shared keys).
 * -1 (b->ret kept) to stop. */
static int py_dicts(py_batch *b) {
  bf_smp *h = b->h;
  const struct smp_names_layout *nm = b->nm;
  const unsigned char *buf, *ok;
  size_t dl = (size_t)nm->dict_size;
  if (!dl || dl > 64 || nm->dict_keys + 8 > dl || nm->dict_values + 8 > dl) return -1;
  if ((b->ret = tk_read_many(b->tk, b->a, b->n, dl, &buf, &ok)) < 0) return -1;
  for (size_t i = 0; i < b->n; i++) {
    if (!b->a[i]) continue;
    const unsigned char *d = buf + i * dl;
    uint64_t v = ok[i] ? rd64(d + nm->dict_values) : 0;
    if (!ok[i] || (h->dict_type_addr && rd64(d + h->lay.ob_type) != h->dict_type_addr)) continue;
    if (!v) { /* a combined table: attribute by attribute */
      b->slow[i] = 1;
      continue;
    }
    b->vals[i] = v + nm->dv_values;
    b->kp[i] = keys_get(h, b->c, rd64(d + nm->dict_keys));
  }
  return 0;
}

/* The values, where not inline. -1 (b->ret) when the read failed. */
static int py_values(py_batch *b) {
  size_t n = b->n;
  int maxidx = -1;
  for (size_t i = 0; i < n; i++)
    if (b->rc[i] != 2 && b->kp[i] && b->vals[i] && b->kp[i]->maxidx > maxidx) maxidx = b->kp[i]->maxidx;
  if (maxidx < 0) return 0;
  const unsigned char *buf, *ok;
  size_t vl = 8 * (size_t)(maxidx + 1);
  for (size_t i = 0; i < n; i++) b->a[i] = b->rc[i] != 2 && b->kp[i] ? b->vals[i] : 0;
  if ((b->ret = tk_read_many(b->tk, b->a, n, vl, &buf, &ok)) < 0) return -1;
  for (size_t i = 0; i < n; i++) {
    if (!b->a[i] || !ok[i]) continue;
    py_take(b, i, b->kp[i], buf + i * vl);
  }
  return 0;
}

/* The fields, then each coroutine's type. -1 (b->ret) when the read failed. */
static int py_check(py_batch *b) {
  bf_smp *h = b->h;
  tk_py *py = b->py;
  tk_py_task *out = b->out;
  uint64_t *a = b->a;
  int *rc = b->rc;
  size_t n = b->n;
  for (size_t i = 0; i < n; i++) {
    a[2 * i] = a[2 * i + 1] = 0;
    if (rc[i] != 2) continue;
    rc[i] = -EIO;
    if (!out[i].coro || !out[i].waiter || !out[i].name_obj) continue; /* set in __init__ */
    if (b->st[i]) { /* _state set: done, cancelled, or pending again */
      int p = state_pending(b->tk, py, b->st[i]);
      if (p <= 0) {
        rc[i] = p;
        continue;
      }
    }
    /* a Task parked on a future is not followed here: tasks.c type-checks
     * its coroutine before it walks the chain. Read: the coroutine of the
     * others (tasks.c reads its state next), and the waiter until None's
     * address is known */
    if (!py->none) a[2 * i + 1] = out[i].waiter;
    if (out[i].waiter == py->none || !py->none) a[2 * i] = out[i].coro;
    if (!a[2 * i] && !a[2 * i + 1]) rc[i] = 1;
  }
  const unsigned char *buf, *ok;
  size_t tl = (size_t)h->lay.ob_type + 8;
  if ((b->ret = tk_read_many(b->tk, a, 2 * n, tl, &buf, &ok)) < 0) return -1;
  for (size_t i = 0; i < n; i++) {
    uint64_t w = a[2 * i + 1];
    if (w && ok[2 * i + 1] && coro_kind(b->tk, b->c, w, rd64(buf + (2 * i + 1) * tl + h->lay.ob_type)) == TK_NONE)
      py->none = w;
  }
  for (size_t i = 0; i < n; i++) {
    if (rc[i] == 1) { /* parked on a future */
      continue;
    }
    if (!a[2 * i] || !ok[2 * i]) continue;
    int k = coro_kind(b->tk, b->c, a[2 * i], rd64(buf + 2 * i * tl + h->lay.ob_type));
    if (k != TK_CORO && k != TK_GEN) continue; /* a done Task holds None */
    if (out[i].waiter == py->none) out[i].waiter = 0;
    rc[i] = 1;
  }
  return 0;
}

/* The others, attribute by attribute, a bounded number. Returns how many
 * were left for that bound. */
static int py_slow(py_batch *b) {
  size_t slow_left = PY_SLOW_MAX;
  int skipped = 0;
  for (size_t i = 0; i < b->n; i++) {
    if (!b->slow[i]) continue;
    if (!slow_left) {
      skipped++;
      continue;
    }
    slow_left--;
    b->rc[i] = tk_py_read(b->tk, b->py, b->addrs[i], &b->out[i]);
  }
  return skipped;
}

int tk_py_read_many(bf_smp_tasks *tk, tk_py *py, const uint64_t *addrs, size_t n, tk_py_task *out,
                    int *rc) {
  bf_smp *h = tk_sampler(tk);
  const struct smp_names_layout *nm = &h->lay.nm;
  py_batch b = {.tk = tk, .py = py, .h = h, .nm = nm, .c = cache_of(py), .mode = nm->attr_mode,
                .addrs = addrs, .n = n, .out = out, .rc = rc};
  for (size_t i = 0; i < n; i++) rc[i] = -EIO;
  if (!n) return 0;
  if (!nm->minor || !b.mode) {
    for (size_t i = 0; i < n; i++) rc[i] = -ENOTSUP;
    return 0;
  }
  if (!b.c) return -ENOMEM;
  b.c->gen++;
  h->pn_budget = SMP_PYNAME_BUDGET; /* new _state strings are compared as text */
  b.a = calloc(2 * n, 8);
  b.vals = calloc(n, 8);
  b.st = calloc(n, 8);
  b.kp = calloc(n, sizeof *b.kp);
  b.slow = calloc(n, 1);
  b.ret = -ENOMEM;
  int ndict;
  if (!b.a || !b.vals || !b.st || !b.kp || !b.slow || py_span(&b) < 0 || (ndict = py_objects(&b)) < 0 ||
      (ndict && py_dicts(&b) < 0) || py_values(&b) < 0 || py_check(&b) < 0)
    goto out;
  b.ret = py_slow(&b);
out:
  free(b.a);
  free(b.vals);
  free(b.kp);
  free(b.slow);
  free(b.st);
  return b.ret;
}
