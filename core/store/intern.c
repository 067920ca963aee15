/* intern.c — interning of strings, functions, frames, stacks and threads
 * with in-memory caches, and the reverse lookups (id → row). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ident.h"
#include "store_impl.h"
#include "vec.h"

static int step_id(bf_store *s, sqlite3_stmt *st, int64_t *id, int *found) {
  int rc = sqlite3_step(st);
  if (rc == SQLITE_ROW) {
    *id = sqlite3_column_int64(st, 0);
    *found = 1;
    return 0;
  }
  if (rc == SQLITE_DONE) {
    *found = 0;
    return 0;
  }
  return bfs_fail_sql(s, "lookup");
}

static int step_insert(bf_store *s, sqlite3_stmt *st, int64_t *id) {
  if (sqlite3_step(st) != SQLITE_DONE) return bfs_fail_sql(s, "insert");
  *id = sqlite3_last_insert_rowid(s->db);
  return 0;
}

/* Index into s->strs of the string str (hash h), or -1. OUT: *k, the first
 * free collision slot of h when it is not there. */
static int64_t str_find(const bf_store *s, const char *str, uint64_t h, int64_t *k) {
  for (int64_t i = 0;; i++) {
    const int64_t *hit = bf_map3_get(&s->str_map, (int64_t)h, i, 0);
    if (!hit) {
      *k = i;
      return -1;
    }
    if (strcmp(s->strs[*hit].s, str) == 0) return *hit;
  }
}

/* Keep copy (owned from now on) as string id in the forward cache. */
static int str_add(bf_store *s, uint64_t h, int64_t k, int64_t id, char *copy) {
  if (bf_vec_grow((void **)&s->strs, &s->strs_cap, s->strs_len + 1, sizeof *s->strs, 1024) ||
      bf_map3_put(&s->str_map, (int64_t)h, k, 0, (int64_t)s->strs_len)) {
    free(copy);
    return -ENOMEM;
  }
  s->strs[s->strs_len++] = (str_ent){id, copy};
  return 0;
}

int bf_store_intern_string(bf_store *s, const char *str, int64_t *id) {
  if (!str) str = "";
  size_t len = strlen(str);
  uint64_t h = bf_hash_str(str, len);
  int64_t k = 0;
  int64_t at = str_find(s, str, h, &k);
  if (at >= 0) {
    *id = s->strs[at].id;
    return 0;
  }
  int rc = bfs_ensure_txn(s);
  if (rc) return rc;
  sqlite3_stmt *st = bfs_stmt(s, ST_STR_FIND);
  if (!st) return -EIO;
  sqlite3_bind_text(st, 1, str, (int)len, SQLITE_STATIC);
  int found = 0;
  int64_t v = 0;
  if ((rc = step_id(s, st, &v, &found))) return rc;
  sqlite3_reset(st);
  if (!found) {
    st = bfs_stmt(s, ST_STR_INS);
    if (!st) return -EIO;
    sqlite3_bind_text(st, 1, str, (int)len, SQLITE_STATIC);
    if ((rc = step_insert(s, st, &v))) return rc;
    sqlite3_reset(st);
  }
  char *copy = strdup(str);
  if (!copy || str_add(s, h, k, v, copy)) return bf_store_fail(s, -ENOMEM, "out of memory");
  *id = v;
  return 0;
}

/* Generic (a,b[,c]) → id interning through a map and two statements. */
static int intern3(bf_store *s, bf_map3 *map, int find, int ins, int nargs, int64_t a, int64_t b, int64_t c,
                   int64_t *id) {
  int64_t *hit = bf_map3_get(map, a, b, c);
  if (hit) {
    *id = *hit;
    return 0;
  }
  int rc = bfs_ensure_txn(s);
  if (rc) return rc;
  sqlite3_stmt *st = bfs_stmt(s, find);
  if (!st) return -EIO;
  sqlite3_bind_int64(st, 1, a);
  sqlite3_bind_int64(st, 2, b);
  if (nargs > 2) sqlite3_bind_int64(st, 3, c);
  int found = 0;
  int64_t v = 0;
  if ((rc = step_id(s, st, &v, &found))) return rc;
  sqlite3_reset(st);
  if (!found) {
    st = bfs_stmt(s, ins);
    if (!st) return -EIO;
    sqlite3_bind_int64(st, 1, a);
    sqlite3_bind_int64(st, 2, b);
    if (nargs > 2) sqlite3_bind_int64(st, 3, c);
    if ((rc = step_insert(s, st, &v))) return rc;
    sqlite3_reset(st);
  }
  if (bf_map3_put(map, a, b, c, v)) return bf_store_fail(s, -ENOMEM, "out of memory");
  *id = v;
  return 0;
}

