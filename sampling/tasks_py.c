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
};

tk_py *tk_py_new(void) { return calloc(1, sizeof(tk_py)); }

void tk_py_free(tk_py *py) { free(py); }

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
