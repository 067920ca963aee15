/* test_smp_taskspy.c — pure-Python asyncio Tasks read in batches
 * (tasks_py.c's tk_py_read_many) over a fake memory image: the field
 * entries learned from the class's shared keys, then each Task's values
 * (3.13: inline after the object; 3.8: a split-table dict) read for all
 * Tasks at once: a pending, a parked, a finished and a broken Task; the
 * layout learned again when the keys change; and the number of reads not
 * growing with the number of Tasks. */
#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <sys/uio.h>

#include "tasks_int.h" /* sampling/internal/: on this test's include path only */
#include "check.h"

#define BASE 0x7f0000000000ull
#define SIZE (1 << 20)
#include "fake_remote.h"

static uint64_t next_free;
static uint64_t alloc(size_t n) {
  uint64_t a = next_free;
  next_free += (n + 15) & ~(size_t)15;
  return a;
}

static const smp_layout *L;

/* A type object named name (its tp_name text right after it). */
static uint64_t type_obj(const char *name) {
  uint64_t t = alloc(1024 + 64);
  put(t + L->ob_type, t);
  put(t + L->tp_name, t + 1024);
  memcpy(mem + (t + 1024 - BASE), name, strlen(name) + 1);
  return t;
}

/* A compact ASCII str. */
static uint64_t str_obj(uint64_t str_type, const char *s) {
  uint64_t a = alloc((size_t)L->uni_ascii_size + strlen(s) + 1);
  put(a + L->ob_type, str_type);
  put(a + L->uni_length, strlen(s));
  uint32_t st = (1u << 2) | (1u << 5) | (1u << 6); /* kind 1, compact, ascii */
  memcpy(mem + (a + L->uni_state - BASE), &st, 4);
  memcpy(mem + (a + L->uni_ascii_size - BASE), s, strlen(s) + 1);
  return a;
}

typedef struct world {
  uint64_t str_t, coro_t, none_t, fut_t, task_t;
  uint64_t none, fut, keys, k_state_fin, names[8];
  const char *order[8];
  int nkeys;
} world;

/* The shared keys object: entries in order w->order (split: unicode entries
 * on 3.11+, plain ones before). */
static void keys_write(world *w) {
  const struct smp_names_layout *n = &L->nm;
  if (!w->keys) w->keys = alloc(1024);
  memset(mem + (w->keys - BASE), 0, 1024);
  uint64_t esize = n->dk_log2 ? n->dk_uentry_size : n->dk_entry_size;
  uint64_t ekey = n->dk_log2 ? n->dk_uentry_key : n->dk_entry_key;
  if (n->dk_log2) {
    mem[w->keys - BASE + n->dk_log2_size] = 4; /* 16 slots */
    mem[w->keys - BASE + n->dk_log2_index_bytes] = 4;
    mem[w->keys - BASE + n->dk_kind] = 2; /* split */
  } else {
    put(w->keys + n->dk_size, 16);
  }
  put(w->keys + n->dk_nentries, (uint64_t)w->nkeys);
  uint64_t entries = w->keys + n->dk_indices + 16;
  for (int i = 0; i < w->nkeys; i++) put(entries + (uint64_t)i * esize + ekey, w->names[i]);
}

static int key_index(const world *w, const char *k) {
  for (int i = 0; i < w->nkeys; i++)
    if (strcmp(w->order[i], k) == 0) return i;
  return -1;
}

/* A Task with these field values (state 0: not set); its values inline
 * (3.13) or in a split-table dict (3.8). OUT: the values' address. */
static uint64_t task_obj(const world *w, uint64_t coro, uint64_t waiter, uint64_t name, uint64_t state,
                         uint64_t *values) {
  const struct smp_names_layout *n = &L->nm;
  uint64_t t = alloc(256) + 32; /* room for the pre-header */
  put(t + L->ob_type, w->task_t);
  uint64_t v;
  if (n->attr_mode == SMP_ATTR_INLINE) {
    uint64_t vh = t + 16; /* tp_basicsize */
    mem[vh - BASE + n->dv_capacity] = 16;
    mem[vh - BASE + n->dv_valid] = 1;
    v = vh + n->dv_values;
  } else {
    uint64_t d = alloc(64);
    v = alloc(16 * 8);
    put(t + 16, d); /* tp_dictoffset */
    put(d + L->ob_type, 0);
    put(d + n->dict_keys, w->keys);
    put(d + n->dict_values, v - n->dv_values);
  }
  uint64_t vals[4] = {coro, waiter, name, state};
  const char *f[4] = {"_coro", "_fut_waiter", "_name", "_state"};
  for (int i = 0; i < 4; i++)
    if (key_index(w, f[i]) >= 0) put(v + 8 * (uint64_t)key_index(w, f[i]), vals[i]);
  if (values) *values = v;
  return t;
}

static void world_make(world *w) {
  const struct smp_names_layout *n = &L->nm;
  memset(w, 0, sizeof *w);
  w->str_t = type_obj("str");
  w->coro_t = type_obj("coroutine");
  w->none_t = type_obj("NoneType");
  w->fut_t = type_obj("_asyncio.Future");
  w->task_t = type_obj("Task");
  put(w->task_t + n->tp_flags, n->tpf_heaptype | n->tpf_managed_dict | n->tpf_inline_values);
  put(w->task_t + n->tp_basicsize, n->attr_mode == SMP_ATTR_INLINE ? 16 : 32);
  put(w->task_t + n->tp_dictoffset, n->attr_mode == SMP_ATTR_INLINE ? 0 : 16);
  w->none = alloc(16);
  put(w->none + L->ob_type, w->none_t);
  w->fut = alloc(64);
  put(w->fut + L->ob_type, w->fut_t);
  static const char *order[] = {"_loop", "_callbacks", "_coro", "_fut_waiter", "_name", "_state"};
  w->nkeys = 6;
  for (int i = 0; i < w->nkeys; i++) {
    w->order[i] = order[i];
    w->names[i] = str_obj(w->str_t, order[i]);
  }
  w->k_state_fin = str_obj(w->str_t, "FINISHED");
  keys_write(w);
  put(w->task_t + n->ht_cached_keys, w->keys);
}

