/* copy.c — session copy between two stores through the public store API.
 *
 * Functions, frames, stacks and threads are re-interned in the destination
 * with per-copy id maps, so the copy is self-contained and shares nothing
 * with the source's numbering.
 */
#include <errno.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "copy.h"
#include "ident.h"
#include "store_int.h"
#include "trace_memory.h"

typedef struct copier {
  bf_store *src, *dst;
  const bf_copy_opts *o;
  int64_t src_session, dst_session;
  bf_map3 fn, fr, stk, th, wt; /* source id → destination id (wt: kernel wait targets) */
  int src_failed;          /* the message is on src, not dst */
} copier;

static int from_src(copier *c, int rc) {
  c->src_failed = 1;
  return rc;
}

static int map_function(copier *c, int64_t fid, int64_t *out) {
  if (fid == 0) {
    *out = 0;
    return 0;
  }
  int64_t *hit = bf_map3_get(&c->fn, fid, 0, 0);
  if (hit) {
    *out = *hit;
    return 0;
  }
  bf_function_ref ref;
  int rc = bf_store_function_get(c->src, fid, &ref);
  if (rc) return from_src(c, rc);
  char *file = NULL, *qual = NULL;
  if (c->o && c->o->map_file && !(file = c->o->map_file(c->o->ud, bf_ident_or_unknown(ref.file))))
    return bf_store_fail(c->dst, -ENOMEM, "out of memory");
  if (c->o && c->o->map_qualname && !(qual = c->o->map_qualname(c->o->ud, bf_ident_or_unknown(ref.qualname)))) {
    free(file);
    return bf_store_fail(c->dst, -ENOMEM, "out of memory");
  }
  rc = bf_store_intern_function(c->dst, file ? file : ref.file, qual ? qual : ref.qualname, ref.firstlineno, out);
  free(file);
  free(qual);
  if (rc) return rc;
  return bf_map3_put(&c->fn, fid, 0, 0, *out) ? bf_store_fail(c->dst, -ENOMEM, "out of memory") : 0;
}

static int map_frame(copier *c, int64_t frid, int64_t *out) {
  int64_t *hit = bf_map3_get(&c->fr, frid, 0, 0);
  if (hit) {
    *out = *hit;
    return 0;
  }
  int64_t fid, line, nfid;
  int rc = bf_store_frame_get(c->src, frid, &fid, &line);
  if (rc) return from_src(c, rc);
  if ((rc = map_function(c, fid, &nfid))) return rc;
  if ((rc = bf_store_intern_frame(c->dst, nfid, line, out))) return rc;
  return bf_map3_put(&c->fr, frid, 0, 0, *out) ? bf_store_fail(c->dst, -ENOMEM, "out of memory") : 0;
}

static int map_stack(copier *c, int64_t sid, int64_t *out) {
  if (sid == 0) {
    *out = 0;
    return 0;
  }
  int64_t *hit = bf_map3_get(&c->stk, sid, 0, 0);
  if (hit) {
    *out = *hit;
    return 0;
  }
  int64_t *frames = NULL;
  size_t n = 0;
  int rc = bf_store_stack_frames(c->src, sid, &frames, &n);
  if (rc) return from_src(c, rc);
  int64_t parent = 0;
  for (size_t i = 0; i < n && !rc; i++) {
    int64_t nfr;
    if ((rc = map_frame(c, frames[i], &nfr))) break;
    rc = bf_store_intern_stack(c->dst, parent, nfr, &parent);
  }
  free(frames);
  if (rc) return rc;
  *out = parent;
  return bf_map3_put(&c->stk, sid, 0, 0, parent) ? bf_store_fail(c->dst, -ENOMEM, "out of memory") : 0;
}

