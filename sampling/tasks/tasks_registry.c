/* tasks_registry.c — asyncio tasks' registry: asyncio.tasks' sets of the
 * main interpreter (every Task on 3.8-3.13, the pure-Python ones on 3.14+)
 * and, on 3.14+, the C Tasks linked in the thread states, read at a bounded
 * rate into tk->addrs and aligned with what was read of each task last time
 * (tk->tasks). Part of the task reader (tasks.c).
 */
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tasks_int.h"

#define TK_MAX_TASKS 20000          /* tasks read per sample */
#define TK_MAX_SET (1u << 16)       /* slots of a registry set */
#define TK_REFIND_NS 2000000000LL   /* module looked up again every 2 s */
#define TK_RETRY_NS 100000000LL     /* and every 100 ms while not found */

static int cmp_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return (x > y) - (x < y);
}

/* Append the items of a set (weak: each a weakref whose referent is taken)
 * to tk->addrs. */
static int set_items(bf_smp_tasks *tk, uint64_t set, int weak) {
  bf_smp *h = tk->h;
  unsigned char hd[48];
  if (smp_read(h, set, hd, sizeof hd) < 0) return -EIO;
  if (tk_type_kind(tk, rd64(hd + 8)) != TK_SET) return -EIO;
  uint64_t used = rd64(hd + 24), mask = rd64(hd + 32), table = rd64(hd + 40);
  if (mask + 1 > TK_MAX_SET || ((mask + 1) & mask) || used > mask + 1 || !table) return -EIO;
  size_t slots = (size_t)mask + 1;
  unsigned char *tb = malloc(slots * 16);
  if (!tb) return -ENOMEM;
  int rc = smp_read(h, table, tb, slots * 16);
  if (rc < 0) {
    free(tb);
    return rc;
  }
  size_t first = tk->naddrs;
  for (size_t i = 0; i < slots && tk->naddrs < TK_MAX_TASKS; i++) {
    uint64_t key = rd64(tb + i * 16);
    if (!key) continue;
    if (tk_grow((void **)&tk->addrs, &tk->cap_addrs, tk->naddrs + 1, 8) < 0) {
      free(tb);
      return -ENOMEM;
    }
    tk->addrs[tk->naddrs++] = key;
  }
  free(tb);
  if (!weak) return 0;
  /* weakrefs: {ob_refcnt, ob_type, wr_object}; dummies fail the type check */
  size_t n = tk->naddrs - first;
  if ((rc = tk_read_regions(tk, TK_M_REG, tk->addrs + first, n, 24, 24)) < 0) return rc;
  size_t o = first;
  for (size_t i = 0; i < n; i++) {
    const unsigned char *w = tk->at[i];
    if (!tk->ok[i] || tk_type_kind(tk, rd64(w + 8)) != TK_WEAKREF) continue;
    tk->addrs[o++] = rd64(w + 16);
  }
  tk->naddrs = o;
  return 0;
}

/* Is uvloop loaded (sys.modules given, or read when 0)? Said in the status. */
static void find_uvloop(bf_smp_tasks *tk, uint64_t modules) {
  bf_smp *h = tk->h;
  uint64_t interp = 0, v = 0;
  tk->uv_ns = h->now_ns;
  if (tk->uvloop) return;
  if (!modules && (smp_read(h, h->runtime_addr + h->lay.rt_interp_head, &interp, 8) < 0 || !interp ||
                   smp_read(h, interp + h->lay.nm.is_modules, &modules, 8) < 0 || !modules))
    return;
  if (smp_pn_dict_get(h, modules, "uvloop", &v) == 0) {
    tk->uvloop = 1;
    tk_set_status(tk, NULL);
  }
}

