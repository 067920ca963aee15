/* tasks_names.c — asyncio task names: each task's name object read on
 * every sample (one batched read), its text kept in a table of entries whose
 * serial is part of the task's id; an entry whose object's text changed is
 * retired and freed a while later. Part of the task reader (tasks.c).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tasks_int.h"

#define TK_NEW_NAMES 16             /* names read one by one per sample */
#define TK_NAME_BATCH 4096          /* names read in one batch per sample */
#define TK_DEAD_NS 60000000000LL    /* a retired name is freed a minute later */

/* Keep name s (owned from now on) of obj; an entry already there (a freed
 * name object's, whose address obj reuses) is retired. */
static const tk_name *name_put(bf_smp_tasks *tk, uint64_t obj, char *s) {
  char *tn = malloc(strlen(s) + 6);
  bf_smp_code *code = malloc(sizeof *code);
  if (!tk->names.slot_size) tk->names = (bf_pmap)BF_PMAP_INIT(tk_name);
  size_t cap = tk->names.cap;
  int added = 0, had = bf_pmap_get(&tk->names, obj) != NULL;
  tk_name *e = NULL;
  if (!tn || !code || (had && tk_grow((void **)&tk->dead, &tk->cap_dead, tk->ndead + 1, sizeof *tk->dead) < 0) ||
      !(e = bf_pmap_put(&tk->names, obj, &added))) {
    free(s);
    free(tn);
    free(code);
    return NULL;
  }
  /* grown: every entry moved (tasks holding one look theirs up again) */
  if (tk->names.cap != cap) tk->name_gen++;
  if (!added) { /* retired: a sample held by the recorder may still point at it */
    tk->name_gen++;
    e->retired_ns = tk->h->now_ns;
    tk->dead[tk->ndead++] = *e;
  }
  sprintf(tn, "task:%s", s);
  *code = (bf_smp_code){BF_SMP_TASK_FILE, s, 0, 0, NULL};
  e->serial = ++tk->serials;
  e->thread_name = tn;
  e->code = code;
  return e;
}

const tk_name *tk_name_get(bf_smp_tasks *tk, uint64_t obj) {
  /* no name object: a Task torn down while still listed (its name cleared
   * before its memory is freed). Never looked up: 0 is the table's empty
   * slot (it once returned a slot whose code is NULL: a recorder crash) */
  if (!obj) return NULL;
  const tk_name *hit = bf_pmap_get(&tk->names, obj);
  if (hit) return hit;
  if (tk->names.len >= TK_MAX_NAMES) return NULL; /* full: unnamed tasks are left out */
  /* a burst of new tasks must not slow this tick down (the pace of samples
   * would then follow the target's state): the rest wait for later ticks */
  if (++tk->new_names > TK_NEW_NAMES) return NULL;
  char *s = NULL;
  int k = tk_obj_kind(tk, obj);
  if (k == TK_STR) {
    if (smp_read_str(tk->h, obj, &s) < 0) return NULL;
    size_t len = strlen(s);
    if (len > SMP_PYNAME_LEN) { /* cut on a character boundary */
      len = SMP_PYNAME_LEN;
      while (len && ((unsigned char)s[len] & 0xc0) == 0x80) len--;
      s[len] = 0;
    }
  } else if (k == TK_INT) { /* 3.13: an unnamed task keeps its counter */
    uint64_t v;
    if (smp_pn_long_read(tk->h, obj, &v) < 0 || !(s = malloc(32))) return NULL;
    snprintf(s, 32, "Task-%llu", (unsigned long long)v);
  } else {
    return NULL;
  }
  return name_put(tk, obj, s);
}

/* The text of a name object read into b (len bytes) into out (65 bytes):
 * a short compact ASCII str, or (3.13) the int of an unnamed task as
 * "Task-N". Returns its length, or -1 when it is neither. */