static int map_thread(copier *c, int64_t tid, int64_t *out) {
  if (tid == 0) {
    *out = 0;
    return 0;
  }
  int64_t *hit = bf_map3_get(&c->th, tid, 0, 0);
  if (!hit)
    return bf_store_fail(c->dst, -EBADMSG, "session %lld refers to thread %lld that it does not have",
                         (long long)c->src_session, (long long)tid);
  *out = *hit;
  return 0;
}

/* A kernel wait target ("recvfrom tcp 10.0.0.5:5432"); a redacting copy
 * (one that rewrites files) keeps its first two words only: no address,
 * no path. */
static int map_wait_target(copier *c, int64_t id, int64_t *out) {
  if (id <= 0) {
    *out = 0;
    return 0;
  }
  int64_t *hit = bf_map3_get(&c->wt, id, 0, 0);
  if (hit) {
    *out = *hit;
    return 0;
  }
  const char *text;
  int rc = bf_store_string_get(c->src, id, &text);
  if (rc) return from_src(c, rc);
  char buf[256];
  snprintf(buf, sizeof buf, "%s", text);
  if (c->o && c->o->map_file) {
    char *sp = strchr(buf, ' ');
    if (sp && (sp = strchr(sp + 1, ' '))) *sp = 0;
  }
  if ((rc = bf_store_intern_string(c->dst, buf, out))) return rc;
  return bf_map3_put(&c->wt, id, 0, 0, *out) ? bf_store_fail(c->dst, -ENOMEM, "out of memory") : 0;
}

static int copy_sample(void *ud, const bf_sample *smp) {
  copier *c = ud;
  bf_sample n = *smp;
  int rc;
  if ((rc = map_thread(c, smp->thread_id, &n.thread_id))) return rc;
  if ((rc = map_stack(c, smp->stack_id, &n.stack_id))) return rc;
  if ((rc = map_wait_target(c, smp->wait_target, &n.wait_target))) return rc;
  return bf_store_sample_add(c->dst, c->dst_session, &n);
}

static int copy_memory_sample(void *ud, const bf_memory_sample *m) {
  copier *c = ud;
  bf_memory_sample n = *m;
  int rc;
  if ((rc = map_thread(c, m->thread_id, &n.thread_id))) return rc;
  if ((rc = map_stack(c, m->stack_id, &n.stack_id))) return rc;
  return bf_store_memory_samples_add(c->dst, c->dst_session, &n, 1);
}

static int copy_memory_point(void *ud, const bf_memory_point *p) {
  copier *c = ud;
  return bf_store_memory_points_add(c->dst, c->dst_session, p, 1);
}

static int copy_trace_func(void *ud, const bf_trace_func *tf) {
  copier *c = ud;
  bf_trace_func n = *tf;
  int rc = map_function(c, tf->function_id, &n.function_id);
  return rc ? rc : bf_store_trace_func_put(c->dst, c->dst_session, &n);
}

static int copy_trace_edge(void *ud, const bf_trace_edge *te) {
  copier *c = ud;
  bf_trace_edge n = *te;
  int rc;
  if ((rc = map_function(c, te->caller_function_id, &n.caller_function_id))) return rc;
  if ((rc = map_function(c, te->callee_function_id, &n.callee_function_id))) return rc;
  return bf_store_trace_edge_put(c->dst, c->dst_session, &n);
}

static int copy_trace_memory(void *ud, const bf_trace_memory *m) {
  copier *c = ud;
  bf_trace_memory n = *m;
  int rc = map_function(c, m->function_id, &n.function_id);
  return rc ? rc : bf_store_trace_memory_put(c->dst, c->dst_session, &n);
}

static int copy_trace_memory_edge(void *ud, const bf_trace_memory *m) {
  copier *c = ud;
  bf_trace_memory n = *m;
  int rc;
  if ((rc = map_function(c, m->caller_function_id, &n.caller_function_id))) return rc;
  if ((rc = map_function(c, m->function_id, &n.function_id))) return rc;
  return bf_store_trace_memory_edge_put(c->dst, c->dst_session, &n);
}

