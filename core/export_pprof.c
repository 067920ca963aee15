/* export_pprof.c — pprof's profile.proto, encoded by hand and gzip-compressed
 * with zlib: what `go tool pprof`, Pyroscope and Parca read. One location per
 * (function, line), one function per function identity with a unique
 * module-qualified name, a "thread" label per sample (and a "task" label on
 * the samples of asyncio tasks, record --async); values samples/count
 * plus cpu or wall nanoseconds, the default being what `replay` shares by.
 * Samples without a Python frame keep a "[no Python frame]" location. The
 * kernel lens's state (record --kernel) is two labels, not a leaf frame (so
 * pprof's self figures stay the Python leaves'): "wait" = "recvfrom tcp
 * 127.0.0.1:5432" or "waiting for CPU", "wait_class" = "network", "runq"...;
 * samples on a CPU, or not read, carry neither. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "exports.h"
#include "ident.h"
#include "map.h"
#include "pb.h"
#include "query.h"
#include "store_int.h"
#include "views_int.h"
#include "vec.h"

/* the protobuf writer shared with the OTLP export (internal/pb.h) */
typedef bf_pb pb;
#define pb_raw bf_pb_raw
#define pb_varint bf_pb_varint
#define pb_uint bf_pb_uint
#define pb_bytes bf_pb_bytes
#define pb_msg bf_pb_msg

typedef struct strtab {
  pb out;        /* encoded string_table entries */
  bf_map3 idx;   /* (hash, length) → index */
  const char **v;
  size_t n, cap;
} strtab;

static int64_t str_id(strtab *t, const char *s) {
  size_t len = strlen(s);
  uint64_t h = bf_hash_str(s, len);
  int64_t *hit = bf_map3_get(&t->idx, (int64_t)h, (int64_t)len, 0);
  if (hit && strcmp(t->v[*hit], s) == 0) return *hit;
  if (bf_vec_grow((void **)&t->v, &t->cap, t->n + 1, sizeof *t->v, 256)) {
    t->out.oom = 1;
    return 0;
  }
  t->v[t->n] = s;
  if (!hit && bf_map3_put(&t->idx, (int64_t)h, (int64_t)len, 0, (int64_t)t->n)) t->out.oom = 1;
  pb_bytes(&t->out, 6, s, len);
  return (int64_t)t->n++;
}

/* "module.qualname" from the file: base name without ".py" ("pkg" for
 * pkg/__init__.py, "X" for "<frozen X>"); C functions are already
 * "module.qualname". The dot before a "<…>" name keeps pprof's C++ name
 * clean-up away from it ("w.<module>" stays, "<module>" would become empty). */
static void display_name(char *buf, size_t len, const bf_function_ref *ref) {
  const char *f = ref->file;
  if (bf_ident_is_builtin(f)) {
    snprintf(buf, len, "%s", ref->qualname);
    return;
  }
  size_t n = strlen(f);
  const char *mod = f;
  int modlen;
  if (n > 9 && strncmp(f, "<frozen ", 8) == 0 && f[n - 1] == '>') {
    mod = f + 8;
    modlen = (int)(n - 9);
  } else {
    const char *base = strrchr(f, '/');
    mod = base ? base + 1 : f;
    modlen = (int)strlen(mod);
    if (modlen > 3 && strcmp(mod + modlen - 3, ".py") == 0) modlen -= 3;
    if (modlen == 8 && strncmp(mod, "__init__", 8) == 0 && base && base > f) {
      const char *pe = base, *ps = base;
      while (ps > f && ps[-1] != '/') ps--;
      mod = ps;
      modlen = (int)(pe - ps);
    }
    if (*mod == '<' && modlen > 2 && mod[modlen - 1] == '>') { /* "<string>", "<stdin>" */
      mod++;
      modlen -= 2;
    }
  }
  snprintf(buf, len, "%.*s.%s", modlen, mod, ref->qualname);
}

