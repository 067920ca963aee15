/* export_pprof.c — pprof's profile.proto, encoded by hand and gzip-compressed
 * with zlib: what `go tool pprof`, Pyroscope and Parca read. One location per
 * (function, line), one function per function identity with a unique
 * module-qualified name, a "thread" label per sample (and a "task" label on
 * the samples of asyncio tasks, record --async); values samples/count
 * plus cpu or wall nanoseconds, the default being what `replay` shares by.
 * Samples without a Python frame keep a "[no Python frame]" location. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "query.h"
#include "store_int.h"
#include "views.h"
#include "views_int.h"
#include "vec.h"

typedef struct pb {
  uint8_t *b;
  size_t n, cap;
  int oom;
} pb;

static void pb_raw(pb *p, const void *d, size_t n) {
  if (p->oom || n == 0) return;
  if (bf_vec_grow((void **)&p->b, &p->cap, p->n + n, 1, 4096)) {
    p->oom = 1;
    return;
  }
  memcpy(p->b + p->n, d, n);
  p->n += n;
}

static void pb_varint(pb *p, uint64_t v) {
  uint8_t buf[10];
  size_t n = 0;
  do {
    buf[n] = (uint8_t)(v & 0x7f);
    v >>= 7;
    if (v) buf[n] |= 0x80;
    n++;
  } while (v);
  pb_raw(p, buf, n);
}

static void pb_uint(pb *p, int field, uint64_t v) {
  pb_varint(p, (uint64_t)field << 3);
  pb_varint(p, v);
}

static void pb_bytes(pb *p, int field, const void *d, size_t n) {
  pb_varint(p, (uint64_t)field << 3 | 2);
  pb_varint(p, n);
  pb_raw(p, d, n);
}

static void pb_msg(pb *p, int field, pb *sub) {
  pb_bytes(p, field, sub->b, sub->n);
  p->oom |= sub->oom;
  sub->n = 0;
}

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
  if (strcmp(f, "<builtin>") == 0) {
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

int bf_export_pprof(bf_store *s, int64_t session_id, const bf_sample_filter *f, FILE *out) {
  bf_wstacks *w = NULL;
  int rc = bf_wstacks_load(s, session_id, f, &w);
  if (rc) return rc;
  pb prof = {0}, sub = {0}, sub2 = {0};
  strtab st = {0};
  bf_map3 locs = {0}, funcs = {0};
  uint64_t *locids = NULL;
  size_t locn = 0;
  int imported = (bf_q_kind_of(w->info) == BF_Q_IMPORTED);
  const char *clock = bf_q_clock_of(w->info) == BF_Q_CPU ? "cpu" : "wall";
  bf_map3 names = {0}; /* (hash, length) of each display name given out */
  char **owned = NULL; /* display names, kept alive for the string table */
  size_t nowned = 0, owncap = 0;
  str_id(&st, "");
  /* sample types: samples/count, then (not for imports) cpu|wall/nanoseconds */
  int64_t count_type = str_id(&st, w->traced ? "calls" : "samples");
  pb_uint(&sub, 1, (uint64_t)count_type);
  pb_uint(&sub, 2, (uint64_t)str_id(&st, "count"));
  pb_msg(&prof, 1, &sub);
  int64_t time_type = str_id(&st, clock);
  if (!imported) {
    pb_uint(&sub, 1, (uint64_t)time_type);
    pb_uint(&sub, 2, (uint64_t)str_id(&st, "nanoseconds"));
    pb_msg(&prof, 1, &sub);
  }
  /* pprof's default index is what replay's shares are computed from */
  int64_t default_type = (imported || !w->by_weight) ? count_type : time_type;
  int64_t noframe_name = str_id(&st, "[no Python frame]");
  int64_t noframe_sys = str_id(&st, "bifocal:no-python-frame");
  int64_t thread_key = str_id(&st, "thread");
  int64_t *tnames = calloc(w->nthreads ? w->nthreads : 1, sizeof *tnames);
  if (!tnames) {
    rc = -ENOMEM;
    goto out;
  }
  char **tlabels = calloc(w->nthreads ? w->nthreads : 1, sizeof *tlabels);
  if (!tlabels) {
    free(tnames);
    rc = -ENOMEM;
    goto out;
  }
  /* asyncio tasks (record --async) also get a "task" label: their name, so
   * `pprof -tagfocus task=NAME` selects a task's logical stacks */
  int64_t *ttasks = calloc(w->nthreads ? w->nthreads : 1, sizeof *ttasks);
  int64_t task_key = 0;
  if (!ttasks) {
    free(tnames);
    free(tlabels);
    rc = -ENOMEM;
    goto out;
  }
  for (size_t t = 0; t < w->nthreads; t++) {
    char lb[256];
    bf_wthread_label(&w->threads[t], lb, sizeof lb);
    tlabels[t] = strdup(lb);
    tnames[t] = tlabels[t] ? str_id(&st, tlabels[t]) : 0;
    const char *task = bf_task_name(w->threads[t].name, w->threads[t].native_tid);
    if (task && !task_key) task_key = str_id(&st, "task");
    if (task) ttasks[t] = str_id(&st, task);
  }
  size_t maxd = 0;
  for (size_t i = 0; i < w->n; i++)
    if (w->v[i].depth > maxd) maxd = w->v[i].depth;
  locids = malloc((maxd ? maxd : 1) * sizeof *locids);
  if (!locids) {
    rc = -ENOMEM;
    goto free_threads;
  }
  pb locs_out = {0}, funcs_out = {0};
  for (size_t i = 0; i < w->n; i++) {
    const bf_wstack *sk = &w->v[i];
    for (uint32_t d = 0; d < sk->depth; d++) {
      int64_t fid = w->fids[sk->off + d], line = w->lines[sk->off + d];
      int64_t *hit = bf_map3_get(&locs, fid, line, 0);
      if (!hit) {
        if (!bf_map3_get(&funcs, fid, 0, 0)) {
          bf_function_ref ref;
          if ((rc = bf_store_function_get(s, fid, &ref))) goto free_all;
          if (bf_map3_put(&funcs, fid, 0, 0, 1)) prof.oom = 1;
          /* unique name per identity: "mod.qualname", then ":firstline", then "#id" */
          char nm[1024], sys[1200];
          display_name(nm, sizeof nm, &ref);
          for (int attempt = 0; attempt < 3; attempt++) {
            if (attempt == 1) snprintf(nm + strlen(nm), sizeof nm - strlen(nm), ":%lld", (long long)ref.firstlineno);
            if (attempt == 2) snprintf(nm + strlen(nm), sizeof nm - strlen(nm), "#%lld", (long long)fid);
            size_t l = strlen(nm);
            uint64_t h = bf_hash_str(nm, l);
            if (bf_map3_get(&names, (int64_t)h, (int64_t)l, 0) && attempt < 2) continue;
            if (bf_map3_put(&names, (int64_t)h, (int64_t)l, 0, fid)) prof.oom = 1;
            break;
          }
          snprintf(sys, sizeof sys, "%s:%lld:%s", ref.file, (long long)ref.firstlineno, ref.qualname);
          if (bf_vec_grow((void **)&owned, &owncap, nowned + 2, sizeof *owned, 64)) {
            rc = -ENOMEM;
            goto free_all;
          }
          owned[nowned] = strdup(nm);
          owned[nowned + 1] = strdup(sys);
          if (!owned[nowned] || !owned[nowned + 1]) {
            free(owned[nowned]);
            free(owned[nowned + 1]);
            rc = -ENOMEM;
            goto free_all;
          }
          nowned += 2;
          pb_uint(&sub, 1, (uint64_t)fid);
          pb_uint(&sub, 2, (uint64_t)str_id(&st, owned[nowned - 2]));
          pb_uint(&sub, 3, (uint64_t)str_id(&st, owned[nowned - 1]));
          pb_uint(&sub, 4, (uint64_t)str_id(&st, ref.file));
          pb_uint(&sub, 5, (uint64_t)ref.firstlineno);
          pb_msg(&funcs_out, 5, &sub);
        }
        locn++;
        if (bf_map3_put(&locs, fid, line, 0, (int64_t)locn)) prof.oom = 1;
        pb_uint(&sub2, 1, (uint64_t)fid);
        pb_uint(&sub2, 2, (uint64_t)line);
        pb_uint(&sub, 1, locn);
        pb_msg(&sub, 4, &sub2);
        pb_msg(&locs_out, 4, &sub);
        locids[sk->depth - 1 - d] = locn;
      } else {
        locids[sk->depth - 1 - d] = (uint64_t)*hit; /* pprof wants the leaf first */
      }
    }
    /* Sample: packed location ids, packed values, thread label */
    for (uint32_t d = 0; d < sk->depth; d++) pb_varint(&sub2, locids[d]);
    pb_bytes(&sub, 1, sub2.b, sub2.n);
    sub2.n = 0;
    pb_varint(&sub2, (uint64_t)sk->count);
    if (!imported) pb_varint(&sub2, (uint64_t)(sk->weight + 0.5));
    pb_bytes(&sub, 2, sub2.b, sub2.n);
    sub2.n = 0;
    pb_uint(&sub2, 1, (uint64_t)thread_key);
    pb_uint(&sub2, 2, (uint64_t)tnames[sk->thread]);
    pb_msg(&sub, 3, &sub2);
    if (ttasks[sk->thread]) {
      pb_uint(&sub2, 1, (uint64_t)task_key);
      pb_uint(&sub2, 2, (uint64_t)ttasks[sk->thread]);
      pb_msg(&sub, 3, &sub2);
    }
    pb_msg(&prof, 2, &sub);
  }
  /* samples without a Python frame: one location of a pseudo function, per thread */
  if (w->empty_count > 0) {
    uint64_t fid0 = 0, loc0 = ++locn;
    for (size_t i = 0; i < w->n; i++)
      for (uint32_t d = 0; d < w->v[i].depth; d++)
        if ((uint64_t)w->fids[w->v[i].off + d] > fid0) fid0 = (uint64_t)w->fids[w->v[i].off + d];
    fid0++;
    pb_uint(&sub, 1, fid0);
    pb_uint(&sub, 2, (uint64_t)noframe_name);
    pb_uint(&sub, 3, (uint64_t)noframe_sys);
    pb_msg(&funcs_out, 5, &sub);
    pb_uint(&sub2, 1, fid0);
    pb_uint(&sub, 1, loc0);
    pb_msg(&sub, 4, &sub2);
    pb_msg(&locs_out, 4, &sub);
    for (size_t t = 0; t < w->nthreads; t++) {
      if (w->threads[t].empty_count <= 0) continue;
      pb_varint(&sub2, loc0);
      pb_bytes(&sub, 1, sub2.b, sub2.n);
      sub2.n = 0;
      pb_varint(&sub2, (uint64_t)w->threads[t].empty_count);
      if (!imported) pb_varint(&sub2, (uint64_t)(w->threads[t].empty_weight + 0.5));
      pb_bytes(&sub, 2, sub2.b, sub2.n);
      sub2.n = 0;
      pb_uint(&sub2, 1, (uint64_t)thread_key);
      pb_uint(&sub2, 2, (uint64_t)tnames[t]);
      pb_msg(&sub, 3, &sub2);
      if (ttasks[t]) {
        pb_uint(&sub2, 1, (uint64_t)task_key);
        pb_uint(&sub2, 2, (uint64_t)ttasks[t]);
        pb_msg(&sub, 3, &sub2);
      }
      pb_msg(&prof, 2, &sub);
    }
  }
  pb_raw(&prof, locs_out.b, locs_out.n);
  pb_raw(&prof, funcs_out.b, funcs_out.n);
  prof.oom |= locs_out.oom | funcs_out.oom;
  pb_raw(&prof, st.out.b, st.out.n);
  prof.oom |= st.out.oom;
  if (w->info->start_ns > 0) pb_uint(&prof, 9, (uint64_t)w->info->start_ns);
  if (w->info->duration_ns > 0) pb_uint(&prof, 10, (uint64_t)w->info->duration_ns);
  if (!imported) {
    /* period type and period: the sampling interval (strings appended after
     * the table above would be lost, so both were interned up front) */
    pb_uint(&sub, 1, (uint64_t)str_id(&st, clock));
    pb_uint(&sub, 2, (uint64_t)str_id(&st, "nanoseconds"));
    pb_msg(&prof, 11, &sub);
    if (w->info->rate_hz > 0) pb_uint(&prof, 12, (uint64_t)(1e9 / w->info->rate_hz + 0.5));
  }
  pb_uint(&prof, 14, (uint64_t)default_type);
  if (prof.oom) {
    rc = -ENOMEM;
    goto free_all;
  }
  rc = gzip_write(prof.b, prof.n, out);
  if (rc == -EIO) bf_store_fail(s, rc, "gzip compression failed");
free_all:
  for (size_t i = 0; i < nowned; i++) free(owned[i]);
  free(owned);
  bf_map3_free(&names);
  free(locs_out.b);
  free(funcs_out.b);
  free(locids);
free_threads:
  for (size_t t = 0; t < w->nthreads; t++) free(tlabels[t]);
  free(tlabels);
  free(tnames);
  free(ttasks);
out:
  if (rc == -ENOMEM) bf_store_fail(s, rc, "out of memory");
  free(prof.b);
  free(sub.b);
  free(sub2.b);
  free(st.out.b);
  free(st.v);
  bf_map3_free(&st.idx);
  bf_map3_free(&locs);
  bf_map3_free(&funcs);
  bf_wstacks_free(w);
  return rc;
}