int bf_store_intern_function(bf_store *s, const char *file, const char *qualname, int64_t firstlineno,
                             int64_t *id) {
  int64_t f, q;
  int rc;
  if ((rc = bf_store_intern_string(s, bf_ident_or_unknown(file), &f))) return rc;
  if ((rc = bf_store_intern_string(s, bf_ident_or_unknown(qualname), &q))) return rc;
  return intern3(s, &s->fn_map, ST_FN_FIND, ST_FN_INS, 3, f, q, firstlineno, id);
}

int bf_store_intern_frame(bf_store *s, int64_t function_id, int64_t line, int64_t *id) {
  return intern3(s, &s->fr_map, ST_FR_FIND, ST_FR_INS, 2, function_id, line, 0, id);
}

int bf_store_intern_stack(bf_store *s, int64_t parent, int64_t frame_id, int64_t *id) {
  return intern3(s, &s->stk_map, ST_STK_FIND, ST_STK_INS, 2, parent, frame_id, 0, id);
}

int bf_store_intern_thread(bf_store *s, int64_t session_id, int64_t native_tid, const char *name, int64_t *id) {
  /* The map value packs the id; names are only looked at on a miss or when
   * the caller now knows a name, so keep a flag "named" in key c=1. */
  int64_t *hit = bf_map3_get(&s->th_map, session_id, native_tid, 0);
  if (hit && (!name || bf_map3_get(&s->th_map, session_id, native_tid, 1))) {
    *id = *hit;
    return 0;
  }
  int rc = bfs_ensure_txn(s);
  if (rc) return rc;
  sqlite3_stmt *st = bfs_stmt(s, ST_TH_FIND);
  if (!st) return -EIO;
  sqlite3_bind_int64(st, 1, session_id);
  sqlite3_bind_int64(st, 2, native_tid);
  rc = sqlite3_step(st);
  int64_t v = 0;
  int named = 0;
  if (rc == SQLITE_ROW) {
    v = sqlite3_column_int64(st, 0);
    named = sqlite3_column_type(st, 1) != SQLITE_NULL;
    sqlite3_reset(st);
    if (!named && name) {
      sqlite3_stmt *up = bfs_stmt(s, ST_TH_NAME);
      if (!up) return -EIO;
      sqlite3_bind_int64(up, 1, v);
      sqlite3_bind_text(up, 2, name, -1, SQLITE_TRANSIENT);
      if (sqlite3_step(up) != SQLITE_DONE) return bfs_fail_sql(s, "name thread");
      sqlite3_reset(up);
      named = 1;
    }
  } else if (rc == SQLITE_DONE) {
    sqlite3_reset(st);
    st = bfs_stmt(s, ST_TH_INS);
    if (!st) return -EIO;
    sqlite3_bind_int64(st, 1, session_id);
    sqlite3_bind_int64(st, 2, native_tid);
    bfs_bind_text(st, 3, name);
    if ((rc = step_insert(s, st, &v))) return rc;
    sqlite3_reset(st);
    named = name != NULL;
  } else {
    return bfs_fail_sql(s, "lookup thread");
  }
  /* thread churn: the cache of thread ids is bounded (a miss is one indexed
   * lookup) */
  if (bf_map3_len(&s->th_map) >= 8192) bf_map3_free(&s->th_map);
  if (bf_map3_put(&s->th_map, session_id, native_tid, 0, v)) return bf_store_fail(s, -ENOMEM, "out of memory");
  if (named && bf_map3_put(&s->th_map, session_id, native_tid, 1, v))
    return bf_store_fail(s, -ENOMEM, "out of memory");
  *id = v;
  return 0;
}

int bf_store_thread_rename(bf_store *s, int64_t thread_id, const char *name) {
  int rc = bfs_ensure_txn(s);
  if (rc) return rc;
  sqlite3_stmt *up = bfs_stmt(s, ST_TH_NAME);
  if (!up) return -EIO;
  sqlite3_bind_int64(up, 1, thread_id);
  sqlite3_bind_text(up, 2, name, -1, SQLITE_TRANSIENT);
  rc = sqlite3_step(up);
  sqlite3_reset(up);
  return rc == SQLITE_DONE ? 0 : bfs_fail_sql(s, "rename thread");
}