static int gzip_write(const uint8_t *d, size_t n, FILE *out) {
  z_stream z;
  memset(&z, 0, sizeof z);
  if (deflateInit2(&z, Z_DEFAULT_COMPRESSION, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK) return -ENOMEM;
  uint8_t buf[1 << 16];
  z.next_in = (Bytef *)d;
  z.avail_in = (uInt)n;
  int zr;
  do {
    z.next_out = buf;
    z.avail_out = sizeof buf;
    zr = deflate(&z, Z_FINISH);
    if (zr == Z_STREAM_ERROR) break;
    fwrite(buf, 1, sizeof buf - z.avail_out, out);
  } while (zr != Z_STREAM_END);
  deflateEnd(&z);
  return zr == Z_STREAM_END ? 0 : -EIO;
}

/* What the profile message is built from while one session is written. */
typedef struct px {
  bf_store *s;
  const bf_wstacks *w;
  pb prof, sub, sub2, locs_out, funcs_out;
  strtab st;
  bf_map3 locs, funcs, names; /* (fid, line) → location id; fid seen; (hash, length) of display names */
  char **owned;               /* display names, kept alive for the string table */
  size_t nowned, owncap, locn;
  uint64_t *locids;
  int imported;
  int64_t thread_key, task_key;
  int64_t wait_key, wait_class_key; /* label keys, interned at the first kernel leaf */
  int64_t *tnames, *ttasks; /* per thread: label string id; task name id (0: not a task) */
  char **tlabels;
} px;

/* The thread labels, and the task label of asyncio tasks (record --async):
 * their name, so `pprof -tagfocus task=NAME` selects a task's logical stacks. */
static int px_threads(px *x) {
  const bf_wstacks *w = x->w;
  size_t n = w->nthreads ? w->nthreads : 1;
  x->thread_key = str_id(&x->st, "thread");
  x->tnames = calloc(n, sizeof *x->tnames);
  x->tlabels = calloc(n, sizeof *x->tlabels);
  x->ttasks = calloc(n, sizeof *x->ttasks);
  if (!x->tnames || !x->tlabels || !x->ttasks) return -ENOMEM;
  for (size_t t = 0; t < w->nthreads; t++) {
    char lb[256];
    bf_wthread_label(&w->threads[t], lb, sizeof lb);
    x->tlabels[t] = strdup(lb);
    x->tnames[t] = x->tlabels[t] ? str_id(&x->st, x->tlabels[t]) : 0;
    const char *task = bf_task_name(w->threads[t].name, w->threads[t].native_tid);
    if (task && !x->task_key) x->task_key = str_id(&x->st, "task");
    if (task) x->ttasks[t] = str_id(&x->st, task);
  }
  return 0;
}

/* The Function message of fid: a display name unique per identity
 * ("mod.qualname", then ":firstline", then "#id"). */
static int px_function(px *x, int64_t fid) {
  bf_function_ref ref;
  int rc = bf_store_function_get(x->s, fid, &ref);
  if (rc) return rc;
  if (bf_map3_put(&x->funcs, fid, 0, 0, 1)) x->prof.oom = 1;
  char nm[1024], sys[1200];
  display_name(nm, sizeof nm, &ref);
  for (int attempt = 0; attempt < 3; attempt++) {
    if (attempt == 1) snprintf(nm + strlen(nm), sizeof nm - strlen(nm), ":%lld", (long long)ref.firstlineno);
    if (attempt == 2) snprintf(nm + strlen(nm), sizeof nm - strlen(nm), "#%lld", (long long)fid);
    size_t l = strlen(nm);
    uint64_t h = bf_hash_str(nm, l);
    if (bf_map3_get(&x->names, (int64_t)h, (int64_t)l, 0) && attempt < 2) continue;
    if (bf_map3_put(&x->names, (int64_t)h, (int64_t)l, 0, fid)) x->prof.oom = 1;
    break;
  }
  snprintf(sys, sizeof sys, "%s:%lld:%s", ref.file, (long long)ref.firstlineno, ref.qualname);
  if (bf_vec_grow((void **)&x->owned, &x->owncap, x->nowned + 2, sizeof *x->owned, 64)) return -ENOMEM;
  x->owned[x->nowned] = strdup(nm);
  x->owned[x->nowned + 1] = strdup(sys);
  if (!x->owned[x->nowned] || !x->owned[x->nowned + 1]) {
    free(x->owned[x->nowned]);
    free(x->owned[x->nowned + 1]);
    return -ENOMEM;
  }
  x->nowned += 2;
  pb_uint(&x->sub, 1, (uint64_t)fid);
  pb_uint(&x->sub, 2, (uint64_t)str_id(&x->st, x->owned[x->nowned - 2]));
  pb_uint(&x->sub, 3, (uint64_t)str_id(&x->st, x->owned[x->nowned - 1]));
  pb_uint(&x->sub, 4, (uint64_t)str_id(&x->st, ref.file));
  pb_uint(&x->sub, 5, (uint64_t)ref.firstlineno);
  pb_msg(&x->funcs_out, 5, &x->sub);
  return 0;
}

/* Functions of fa/fb by (file, firstlineno, qualname): the order names are
 * handed out in, so the same file always gets the same name. */
typedef struct fkey {
  int64_t fid;
  bf_function_ref ref;
} fkey;

static int fkey_cmp(const void *a, const void *b) {
  const bf_function_ref *x = &((const fkey *)a)->ref, *y = &((const fkey *)b)->ref;
  int c = strcmp(x->file ? x->file : "", y->file ? y->file : "");
  if (c) return c;
  if (x->firstlineno != y->firstlineno) return x->firstlineno < y->firstlineno ? -1 : 1;
  c = strcmp(x->qualname ? x->qualname : "", y->qualname ? y->qualname : "");
  if (c) return c;
  return ((const fkey *)a)->fid < ((const fkey *)b)->fid ? -1 : ((const fkey *)a)->fid > ((const fkey *)b)->fid;
}

/* Every function of the stacks, written in path order (before any Location)
 * so that disambiguated names do not depend on which stack came first. */
static int px_functions_sorted(px *x) {
  const bf_wstacks *w = x->w;
  bf_map3 seen = {0};
  fkey *k = NULL;
  size_t n = 0, cap = 0;
  int rc = 0;
  for (size_t i = 0; i < w->nf && !rc; i++) {
    int64_t fid = w->fids[i];
    if (bf_map3_get(&seen, fid, 0, 0)) continue;
    if (bf_map3_put(&seen, fid, 0, 0, 1) || bf_vec_grow((void **)&k, &cap, n + 1, sizeof *k, 64)) {
      rc = -ENOMEM;
      break;
    }
    k[n].fid = fid;
    rc = bf_store_function_get(x->s, fid, &k[n].ref);
    n++;
  }
  if (!rc && n > 1) qsort(k, n, sizeof *k, fkey_cmp); /* k is NULL when there is no function */
  for (size_t i = 0; i < n && !rc; i++)
    if (!bf_map3_get(&x->funcs, k[i].fid, 0, 0)) rc = px_function(x, k[i].fid);
  bf_map3_free(&seen);
  free(k);
  return rc;
}

/* The location id of (fid, line), writing its Location (and Function) the
 * first time. 0 on error (rc in *rc). */
static uint64_t px_location(px *x, int64_t fid, int64_t line, int *rc) {
  int64_t *hit = bf_map3_get(&x->locs, fid, line, 0);
  if (hit) return (uint64_t)*hit;
  if (!bf_map3_get(&x->funcs, fid, 0, 0) && (*rc = px_function(x, fid))) return 0;
  x->locn++;
  if (bf_map3_put(&x->locs, fid, line, 0, (int64_t)x->locn)) x->prof.oom = 1;
  pb_uint(&x->sub2, 1, (uint64_t)fid);
  pb_uint(&x->sub2, 2, (uint64_t)line);
  pb_uint(&x->sub, 1, x->locn);
  pb_msg(&x->sub, 4, &x->sub2);
  pb_msg(&x->locs_out, 4, &x->sub);
  return x->locn;
}

/* One Sample: x->sub2 holds its packed location ids; then values and labels
 * (kleaf: the kernel leaf of the row, 0 none). */
static void px_sample(px *x, size_t thread, int64_t count, double weight, int64_t kleaf) {
  pb_bytes(&x->sub, 1, x->sub2.b, x->sub2.n);
  x->sub2.n = 0;
  pb_varint(&x->sub2, (uint64_t)count);
  if (!x->imported) pb_varint(&x->sub2, (uint64_t)(weight + 0.5));
  pb_bytes(&x->sub, 2, x->sub2.b, x->sub2.n);
  x->sub2.n = 0;
  pb_uint(&x->sub2, 1, (uint64_t)x->thread_key);
  pb_uint(&x->sub2, 2, (uint64_t)x->tnames[thread]);
  pb_msg(&x->sub, 3, &x->sub2);
  if (x->ttasks[thread]) {
    pb_uint(&x->sub2, 1, (uint64_t)x->task_key);
    pb_uint(&x->sub2, 2, (uint64_t)x->ttasks[thread]);
    pb_msg(&x->sub, 3, &x->sub2);
  }
  bf_function_ref ref;
  if (kleaf && bf_store_function_get(x->s, kleaf, &ref) == 0) {
    unsigned cls = (unsigned)((-kleaf - 2000) & 15); /* bf_store_kleaf_id's encoding */
    const char *name = ref.qualname; /* "[recvfrom tcp 127.0.0.1:5432]": the text inside */
    size_t len = strlen(name);
    char *text = len >= 2 && name[0] == '[' ? strndup(name + 1, len - 2) : strdup(name);
    if (!text || bf_vec_grow((void **)&x->owned, &x->owncap, x->nowned + 1, sizeof *x->owned, 64)) {
      free(text);
      x->prof.oom = 1;
      return;
    }
    x->owned[x->nowned++] = text;
    if (!x->wait_key) {
      x->wait_key = str_id(&x->st, "wait");
      x->wait_class_key = str_id(&x->st, "wait_class");
    }
    pb_uint(&x->sub2, 1, (uint64_t)x->wait_key);
    pb_uint(&x->sub2, 2, (uint64_t)str_id(&x->st, text));
    pb_msg(&x->sub, 3, &x->sub2);
    pb_uint(&x->sub2, 1, (uint64_t)x->wait_class_key);
    pb_uint(&x->sub2, 2, (uint64_t)str_id(&x->st, cls >= BF_WAIT_CLASSES ? "runq" : bf_wait_class_name(cls)));
    pb_msg(&x->sub, 3, &x->sub2);
  }
  pb_msg(&x->prof, 2, &x->sub);
}

/* Every stack as a Sample (pprof wants the leaf first). */
static int px_stacks(px *x) {
  const bf_wstacks *w = x->w;
  size_t maxd = 0;
  for (size_t i = 0; i < w->n; i++)
    if (w->v[i].depth > maxd) maxd = w->v[i].depth;
  x->locids = malloc((maxd ? maxd : 1) * sizeof *x->locids);
  if (!x->locids) return -ENOMEM;
  for (size_t i = 0; i < w->n; i++) {
    const bf_wstack *sk = &w->v[i];
    int rc = 0;
    uint32_t depth = sk->depth;
    int64_t kleaf = depth && w->fids[sk->off + depth - 1] <= -2000 ? w->fids[sk->off + depth - 1] : 0;
    if (kleaf) depth--; /* the kernel leaf: labels, not a location */
    for (uint32_t d = 0; d < depth; d++) {
      uint64_t id = px_location(x, w->fids[sk->off + d], w->lines[sk->off + d], &rc);
      if (rc) return rc;
      x->locids[depth - 1 - d] = id;
    }
    for (uint32_t d = 0; d < depth; d++) pb_varint(&x->sub2, x->locids[d]);
    px_sample(x, (size_t)sk->thread, sk->count, sk->weight, kleaf);
  }
  return 0;
}

/* Samples without a Python frame: one location of a pseudo function, per thread. */
static void px_no_frame(px *x, int64_t noframe_name, int64_t noframe_sys) {
  const bf_wstacks *w = x->w;
  if (w->empty_count <= 0) return;
  uint64_t fid0 = 0, loc0 = ++x->locn;
  for (size_t i = 0; i < w->n; i++)
    for (uint32_t d = 0; d < w->v[i].depth; d++)
      if ((uint64_t)w->fids[w->v[i].off + d] > fid0) fid0 = (uint64_t)w->fids[w->v[i].off + d];
  fid0++;
  pb_uint(&x->sub, 1, fid0);
  pb_uint(&x->sub, 2, (uint64_t)noframe_name);
  pb_uint(&x->sub, 3, (uint64_t)noframe_sys);
  pb_msg(&x->funcs_out, 5, &x->sub);
  pb_uint(&x->sub2, 1, fid0);
  pb_uint(&x->sub, 1, loc0);
  pb_msg(&x->sub, 4, &x->sub2);
  pb_msg(&x->locs_out, 4, &x->sub);
  for (size_t t = 0; t < w->nthreads; t++) {
    if (w->threads[t].empty_count <= 0) continue;
    pb_varint(&x->sub2, loc0);
    px_sample(x, t, w->threads[t].empty_count, w->threads[t].empty_weight, 0);
  }
}

static void px_free(px *x) {
  for (size_t i = 0; i < x->nowned; i++) free(x->owned[i]);
  free(x->owned);
  bf_map3_free(&x->names);
  free(x->locs_out.b);
  free(x->funcs_out.b);
  free(x->locids);
  for (size_t t = 0; x->tlabels && t < x->w->nthreads; t++) free(x->tlabels[t]);
  free(x->tlabels);
  free(x->tnames);
  free(x->ttasks);
  free(x->prof.b);
  free(x->sub.b);
  free(x->sub2.b);
  free(x->st.out.b);
  free(x->st.v);
  bf_map3_free(&x->st.idx);
  bf_map3_free(&x->locs);
  bf_map3_free(&x->funcs);
}

/* w's profile; memory stacks (w->unit "bytes") as samples/count and
 * alloc_space/bytes of resident growth, without a period. Frees w. */
static int pprof_write(bf_store *s, bf_wstacks *w, FILE *out) {
  int rc, mem = w->unit != NULL;
  px x = {.s = s, .w = w, .imported = bf_q_kind_of(w->info) == BF_Q_IMPORTED};
  const char *clock = mem ? "alloc_space" : bf_q_clock_of(w->info) == BF_Q_CPU ? "cpu" : "wall";
  const char *unit = mem ? "bytes" : "nanoseconds";
  str_id(&x.st, "");
  /* sample types: samples/count, then (not for imports) cpu|wall/nanoseconds */
  int64_t count_type = str_id(&x.st, w->traced ? "calls" : "samples");
  pb_uint(&x.sub, 1, (uint64_t)count_type);
  pb_uint(&x.sub, 2, (uint64_t)str_id(&x.st, "count"));
  pb_msg(&x.prof, 1, &x.sub);
  int64_t time_type = str_id(&x.st, clock);
  if (!x.imported) {
    pb_uint(&x.sub, 1, (uint64_t)time_type);
    pb_uint(&x.sub, 2, (uint64_t)str_id(&x.st, unit));
    pb_msg(&x.prof, 1, &x.sub);
  }
  /* pprof's default index is what replay's shares are computed from */
  int64_t default_type = (x.imported || !w->by_weight) ? count_type : time_type;
  int64_t noframe_name = str_id(&x.st, "[no Python frame]");
  int64_t noframe_sys = str_id(&x.st, "bifocal:no-python-frame");
  if ((rc = px_threads(&x)) || (rc = px_functions_sorted(&x)) || (rc = px_stacks(&x))) goto out;
  px_no_frame(&x, noframe_name, noframe_sys);
  pb_raw(&x.prof, x.locs_out.b, x.locs_out.n);
  pb_raw(&x.prof, x.funcs_out.b, x.funcs_out.n);
  x.prof.oom |= x.locs_out.oom | x.funcs_out.oom;
  pb_raw(&x.prof, x.st.out.b, x.st.out.n);
  x.prof.oom |= x.st.out.oom;
  if (w->info->start_ns > 0) pb_uint(&x.prof, 9, (uint64_t)w->info->start_ns);
  if (w->info->duration_ns > 0) pb_uint(&x.prof, 10, (uint64_t)w->info->duration_ns);
  if (!x.imported && !mem) {
    /* period type and period: the sampling interval (strings appended after
     * the table above would be lost, so both were interned up front) */
    pb_uint(&x.sub, 1, (uint64_t)str_id(&x.st, clock));
    pb_uint(&x.sub, 2, (uint64_t)str_id(&x.st, "nanoseconds"));
    pb_msg(&x.prof, 11, &x.sub);
    if (w->info->rate_hz > 0) pb_uint(&x.prof, 12, (uint64_t)(1e9 / w->info->rate_hz + 0.5));
  }
  pb_uint(&x.prof, 14, (uint64_t)default_type);
  if (x.prof.oom) {
    rc = -ENOMEM;
    goto out;
  }
  rc = gzip_write(x.prof.b, x.prof.n, out);
  if (rc == -EIO) bf_store_fail(s, rc, "gzip compression failed");
out:
  if (rc == -ENOMEM) bf_store_fail(s, rc, "out of memory");
  px_free(&x);
  bf_wstacks_free(w);
  return rc;
}

int bf_export_pprof(bf_store *s, int64_t session_id, const bf_sample_filter *f, FILE *out) {
  bf_wstacks *w = NULL;
  bf_sample_filter fk = {0};
  if (f) fk = *f;
  fk.kernel_leaf = 1; /* as labels (px_sample); no-op unless recorded with --kernel */
  int rc = bf_wstacks_load(s, session_id, &fk, &w);
  return rc ? rc : pprof_write(s, w, out);
}

int bf_export_pprof_memory(bf_store *s, int64_t session_id, const bf_sample_filter *f, FILE *out) {
  bf_wstacks *w = NULL;
  int rc = bf_wstacks_load_memory(s, session_id, f, 0, &w);
  return rc ? rc : pprof_write(s, w, out);
}