static int copy_trace_memory_top(void *ud, const bf_trace_memory_top *t) {
  copier *c = ud;
  bf_trace_memory_top n = *t;
  int64_t *stack = malloc((t->nstack ? t->nstack : 1) * sizeof *stack);
  if (!stack) return bf_store_fail(c->dst, -ENOMEM, "out of memory");
  int rc = map_function(c, t->function_id, &n.function_id);
  for (size_t i = 0; i < t->nstack && !rc; i++) rc = map_function(c, t->stack[i], &stack[i]);
  n.stack = stack;
  if (!rc) rc = bf_store_trace_memory_top_put(c->dst, c->dst_session, &n);
  free(stack);
  return rc;
}

/* trace --memory's rows (core/trace_memory.h). */
static int copy_trace_memory_all(copier *c, bf_store *src, int64_t session_id) {
  int rc = bf_store_trace_memory_foreach(src, session_id, copy_trace_memory, c);
  if (!rc) rc = bf_store_trace_memory_edges_foreach(src, session_id, copy_trace_memory_edge, c);
  if (!rc) rc = bf_store_trace_memory_top_foreach(src, session_id, copy_trace_memory_top, c);
  return rc;
}

static int copy_call_record(void *ud, const bf_call_record *r) {
  copier *c = ud;
  bf_call_record n = *r;
  int rc;
  if ((rc = map_function(c, r->function_id, &n.function_id))) return rc;
  if ((rc = map_function(c, r->parent_function_id, &n.parent_function_id))) return rc;
  if ((rc = map_thread(c, r->thread_id, &n.thread_id))) return rc;
  return bf_store_call_record_add(c->dst, c->dst_session, &n);
}

static int copy_threads(copier *c) {
  bf_thread_ref *t = NULL;
  size_t n = 0;
  int rc = bf_store_threads(c->src, c->src_session, &t, &n);
  if (rc) return from_src(c, rc);
  for (size_t i = 0; i < n && !rc; i++) {
    int64_t nid;
    if ((rc = bf_store_intern_thread(c->dst, c->dst_session, t[i].native_tid, t[i].name, &nid))) break;
    if (bf_map3_put(&c->th, t[i].id, 0, 0, nid)) rc = bf_store_fail(c->dst, -ENOMEM, "out of memory");
  }
  bf_thread_refs_free(t, n);
  return rc;
}

int bf_session_copy(bf_store *src, int64_t session_id, bf_store *dst, const bf_copy_opts *o,
                    int64_t *new_id) {
  copier c = {.src = src, .dst = dst, .o = o, .src_session = session_id};
  bf_store_fail(dst, 0, "%s", ""); /* a failure that leaves dst silent is src's (a foreach's own) */
  bf_session_info *info = NULL;
  char *json = NULL;
  int rc = bf_store_session_get(src, session_id, &info);
  if (rc) {
    c.src_failed = 1;
    goto out;
  }
  bf_session_info meta = *info;
  meta.id = 0;
  meta.parent_id = 0; /* the parent is not part of the copy */
  if (o && o->drop_host_command) {
    meta.host = NULL;
    meta.command = NULL;
  }
  if (o && o->mark_redacted) meta.redacted = 1;
  if (o && o->label) meta.label = o->label;
  if (o && o->expires_at_ns) meta.expires_at_ns = o->expires_at_ns;
  if (o && o->map_json && info->extra_json) {
    if (!(json = o->map_json(o->ud, info->extra_json))) {
      rc = bf_store_fail(dst, -ENOMEM, "out of memory");
      goto out;
    }
    meta.extra_json = json;
  }
  if ((rc = bf_store_begin(dst))) goto out;
  if ((rc = bf_store_session_begin(dst, &meta, &c.dst_session))) goto fail;
  if ((rc = copy_threads(&c))) goto fail;
  if ((rc = bf_store_samples_foreach(src, session_id, NULL, copy_sample, &c))) goto fail;
  if ((rc = bf_store_trace_funcs_foreach(src, session_id, copy_trace_func, &c))) goto fail;
  if ((rc = bf_store_trace_edges_foreach(src, session_id, copy_trace_edge, &c))) goto fail;
  if ((rc = bf_store_call_records_foreach(src, session_id, copy_call_record, &c))) goto fail;
  if ((rc = bf_store_memory_foreach(src, session_id, NULL, copy_memory_sample, &c))) goto fail;
  if ((rc = bf_store_memory_timeline_foreach(src, session_id, copy_memory_point, &c))) goto fail;
  if ((rc = copy_trace_memory_all(&c, src, session_id))) goto fail;
  meta.id = c.dst_session;
  if ((rc = bf_store_session_update(dst, &meta))) goto fail;
  if ((rc = bf_store_commit(dst))) goto fail;
  *new_id = c.dst_session;
  goto out;
fail:
  bf_store_rollback(dst);
out:
  /* A foreach stops with the callback's rc; which handle holds the message is
   * tracked in c.src_failed. */
  if (rc && (c.src_failed || !bf_store_errmsg(dst)[0])) bf_store_fail(dst, rc, "%s", bf_store_errmsg(src));
  bf_session_info_free(info);
  free(json);
  bf_map3_free(&c.fn);
  bf_map3_free(&c.fr);
  bf_map3_free(&c.stk);
  bf_map3_free(&c.th);
  bf_map3_free(&c.wt);
  return rc;
}