/* ---- reverse lookups ----------------------------------------------------------------------- */

static int load_strings(bf_store *s, int64_t need) {
  /* Load from the missing id onward: ids below it may be known already, and
   * rows created after the last load can sit below the array's size. */
  size_t start = (size_t)s->str_max + 1;
  (void)0;
  sqlite3_stmt *st = NULL;
  if (sqlite3_prepare_v2(s->db, "SELECT id, s FROM strings WHERE id>=?1 ORDER BY id", -1, &st, NULL) != SQLITE_OK)
    return bfs_fail_sql(s, "prepare");
  sqlite3_bind_int64(st, 1, (int64_t)start);
  int rc;
  while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
    int64_t id = sqlite3_column_int64(st, 0);
    if (id < 0) continue;
    if (id > s->str_max) s->str_max = id;
    if (bf_vec_grow_zero((void **)&s->str_by_id, &s->str_by_id_cap, (size_t)id + 1, sizeof *s->str_by_id, 256)) {
      sqlite3_finalize(st);
      return bf_store_fail(s, -ENOMEM, "out of memory");
    }
    if (!s->str_by_id[id]) {
      /* Intern into the forward cache too so both share one copy. */
      const char *t = (const char *)sqlite3_column_text(st, 1);
      if (!t) t = "";
      uint64_t h = bf_hash_str(t, strlen(t));
      int64_t k = 0;
      int64_t at = str_find(s, t, h, &k);
      char *found = at >= 0 ? s->strs[at].s : strdup(t);
      if (!found || (at < 0 && str_add(s, h, k, id, found))) {
        sqlite3_finalize(st);
        return bf_store_fail(s, -ENOMEM, "out of memory");
      }
      s->str_by_id[id] = found;
    }
  }
  sqlite3_finalize(st);
  if (rc != SQLITE_DONE) return bfs_fail_sql(s, "read strings");
  if (need >= 0 && ((size_t)need >= s->str_by_id_cap || !s->str_by_id[need]))
    return bf_store_fail(s, -ENOENT, "database '%s': missing string %lld", s->path, (long long)need);
  return 0;
}

static const char *string_get(bf_store *s, int64_t id) {
  if (id < 0) return NULL;
  if ((size_t)id < s->str_by_id_cap && s->str_by_id[id]) return s->str_by_id[id];
  if (load_strings(s, id)) return NULL;
  return s->str_by_id[id];
}

/* Load rows of a (id, a, b[, c]) table with id >= from into a dense array. */
static int load_rows(bf_store *s, const char *sql, int64_t *maxid, void **arr, size_t *cap, size_t elem,
                     int ncols) {
  sqlite3_stmt *st = NULL;
  if (sqlite3_prepare_v2(s->db, sql, -1, &st, NULL) != SQLITE_OK) return bfs_fail_sql(s, "prepare");
  /* ids are dense and only grow: everything up to *maxid is loaded already */
  sqlite3_bind_int64(st, 1, *maxid + 1);
  int rc;
  while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
    int64_t id = sqlite3_column_int64(st, 0);
    if (id < 0) continue;
    if (id > *maxid) *maxid = id;
    if (bf_vec_grow_zero(arr, cap, (size_t)id + 1, elem, 256)) {
      sqlite3_finalize(st);
      return bf_store_fail(s, -ENOMEM, "out of memory");
    }
    if (ncols == 3) {
      fn_row *r = (fn_row *)*arr + id;
      r->file_id = sqlite3_column_int64(st, 1);
      r->qual_id = sqlite3_column_int64(st, 2);
      r->firstlineno = sqlite3_column_int64(st, 3);
      r->loaded = 1;
    } else {
      pair_row *r = (pair_row *)*arr + id;
      r->a = sqlite3_column_int64(st, 1);
      r->b = sqlite3_column_int64(st, 2);
      r->loaded = 1;
    }
  }
  sqlite3_finalize(st);
  if (rc != SQLITE_DONE) return bfs_fail_sql(s, "read table");
  return 0;
}

/* below the views' opcode leaves (views_int.h: -1000 .. -1255) */
#define KLEAF_BASE 2000

int64_t bf_store_kleaf_id(unsigned cls, int64_t target_id) {
  if (cls >= 16 || target_id < 0 || target_id > (INT64_MAX >> 6)) return 0;
  return -(((target_id << 4) | (int64_t)cls) + KLEAF_BASE);
}