/* Find asyncio.tasks' registry sets in the main interpreter. */
static void find_registry(bf_smp_tasks *tk) {
  bf_smp *h = tk->h;
  uint64_t interp = 0, modules = 0, mod = 0, md = 0, v = 0;
  tk->mod_dict = tk->reg_sets[0] = tk->reg_sets[1] = 0;
  tk->found_ns = h->now_ns;
  if (smp_read(h, h->runtime_addr + h->lay.rt_interp_head, &interp, 8) < 0 || !interp) return;
  if (smp_read(h, interp + h->lay.nm.is_modules, &modules, 8) < 0 || !modules) return;
  if (smp_pn_dict_get(h, modules, "asyncio.tasks", &mod) < 0) return;
  if (smp_read(h, mod + h->lay.nm.md_dict, &md, 8) < 0 || !md) return;
  const char *ws = tk->lay.minor <= 11 ? "_all_tasks" : "_scheduled_tasks";
  if (smp_pn_dict_get(h, md, ws, &v) == 0 && smp_pn_attr_get(h, v, "data", &tk->reg_sets[0]) == 0)
    tk->reg_weak[0] = 1;
  if (tk->lay.minor >= 12 && smp_pn_dict_get(h, md, "_eager_tasks", &v) == 0) {
    tk->reg_sets[1] = v;
    tk->reg_weak[1] = 0;
  }
  find_uvloop(tk, modules);
  /* asyncio.tasks may still be importing: without its registry look again */
  tk->mod_dict = tk->reg_sets[0] ? md : 0;
}

/* Sort tk->addrs: the set's table order rarely changes between refreshes,
 * so the last order found is reused when the list is the same. */
static void sort_addrs(bf_smp_tasks *tk) {
  size_t n = tk->naddrs;
  tk_memo *mo = &tk->memo[TK_M_SORT];
  if (n < 2) return;
  if (mo->m == n && memcmp(mo->in, tk->addrs, 8 * n) == 0) {
    memcpy(tk->addrs, mo->sorted, 8 * n);
    return;
  }
  int keep = tk_grow((void **)&mo->in, &mo->cap_in, n, 8) == 0 &&
             tk_grow((void **)&mo->sorted, &mo->cap_sorted, n, 8) == 0;
  if (keep) memcpy(mo->in, tk->addrs, 8 * n);
  qsort(tk->addrs, n, 8, cmp_u64);
  if (keep) {
    memcpy(mo->sorted, tk->addrs, 8 * n);
    mo->m = n;
  }
}

/* Align tk->tasks with the registry just read: the entries of tasks still
 * in it are carried over (both lists are in address order), new ones start
 * empty. */
static void remap_tasks(bf_smp_tasks *tk) {
  size_t n = tk->naddrs, old = tk->ntasks, j = 0;
  if (n == old) {
    size_t i = 0;
    while (i < n && tk->tasks[i].addr == tk->addrs[i]) i++;
    if (i == n) return;
  }
  if (tk_grow((void **)&tk->spare, &tk->cap_spare, n + 1, sizeof *tk->spare) < 0) {
    tk->ntasks = 0;
    return;
  }
  for (size_t i = 0; i < n; i++) {
    tk_task *d = &tk->spare[i];
    while (j < old && tk->tasks[j].addr < tk->addrs[i]) j++;
    if (j < old && tk->tasks[j].addr == tk->addrs[i]) {
      const tk_task *o = &tk->tasks[j++];
      memcpy(d, o, offsetof(tk_task, chain) + (size_t)o->nchain * sizeof o->chain[0]);
    } else {
      memset(d, 0, offsetof(tk_task, chain));
      d->addr = tk->addrs[i];
    }
  }
  tk_task *t = tk->tasks;
  size_t c = tk->cap_tasks;
  tk->tasks = tk->spare;
  tk->cap_tasks = tk->cap_spare;
  tk->spare = t;
  tk->cap_spare = c;
  tk->ntasks = n;
}

void tk_use_314(bf_smp_tasks *tk, const tk314 *o) {
  bf_smp *h = tk->h;
  tk->t314 = *o;
  tk->lay = (tk_layout){o->minor, (uint32_t)o->task_size, (uint32_t)o->task_fut_state, (uint32_t)o->task_fut_waiter,
                        (uint32_t)o->task_coro, (uint32_t)o->task_name, 0, 0, 0, (uint32_t)o->gen_iframe,
                        (uint32_t)o->fr_stackpointer, 0, 0, 0, 0, o->fs_await_lo, o->fs_await_hi, o->fs_exec,
                        o->await_below};
  tk->gen314 = 1;
  if (o->task_size) tk->v314 = 1;
  /* an unnamed Task's name is an int: its layout from the target's offsets
   * when the names layout has none */
  if (!h->lay.nm.long_digit) {
    h->lay.nm.long_size = o->long_tag;
    h->lay.nm.long_digit = o->long_digit;
    h->lay.nm.long_tagged = 1;
  }
}