static uint64_t coro_obj(const world *w) {
  uint64_t c = alloc(64);
  put(c + L->ob_type, w->coro_t);
  return c;
}

static void run(int minor) {
  smp_layout l;
  memset(mem, 0, sizeof mem);
  next_free = BASE + 4096;
  CHECK_EQ_INT(smp_layout_builtin(minor <= 12 ? minor : 12, &l), 0);
  CHECK_EQ_INT(smp_layout_names(minor, &l.nm), 0);
  L = &l;
  bf_smp *h = bf_smp_new();
  smp_set_reader(h, fake_readv, NULL);
  smp_set_layout(h, &l, BASE);
  L = &h->lay;
  bf_smp_tasks *tk = bf_smp_tasks_new(h);
  tk_py *py = tk_py_new();
  world w;
  world_make(&w);
  uint64_t c1 = coro_obj(&w), c2 = coro_obj(&w), c3 = coro_obj(&w);
  uint64_t n1 = str_obj(w.str_t, "one"), n2 = str_obj(w.str_t, "two"), n3 = str_obj(w.str_t, "three");
  uint64_t v1;
  uint64_t addrs[5];
  addrs[0] = task_obj(&w, c1, w.none, n1, 0, &v1);            /* pending, running or ready */
  addrs[1] = task_obj(&w, c2, w.fut, n2, 0, NULL);            /* parked on a future */
  addrs[2] = task_obj(&w, c3, w.none, n3, w.k_state_fin, NULL); /* finished */
  addrs[3] = task_obj(&w, w.names[0], w.none, n1, 0, NULL);   /* its _coro is a str */
  addrs[4] = task_obj(&w, 0, w.none, n1, 0, NULL);            /* no _coro */
  tk_py_task out[5];
  int rc[5];
  for (int round = 0; round < 2; round++) { /* learning, then learned */
    memset(out, 0, sizeof out);
    CHECK_EQ_INT(tk_py_read_many(tk, py, addrs, 5, out, rc), 0);
    CHECK_EQ_INT(rc[0], 1);
    CHECK(out[0].coro == c1 && out[0].waiter == 0 && out[0].name_obj == n1);
    CHECK_EQ_INT(rc[1], 1);
    CHECK(out[1].coro == c2 && out[1].waiter == w.fut && out[1].name_obj == n2);
    CHECK_EQ_INT(rc[2], 0);
    CHECK_EQ_INT(rc[3], -EIO);
    CHECK_EQ_INT(rc[4], -EIO);
  }
  /* the class's keys change (another order, one more entry): learned again */
  static const char *order2[] = {"_name", "_loop", "_result", "_coro", "_state", "_callbacks", "_fut_waiter"};
  uint64_t strs[7];
  for (int i = 0; i < 7; i++) {
    strs[i] = 0;
    for (int j = 0; j < w.nkeys; j++)
      if (strcmp(w.order[j], order2[i]) == 0) strs[i] = w.names[j];
    if (!strs[i]) strs[i] = str_obj(w.str_t, order2[i]);
  }
  w.nkeys = 7;
  for (int i = 0; i < 7; i++) {
    w.order[i] = order2[i];
    w.names[i] = strs[i];
  }
  keys_write(&w);
  uint64_t t5 = task_obj(&w, c1, w.fut, n2, 0, NULL);
  CHECK_EQ_INT(tk_py_read_many(tk, py, &t5, 1, out, rc), 0);
  CHECK_EQ_INT(rc[0], 1);
  CHECK(out[0].coro == c1 && out[0].waiter == w.fut && out[0].name_obj == n2);
  /* many Tasks: the reads do not grow with their number */
  enum { MANY = 600 };
  static uint64_t many[MANY];
  static tk_py_task mo[MANY];
  static int mrc[MANY];
  for (int i = 0; i < MANY; i++) many[i] = task_obj(&w, coro_obj(&w), i % 2 ? w.fut : w.none, n3, 0, NULL);
  CHECK_EQ_INT(tk_py_read_many(tk, py, many, 10, mo, mrc), 0);
  unsigned long c0 = readv_calls;
  CHECK_EQ_INT(tk_py_read_many(tk, py, many, 10, mo, mrc), 0);
  unsigned long few = readv_calls - c0;
  c0 = readv_calls;
  CHECK_EQ_INT(tk_py_read_many(tk, py, many, MANY, mo, mrc), 0);
  unsigned long lots = readv_calls - c0;
  CHECK(lots <= few + 8);
  for (int i = 0; i < MANY; i++) {
    CHECK_EQ_INT(mrc[i], 1);
    CHECK(mo[i].name_obj == n3 && mo[i].waiter == (i % 2 ? w.fut : 0));
  }
  tk_py_free(py);
  bf_smp_tasks_free(tk);
  bf_smp_free(h);
}

int main(void) {
  run(13); /* values inline after the object */
  run(8);  /* a split-table dict at tp_dictoffset */
  return CHECK_DONE();
}