/* The pseudo-function of a kernel leaf id: "[<target>]" in file "<kernel>". */
static int kleaf_get(bf_store *s, int64_t function_id, bf_function_ref *out) {
  int64_t *hit = bf_map3_get(&s->kleaf_map, function_id, 0, 0);
  if (!hit) {
    int64_t v = -function_id - KLEAF_BASE, target = v >> 4;
    if (v < 0) return bf_store_fail(s, -ENOENT, "no function %lld", (long long)function_id);
    unsigned cls = (unsigned)(v & 15);
    const char *text = NULL;
    if (target > 0 && !(text = string_get(s, target)))
      return bf_store_fail(s, -ENOENT, "database '%s': missing string %lld", s->path, (long long)target);
    char buf[600];
    if (text)
      snprintf(buf, sizeof buf, "[%.580s]", text);
    else if (cls == BF_WAIT_CLASSES)
      snprintf(buf, sizeof buf, "[waiting for CPU]");
    else
      snprintf(buf, sizeof buf, "[%s]", bf_wait_class_name(cls));
    char *name = strdup(buf);
    if (!name || bf_vec_grow((void **)&s->kleaf_names, &s->kleaf_cap, s->kleaf_n + 1, sizeof *s->kleaf_names, 16) ||
        bf_map3_put(&s->kleaf_map, function_id, 0, 0, (int64_t)s->kleaf_n)) {
      free(name);
      return bf_store_fail(s, -ENOMEM, "out of memory");
    }
    s->kleaf_names[s->kleaf_n] = name;
    hit = bf_map3_get(&s->kleaf_map, function_id, 0, 0);
    s->kleaf_n++;
  }
  out->id = function_id;
  out->file = BF_KLEAF_FILE;
  out->qualname = s->kleaf_names[*hit];
  out->firstlineno = 0;
  return 0;
}

int bf_store_function_get(bf_store *s, int64_t function_id, bf_function_ref *out) {
  if (function_id < 0) return kleaf_get(s, function_id, out);
  if (function_id <= 0) return bf_store_fail(s, -ENOENT, "no function %lld", (long long)function_id);
  if ((size_t)function_id >= s->fn_by_id_cap || !s->fn_by_id[function_id].loaded) {
    int rc = load_rows(s, "SELECT id, file_id, qualname_id, firstlineno FROM functions WHERE id>=?1", &s->fn_max,
                       (void **)&s->fn_by_id, &s->fn_by_id_cap, sizeof(fn_row), 3);
    if (rc) return rc;
    if ((size_t)function_id >= s->fn_by_id_cap || !s->fn_by_id[function_id].loaded)
      return bf_store_fail(s, -ENOENT, "database '%s': no function %lld", s->path, (long long)function_id);
  }
  fn_row *r = &s->fn_by_id[function_id];
  const char *file = string_get(s, r->file_id);
  const char *qual = string_get(s, r->qual_id);
  if (!file || !qual) return -ENOENT;
  out->id = function_id;
  out->file = file;
  out->qualname = qual;
  out->firstlineno = r->firstlineno;
  return 0;
}

/* Row id of a (id, a, b) reverse cache (frames, stacks), reading the rows not
 * yet loaded on a miss; -ENOENT naming what when there is none. */
static int pair_get(bf_store *s, const char *what, const char *sql, int64_t *maxid, pair_row **by_id, size_t *cap,
                    int64_t id, int64_t *a, int64_t *b) {
  if (id <= 0) return bf_store_fail(s, -ENOENT, "no %s %lld", what, (long long)id);
  if ((size_t)id >= *cap || !(*by_id)[id].loaded) {
    int rc = load_rows(s, sql, maxid, (void **)by_id, cap, sizeof(pair_row), 2);
    if (rc) return rc;
    if ((size_t)id >= *cap || !(*by_id)[id].loaded)
      return bf_store_fail(s, -ENOENT, "database '%s': no %s %lld", s->path, what, (long long)id);
  }
  *a = (*by_id)[id].a;
  *b = (*by_id)[id].b;
  return 0;
}

int bf_store_frame_get(bf_store *s, int64_t frame_id, int64_t *function_id, int64_t *line) {
  return pair_get(s, "frame", "SELECT id, function_id, line FROM frames WHERE id>=?1", &s->fr_max, &s->fr_by_id,
                  &s->fr_by_id_cap, frame_id, function_id, line);
}

int bf_store_stack_get(bf_store *s, int64_t stack_id, int64_t *parent, int64_t *frame_id) {
  return pair_get(s, "stack", "SELECT id, parent_id, frame_id FROM stacks WHERE id>=?1", &s->stk_max, &s->stk_by_id,
                  &s->stk_by_id_cap, stack_id, parent, frame_id);
}