/* 3.14+: the coroutine layout from _Py_DebugOffsets at once, the Task
 * layout from _asyncio's debug offsets once it is loaded, then the C Tasks
 * linked in the thread states appended to tk->addrs (tasks_314.c). */
static void refresh_314(bf_smp_tasks *tk) {
  bf_smp *h = tk->h;
  const char *msg;
  tk314 o;
  char m[200];
  if (!tk->gen314) {
    int rc = tk314_find_gen(h, &o, &msg);
    if (rc == 0) {
      tk_use_314(tk, &o);
    } else if (rc != -EIO) {
      snprintf(m, sizeof m, "Python 3.%d tasks not read: %s", tk->lay.minor, msg);
      tk_set_status(tk, m);
      tk->v314 = tk->supported = 0;
    }
    if (!tk->gen314) return;
  }
  if (tk->v314 < 0 && (!tk->find314_ns || h->now_ns - tk->find314_ns > TK_RETRY_NS)) {
    tk->find314_ns = h->now_ns;
    int rc = tk314_find(h, &tk->none314, &o, &msg);
    if (rc == 0) {
      tk_use_314(tk, &o);
    } else if (rc != -ENOENT) { /* pure-Python Tasks are still read */
      snprintf(m, sizeof m, "Python 3.%d C Tasks not read: %s", tk->lay.minor, msg);
      tk_set_status(tk, m);
      tk->v314 = 0;
    }
  }
  uint64_t interp = 0;
  if (tk->v314 != 1 || smp_read(h, h->runtime_addr + h->lay.rt_interp_head, &interp, 8) < 0) return;
  if (tk_grow((void **)&tk->addrs, &tk->cap_addrs, TK_MAX_TASKS, 8) < 0) return;
  tk314_tasks(h, &tk->t314, interp, tk->addrs, TK_MAX_TASKS, &tk->naddrs);
}

/* Drop repeats from the sorted tk->addrs (a Task in two registries). */
static void dedupe_addrs(bf_smp_tasks *tk) {
  size_t o = 0;
  for (size_t i = 0; i < tk->naddrs; i++)
    if (!o || tk->addrs[o - 1] != tk->addrs[i]) tk->addrs[o++] = tk->addrs[i];
  tk->naddrs = o;
}

void tk_refresh_registry(bf_smp_tasks *tk) {
  bf_smp *h = tk->h;
  tk->reg_ns = h->now_ns;
  tk->naddrs = 0;
  /* 3.14+: C Tasks from the thread states' lists; pure-Python Tasks are
   * still registered in asyncio.tasks' sets, read below */
  if (tk->v314) {
    refresh_314(tk);
    if (!tk->gen314) {
      tk->naddrs = 0;
      remap_tasks(tk);
      return;
    }
  }
  if (tk->v314 && !h->lay.nm.minor) { /* asyncio.tasks' sets cannot be found without the dict layout */
    if (!tk->warned_custom) {
      tk->warned_custom = 1;
      tk_set_status(tk, "pure-Python Tasks (asyncio.tasks._PyTask) are not read: this build has no dict "
                        "layout for this Python; only C Tasks are shown");
    }
    sort_addrs(tk);
    remap_tasks(tk);
    return;
  }
  int64_t since = h->now_ns - tk->found_ns;
  if ((!tk->mod_dict && (!tk->found_ns || since > TK_RETRY_NS)) || since > TK_REFIND_NS)
    find_registry(tk);
  /* asyncio is often imported before uvloop (`import asyncio, uvloop`): a
   * registry found between the two would leave uvloop unsaid until the next
   * refind, after a short program's end; so look for it at the retry rate */
  else if (!tk->uvloop && h->now_ns - tk->uv_ns > TK_RETRY_NS)
    find_uvloop(tk, 0);
  int bad = 0;
  for (int i = 0; i < 2; i++)
    if (tk->reg_sets[i] && set_items(tk, tk->reg_sets[i], tk->reg_weak[i]) < 0) bad = 1;
  if (bad) tk->mod_dict = 0; /* look the module up again next time */
  /* address order: batched reads then need no sorting (see tk_read_regions) */
  sort_addrs(tk);
  dedupe_addrs(tk);
  remap_tasks(tk);
}