static int name_decode(bf_smp_tasks *tk, const unsigned char *b, char *out) {
  const smp_layout *l = &tk->h->lay;
  int kind = tk_type_kind(tk, rd64(b + l->ob_type));
  if (kind == TK_STR) {
    uint64_t n = rd64(b + l->uni_length);
    uint32_t st = rd32(b + l->uni_state);
    if (((st >> 2) & 7) != 1 || !((st >> 5) & 1) || !((st >> 6) & 1) || n > 64) return -1;
    memcpy(out, b + l->uni_ascii_size, (size_t)n);
    out[n] = 0;
    if (strlen(out) < n)
      for (uint64_t c = 0; c < n; c++)
        if (!out[c]) out[c] = '?';
    return (int)n;
  }
  if (kind == TK_INT && l->nm.long_tagged) {
    uint64_t tag = rd64(b + l->nm.long_size), nd = tag >> 3;
    if ((tag & 3) != 0 || nd < 1 || nd > 2) return -1;
    uint64_t v = rd32(b + l->nm.long_digit);
    if (nd == 2) v |= (uint64_t)rd32(b + l->nm.long_digit + 4) << 30;
    return snprintf(out, 65, "Task-%llu", (unsigned long long)v);
  }
  return -1;
}

/* A 64-bit hash of a name's text (never 0): what a task remembers of the
 * text its name entry was checked against. */
static uint64_t name_hash(const char *s, int n) {
  uint64_t x = 0xcbf29ce484222325ull ^ (uint64_t)n;
  for (int i = 0; i < n; i += 8) { /* 8 bytes a step: s has room for 72 */
    uint64_t w = 0;
    memcpy(&w, s + i, n - i < 8 ? (size_t)(n - i) : 8);
    x = (x ^ w) * 0x100000001b3ull;
    x ^= x >> 29;
  }
  return x | 1;
}

/* Every task's name, in one batched read of the name objects (up to
 * TK_NAME_BATCH; past that a cached text is trusted), decoded here when it is
 * a short compact ASCII str (or, 3.13, the int of an unnamed task) and
 * checked against the cached text; others are left to tk_name_get's bounded
 * slow path. A task still holding the name object it had, whose text hashes
 * as before, keeps its entry without a look-up (name_gen: no entry has left
 * its slot since). */
void tk_names_prefetch(bf_smp_tasks *tk) {
  bf_smp *h = tk->h;
  const smp_layout *l = &h->lay;
  size_t len = (size_t)l->uni_ascii_size + 64;
  if (len < (size_t)l->nm.long_digit + 8) len = (size_t)l->nm.long_digit + 8;
  size_t n = tk->ntasks;
  if (tk_grow((void **)&tk->objs, &tk->cap_objs, n + 1, 8) < 0) return;
  uint64_t *objs = tk->objs;
  size_t want = 0;
  for (size_t k = 0; k < n; k++) {
    objs[k] = 0;
    if (tk->tasks[k].live && tk->tasks[k].name_obj && want < TK_NAME_BATCH) {
      objs[k] = tk->tasks[k].name_obj;
      want++;
    }
  }
  if (want && tk_read_regions(tk, TK_M_NAME, objs, n, len, len) == 0)
    for (size_t k = 0; k < n; k++) {
      if (!objs[k] || !tk->ok[k]) continue;
      tk_task *t = &tk->tasks[k];
      char text[72];
      int tl = name_decode(tk, tk->at[k], text);
      uint64_t fp = tl < 0 ? 0 : name_hash(text, tl);
      if (fp && t->name && t->name_seen == objs[k] && t->name_gen == tk->name_gen && t->name_fp == fp)
        continue; /* the same object, the same text: the same entry */
      t->name_fp = 0;
      if (tl < 0 || tk->names.len >= TK_MAX_NAMES) continue;
      const tk_name *had = bf_pmap_get(&tk->names, objs[k]);
      t->name_fp = fp; /* checked below, or its new entry */
      if (had && strcmp(had->code->qualname, text) == 0) continue; /* the same text: the same entry */
      char *str = strdup(text);
      if (!str) return;
      name_put(tk, objs[k], str);
    }
}

/* Free the retired names no sample held by the recorder can still use. */
void tk_names_retire(bf_smp_tasks *tk) {
  size_t gone = 0;
  while (gone < tk->ndead && tk->h->now_ns - tk->dead[gone].retired_ns > TK_DEAD_NS) {
    free(tk->dead[gone].thread_name);
    free((char *)tk->dead[gone].code->qualname);
    free(tk->dead[gone].code);
    gone++;
  }
  if (gone) memmove(tk->dead, tk->dead + gone, (tk->ndead -= gone) * sizeof *tk->dead);
}