int bf_store_stack_frames(bf_store *s, int64_t stack_id, int64_t **frames, size_t *n) {
  *frames = NULL;
  *n = 0;
  size_t len = 0, cap = 0;
  int64_t *arr = NULL;
  if (bf_vec_grow((void **)&arr, &cap, 1, sizeof *arr, 32)) return bf_store_fail(s, -ENOMEM, "out of memory");
  int64_t cur = stack_id;
  while (cur > 0) {
    int64_t parent, frame;
    int rc = bf_store_stack_get(s, cur, &parent, &frame);
    if (rc) {
      free(arr);
      return rc;
    }
    if (bf_vec_grow((void **)&arr, &cap, len + 1, sizeof *arr, 32)) {
      free(arr);
      return bf_store_fail(s, -ENOMEM, "out of memory");
    }
    arr[len++] = frame;
    if (len > 100000 || parent >= cur) { /* parents are interned first: a loop is corruption */
      free(arr);
      return bf_store_fail(s, -EBADMSG, "database '%s': corrupt stack %lld", s->path, (long long)stack_id);
    }
    cur = parent;
  }
  for (size_t i = 0; i < len / 2; i++) {
    int64_t t = arr[i];
    arr[i] = arr[len - 1 - i];
    arr[len - 1 - i] = t;
  }
  *frames = arr;
  *n = len;
  return 0;
}

int bf_store_threads(bf_store *s, int64_t session_id, bf_thread_ref **out, size_t *n) {
  *out = NULL;
  *n = 0;
  int rc = bf_store_flush(s);
  if (rc) return rc;
  sqlite3_stmt *st = NULL;
  if (sqlite3_prepare_v2(s->db, "SELECT id, native_tid, name FROM threads WHERE session_id=?1 ORDER BY id", -1,
                         &st, NULL) != SQLITE_OK)
    return bfs_fail_sql(s, "prepare");
  sqlite3_bind_int64(st, 1, session_id);
  bf_thread_ref *arr = NULL;
  size_t len = 0, cap = 0;
  while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
    if (bf_vec_grow((void **)&arr, &cap, len + 1, sizeof *arr, 8)) {
      sqlite3_finalize(st);
      bf_thread_refs_free(arr, len);
      return bf_store_fail(s, -ENOMEM, "out of memory");
    }
    arr[len].id = sqlite3_column_int64(st, 0);
    arr[len].native_tid = sqlite3_column_int64(st, 1);
    const char *nm = (const char *)sqlite3_column_text(st, 2);
    arr[len].name = nm ? strdup(nm) : NULL;
    len++;
  }
  sqlite3_finalize(st);
  if (rc != SQLITE_DONE) {
    bf_thread_refs_free(arr, len);
    return bfs_fail_sql(s, "read threads");
  }
  *out = arr;
  *n = len;
  return 0;
}

void bf_thread_refs_free(bf_thread_ref *t, size_t n) {
  if (!t) return;
  for (size_t i = 0; i < n; i++) free(t[i].name);
  free(t);
}

void bfs_drop_caches(bf_store *s) {
  /* Rolled-back or deleted rows may be cached: forget all interning caches. */
  for (size_t i = 0; i < s->strs_len; i++) free(s->strs[i].s);
  free(s->strs);
  s->strs = NULL;
  s->strs_cap = s->strs_len = 0;
  bf_map3_free(&s->str_map);
  bf_map3_free(&s->fn_map);
  bf_map3_free(&s->fr_map);
  bf_map3_free(&s->stk_map);
  bf_map3_free(&s->th_map);
  free(s->str_by_id);
  s->str_by_id = NULL;
  s->str_by_id_cap = 0;
  free(s->fn_by_id);
  s->fn_by_id = NULL;
  s->fn_by_id_cap = 0;
  free(s->fr_by_id);
  s->fr_by_id = NULL;
  s->fr_by_id_cap = 0;
  free(s->stk_by_id);
  s->stk_by_id = NULL;
  s->stk_by_id_cap = 0;
  s->str_max = s->fn_max = s->fr_max = s->stk_max = 0;
}

int bf_store_string_get(bf_store *s, int64_t id, const char **out) {
  const char *str = id > 0 ? string_get(s, id) : NULL;
  if (!str) return bf_store_fail(s, -ENOENT, "database '%s': missing string %lld", s->path, (long long)id);
  *out = str;
  return 0;
}