static void unlink_db(const char *path) {
  static const char *const sfx[] = {"", "-wal", "-shm", "-journal"};
  char buf[4096];
  for (size_t i = 0; i < sizeof sfx / sizeof sfx[0]; i++) {
    snprintf(buf, sizeof buf, "%s%s", path, sfx[i]);
    unlink(buf);
  }
}

int bf_session_extract(bf_store *src, int64_t session_id, const char *out_path, const bf_copy_opts *o,
                       int64_t *new_id) {
  if (access(out_path, F_OK) == 0)
    return bf_store_fail(src, -EEXIST, "'%s' already exists; remove it or choose another output file",
                         out_path);
  char *tmp = NULL;
  if (asprintf(&tmp, "%s.tmp.%d", out_path, (int)getpid()) < 0) return bf_store_fail(src, -ENOMEM, "out of memory");
  unlink_db(tmp);
  bf_store *dst = NULL;
  bf_err msg = BF_ERR_INIT;
  int64_t id = 0;
  int rc = bf_store_open(tmp, BF_STORE_CREATE, &dst, &msg);
  if (rc) {
    bf_store_fail(src, rc, "cannot create '%s': %s", out_path, bf_err_msg(&msg, strerror(-rc)));
    goto out;
  }
  /* secure_delete: pages freed by rollbacks or VACUUM are zeroed, so no byte of
   * anything dropped survives in the file. */
  if ((rc = bf_store_secure_delete(dst))) goto fail_dst;
  if ((rc = bf_session_copy(src, session_id, dst, o, &id))) goto fail_dst;
  if (o && o->mark_redacted &&
      (rc = bf_store_mark_redacted(dst)))
    goto fail_dst;
  if ((rc = bf_store_flush(dst))) goto fail_dst;
  if ((rc = bf_store_compact(dst, BF_STORE_COMPACT_STANDALONE))) goto fail_dst;
  bf_store_close(dst);
  dst = NULL;
  /* link() refuses an existing target atomically, unlike rename(). */
  if (link(tmp, out_path) != 0) {
    rc = -errno;
    bf_store_fail(src, rc, "cannot create '%s': %s", out_path, strerror(errno));
    goto out;
  }
  if (new_id) *new_id = id;
  goto out;
fail_dst:
  bf_store_fail(src, rc, "%s", bf_store_errmsg(dst));
out:
  bf_store_close(dst);
  unlink_db(tmp);
  free(tmp);
  return rc;
}
