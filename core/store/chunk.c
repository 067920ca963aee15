/* chunk.c — samples: per-thread buffers, the compact chunk codec, batched
 * writes and the chunk readers. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "store_impl.h"
#include "vec.h"

/* Chunk encoding, per record:
 *   ctrl byte: bit0 same stack as previous, bit1 same flags, bit2 count==1,
 *              bit3 weight == delta ts, bit4 weight == previous weight,
 *              bit5 kernel fields follow, bit6 kernel wait and target as the
 *              previous record's with no run-queue delay nor fault
 *   varint delta_ts (from previous record; first from the chunk's first_ts)
 *   [varint stack] [byte flags] [varint count] [varint weight]
 *   [bit5: varint wait, varint target, varint runq_ns, varint majflt,
 *          varint cpu_ns (wait BF_WAIT_CPU: weight - runq_ns - cpu_ns, the
 *          usual 0 of a thread that ran throughout)]
 * Typical wall-clock samples cost 5–7 bytes; a kernel state adds 0 bytes
 * when it repeats (a thread blocked on one socket), else 4-8. Chunks
 * written before the kernel lens never set bits 5-6 and decode as before
 * (wait 0: not read). */
enum { C_SAME_STACK = 1, C_SAME_FLAGS = 2, C_COUNT1 = 4, C_W_DTS = 8, C_W_PREV = 16, C_KERNEL = 32, C_K_SAME = 64 };

static int encode_chunk(bf_store *s, const bf_sample *r, size_t n, size_t *out_len) {
  size_t need = n * 92 + 16;
  if (s->enc_cap < need) {
    uint8_t *ne = realloc(s->enc, need);
    if (!ne) return -ENOMEM;
    s->enc = ne;
    s->enc_cap = need;
  }
  uint8_t *p = s->enc;
  int64_t prev_ts = r[0].ts_ns, prev_stack = -1, prev_w = -1, prev_target = -1;
  uint32_t prev_flags = 0xffffffffu, prev_wait = 0xffffffffu;
  for (size_t i = 0; i < n; i++) {
    const bf_sample *x = &r[i];
    int64_t dts = x->ts_ns - prev_ts;
    if (dts < 0) dts = 0; /* non-decreasing by contract; clamp defensively */
    uint8_t ctrl = 0;
    if (x->stack_id == prev_stack) ctrl |= C_SAME_STACK;
    if (x->flags == prev_flags) ctrl |= C_SAME_FLAGS;
    if (x->count <= 1) ctrl |= C_COUNT1;
    if (x->weight == dts && dts > 0)
      ctrl |= C_W_DTS;
    else if (x->weight == prev_w)
      ctrl |= C_W_PREV;
    int64_t runq = x->runq_ns < 0 ? 0 : x->runq_ns, target = x->wait_target < 0 ? 0 : x->wait_target;
    int64_t w = x->weight < 0 ? 0 : x->weight, cpu = x->cpu_ns < 0 ? 0 : x->cpu_ns;
    if (runq > w) runq = w;
    if (cpu > w - runq) cpu = w - runq;
    int64_t kcpu = x->wait == BF_WAIT_CPU ? w - runq - cpu : cpu;
    if (x->wait) {
      if (x->wait == prev_wait && target == prev_target && !runq && !x->majflt && !kcpu)
        ctrl |= C_K_SAME;
      else
        ctrl |= C_KERNEL;
    }
    *p++ = ctrl;
    p += bf_varint_put(p, (uint64_t)dts);
    if (!(ctrl & C_SAME_STACK)) p += bf_varint_put(p, (uint64_t)x->stack_id);
    if (!(ctrl & C_SAME_FLAGS)) p += bf_varint_put(p, x->flags);
    if (!(ctrl & C_COUNT1)) p += bf_varint_put(p, x->count);
    if (!(ctrl & (C_W_DTS | C_W_PREV))) p += bf_varint_put(p, (uint64_t)(x->weight < 0 ? 0 : x->weight));
    if (ctrl & C_KERNEL) {
      p += bf_varint_put(p, x->wait);
      p += bf_varint_put(p, (uint64_t)target);
      p += bf_varint_put(p, (uint64_t)runq);
      p += bf_varint_put(p, x->majflt);
      p += bf_varint_put(p, (uint64_t)kcpu);
    }
    prev_wait = x->wait;
    prev_target = target;
    prev_ts = prev_ts + dts;
    prev_stack = x->stack_id;
    prev_flags = x->flags;
    prev_w = x->weight < 0 ? 0 : x->weight;
  }
  *out_len = (size_t)(p - s->enc);
  return 0;
}

int bf_chunk_decode(const uint8_t *d, size_t len, int64_t thread_id, int64_t first_ts, const bf_sample_filter *f,
                    bf_sample_fn fn, void *ud) {
  size_t i = 0;
  bf_sample x = {.thread_id = thread_id, .ts_ns = first_ts, .stack_id = -1, .flags = 0, .weight = 0};
  int have_prev = 0;
  while (i < len) {
    uint8_t ctrl = d[i++];
    uint64_t v;
    size_t k;
    if ((ctrl & ~127u) || ((ctrl & C_KERNEL) && (ctrl & C_K_SAME)) || ((ctrl & C_K_SAME) && !x.wait)) return -EBADMSG;
    if (!(k = bf_varint_get(d + i, len - i, &v)) || v > (1ULL << 62)) return -EBADMSG;
    i += k;
    int64_t dts = (int64_t)v;
    x.ts_ns += dts;
    if (!(ctrl & C_SAME_STACK)) {
      if (!(k = bf_varint_get(d + i, len - i, &v)) || v > (1ULL << 62)) return -EBADMSG;
      i += k;
      x.stack_id = (int64_t)v;
    } else if (!have_prev) {
      return -EBADMSG;
    }
    if (!(ctrl & C_SAME_FLAGS)) {
      if (!(k = bf_varint_get(d + i, len - i, &v)) || v > 0xffffffffu) return -EBADMSG;
      i += k;
      x.flags = (uint32_t)v;
    } else if (!have_prev) {
      return -EBADMSG;
    }
    if (!(ctrl & C_COUNT1)) {
      if (!(k = bf_varint_get(d + i, len - i, &v)) || v > 0xffffffffu) return -EBADMSG;
      i += k;
      x.count = (uint32_t)v;
    } else {
      x.count = 1;
    }
    if (ctrl & C_W_DTS) {
      x.weight = dts;
    } else if (ctrl & C_W_PREV) {
      if (!have_prev) return -EBADMSG;
    } else {
      if (!(k = bf_varint_get(d + i, len - i, &v)) || v > (1ULL << 62)) return -EBADMSG;
      i += k;
      x.weight = (int64_t)v;
    }
    if (ctrl & C_KERNEL) {
      uint64_t kv[5];
      for (int j = 0; j < 5; j++) {
        if (!(k = bf_varint_get(d + i, len - i, &kv[j])) || kv[j] > (1ULL << 62)) return -EBADMSG;
        i += k;
      }
      if (!kv[0] || kv[0] >= BF_WAIT_CLASSES || kv[3] > 0xffffffffu) return -EBADMSG;
      x.wait = (uint32_t)kv[0];
      x.wait_target = (int64_t)kv[1];
      x.runq_ns = (int64_t)kv[2];
      x.majflt = (uint32_t)kv[3];
      if ((int64_t)kv[2] > x.weight || (int64_t)kv[4] > x.weight - (int64_t)kv[2]) return -EBADMSG;
      x.cpu_ns = x.wait == BF_WAIT_CPU ? x.weight - x.runq_ns - (int64_t)kv[4] : (int64_t)kv[4];
    } else if (ctrl & C_K_SAME) {
      x.runq_ns = 0;
      x.majflt = 0;
      x.cpu_ns = x.wait == BF_WAIT_CPU ? x.weight : 0;
    } else {
      x.wait = 0;
      x.wait_target = x.runq_ns = x.cpu_ns = 0;
      x.majflt = 0;
    }
    have_prev = 1;
    if (f) {
      if (f->since_ns && x.ts_ns < f->since_ns) continue;
      if (f->until_ns > 0 && x.ts_ns >= f->until_ns) continue;
    }
    int r = fn(ud, &x);
    if (r) return r;
  }
  return 0;
}

static int write_chunk(bf_store *s, thread_buf *b) {
  if (!b->n) return 0;
  int rc = bfs_ensure_txn(s);
  if (rc) return rc;
  size_t len = 0;
  if ((rc = encode_chunk(s, b->recs, b->n, &len))) return bf_store_fail(s, rc, "out of memory");
  int64_t nsamples = 0;
  for (size_t i = 0; i < b->n; i++) nsamples += b->recs[i].count ? b->recs[i].count : 1;
  sqlite3_stmt *st = bfs_stmt(s, ST_CHUNK_INS);
  if (!st) return -EIO;
  sqlite3_bind_int64(st, 1, b->session_id);
  sqlite3_bind_int64(st, 2, b->thread_id);
  sqlite3_bind_int64(st, 3, b->recs[0].ts_ns);
  sqlite3_bind_int64(st, 4, b->recs[b->n - 1].ts_ns);
  sqlite3_bind_int64(st, 5, (int64_t)b->n);
  sqlite3_bind_int64(st, 6, nsamples);
  sqlite3_bind_blob(st, 7, s->enc, (int)len, SQLITE_STATIC);
  if (sqlite3_step(st) != SQLITE_DONE) return bfs_fail_sql(s, "write samples");
  sqlite3_reset(st);
  s->uncommitted_samples += nsamples;
  b->n = 0;
  return 0;
}

static int maybe_commit(bf_store *s) {
  if (s->txn_depth == 0 && s->txn_open && s->uncommitted_samples >= COMMIT_SAMPLES) {
    int rc = bfs_exec(s, "COMMIT");
    if (rc) return rc;
    s->txn_open = 0;
    s->uncommitted_samples = 0;
  }
  return 0;
}

void bf_store_set_busy_timeout(bf_store *s, int ms) {
  s->busy_ms = ms;
  sqlite3_busy_timeout(s->db, ms);
}

int bf_store_sample_add(bf_store *s, int64_t session_id, const bf_sample *smp) {
  thread_buf *b = NULL;
  if (s->last_buf < s->nbufs && s->bufs[s->last_buf].thread_id == smp->thread_id &&
      s->bufs[s->last_buf].session_id == session_id) {
    b = &s->bufs[s->last_buf];
  } else if (s->last_buf + 1 < s->nbufs && s->bufs[s->last_buf + 1].thread_id == smp->thread_id &&
             s->bufs[s->last_buf + 1].session_id == session_id) { /* threads in tick order */
    b = &s->bufs[++s->last_buf];
  } else {
    for (size_t i = 0; i < s->nbufs; i++)
      if (s->bufs[i].thread_id == smp->thread_id && s->bufs[i].session_id == session_id) {
        b = &s->bufs[i];
        s->last_buf = i;
        break;
      }
    if (!b) {
      if (s->readonly) return bf_store_fail(s, -EACCES, "database '%s' is open read-only", s->path);
      if (bf_vec_grow((void **)&s->bufs, &s->bufs_cap, s->nbufs + 1, sizeof *s->bufs, 8))
        return bf_store_fail(s, -ENOMEM, "out of memory");
      b = &s->bufs[s->nbufs];
      *b = (thread_buf){.session_id = session_id, .thread_id = smp->thread_id};
      s->last_buf = s->nbufs++;
    }
  }
  if (b->n && smp->ts_ns < b->recs[b->n - 1].ts_ns)
    return bf_store_fail(s, -EINVAL, "sample timestamps must not go backwards within a thread");
  if (b->n >= CHUNK_RECORDS) { /* an earlier write failed (e.g. the database was locked): retry it */
    int rc = write_chunk(s, b);
    if (rc) return rc; /* this sample was not added */
  }
  /* small at first (short-lived threads are common); doubling from 16 ends
   * at CHUNK_RECORDS, a power of two */
  if (b->n == b->cap && bf_vec_grow((void **)&b->recs, &b->cap, b->n + 1, sizeof *b->recs, 16))
    return bf_store_fail(s, -ENOMEM, "out of memory");
  b->recs[b->n++] = *smp;
  b->idle_flushes = 0;
  /* from here on the sample is kept: a locked database only delays it */
  if (b->n >= CHUNK_RECORDS) {
    int rc = write_chunk(s, b);
    if (!rc) rc = maybe_commit(s);
    if (rc) return rc == -EBUSY ? 0 : rc;
  }
  /* A long capture must neither hold the write lock (other writers, e.g. a
   * tracer sharing the file, wait on it) nor keep its samples only in memory:
   * commit every 250 ms and write buffered chunks every second. */
  if ((++s->add_counter & 63) == 0) {
    int rc = bf_store_checkpoint(s);
    return rc == -EBUSY ? 0 : rc;
  }
  return 0;
}

int64_t bf_store_sample_amend_runq(bf_store *s, int64_t session_id, int64_t thread_id, int64_t ns, size_t max_back) {
  thread_buf *b = NULL;
  if (s->last_buf < s->nbufs && s->bufs[s->last_buf].thread_id == thread_id &&
      s->bufs[s->last_buf].session_id == session_id)
    b = &s->bufs[s->last_buf];
  for (size_t i = 0; !b && i < s->nbufs; i++)
    if (s->bufs[i].thread_id == thread_id && s->bufs[i].session_id == session_id) b = &s->bufs[i];
  if (!b || ns <= 0 || b->n < 2) return 0; /* just written out: nothing left to move to */
  int64_t done = 0;
  /* the newest is the sample the wait was recorded at: it had its share */
  for (size_t i = b->n - 1, seen = 0; i-- > 0 && seen < max_back && done < ns; seen++) {
    bf_sample *x = &b->recs[i];
    int64_t rest = x->weight - x->runq_ns - x->cpu_ns;
    if (!x->wait || x->wait == BF_WAIT_CPU || !(x->flags & BF_SAMPLE_ON_CPU) || rest <= 0) continue;
    int64_t take = rest < ns - done ? rest : ns - done;
    x->runq_ns += take;
    done += take;
  }
  return done;
}

int bf_store_checkpoint(bf_store *s) {
  if (s->readonly || s->txn_depth > 0) return 0;
  int64_t now = bf_mono_ns();
  if (!s->last_flush_ns) s->last_flush_ns = now;
  if (now - s->last_flush_ns > 1000000000LL) {
    s->last_flush_ns = now;
    return bf_store_flush(s);
  }
  if (s->txn_open && now - s->txn_started_ns > 250000000LL) {
    int rc = bfs_exec(s, "COMMIT");
    if (rc) return rc;
    s->txn_open = 0;
    s->uncommitted_samples = 0;
  }
  return 0;
}

int bf_store_flush(bf_store *s) {
  if (s->readonly) return 0;
  for (size_t i = 0; i < s->nbufs; i++) {
    int rc = write_chunk(s, &s->bufs[i]);
    if (rc) return rc;
  }
  /* free the buffers of threads that stopped sending samples (thread churn
   * must not grow memory) */
  for (size_t i = 0; i < s->nbufs;) {
    if (++s->bufs[i].idle_flushes <= 1) {
      i++;
      continue;
    }
    free(s->bufs[i].recs);
    s->bufs[i] = s->bufs[--s->nbufs];
    s->last_buf = 0;
  }
  if (s->txn_depth == 0 && s->txn_open) {
    int rc = bfs_exec(s, "COMMIT");
    if (rc) return rc;
    s->txn_open = 0;
    s->uncommitted_samples = 0;
  }
  return 0;
}

/* The chunk reader's SQL: one session, or (tree) the session and every
 * descendant (record --subprocesses) as one; every thread or one. */
static const char *chunks_sql(int tree, int one_thread) {
#define TREE_SQL                                                                                  \
  "WITH RECURSIVE tree(id) AS (SELECT ?1 UNION SELECT s.id FROM sessions s JOIN tree ON s.parent_id=tree.id) " \
  "SELECT thread_id, first_ts_ns, last_ts_ns, data FROM sample_chunks WHERE session_id IN (SELECT id FROM tree) "
  return tree ? (one_thread ? TREE_SQL "AND thread_id=?2 ORDER BY thread_id, first_ts_ns, id"
                            : TREE_SQL "ORDER BY thread_id, first_ts_ns, id")
         : one_thread ? "SELECT thread_id, first_ts_ns, last_ts_ns, data FROM sample_chunks WHERE session_id=?1 "
                        "AND thread_id=?2 ORDER BY thread_id, first_ts_ns, id"
                      : "SELECT thread_id, first_ts_ns, last_ts_ns, data FROM sample_chunks WHERE session_id=?1 "
                        "ORDER BY thread_id, first_ts_ns, id";
#undef TREE_SQL
}

int bf_store_samples_foreach(bf_store *s, int64_t session_id, const bf_sample_filter *f, bf_sample_fn fn,
                             void *ud) {
  int rc = bf_store_flush(s);
  if (rc) return rc;
  sqlite3_stmt *st = NULL;
  const char *sql = chunks_sql(f && f->tree, f && f->thread_id);
  if (sqlite3_prepare_v2(s->db, sql, -1, &st, NULL) != SQLITE_OK) return bfs_fail_sql(s, "prepare");
  sqlite3_bind_int64(st, 1, session_id);
  if (f && f->thread_id) sqlite3_bind_int64(st, 2, f->thread_id);
  while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
    int64_t tid = sqlite3_column_int64(st, 0);
    int64_t first = sqlite3_column_int64(st, 1), last = sqlite3_column_int64(st, 2);
    if (f && f->until_ns > 0 && first >= f->until_ns) continue;
    if (f && f->since_ns && last < f->since_ns) continue;
    const uint8_t *d = sqlite3_column_blob(st, 3);
    size_t len = (size_t)sqlite3_column_bytes(st, 3);
    int r = bf_chunk_decode(d, len, tid, first, f, fn, ud);
    if (r == -EBADMSG) {
      sqlite3_finalize(st);
      return bf_store_fail(s, -EBADMSG,
                           "database '%s': a sample chunk of session %lld is corrupt (the file was changed "
                           "outside bifocal); its other sessions are intact: record or import this one again",
                           s->path, (long long)session_id);
    }
    if (r) {
      sqlite3_finalize(st);
      return r;
    }
  }
  sqlite3_finalize(st);
  if (rc != SQLITE_DONE) return bfs_fail_sql(s, "read samples");
  return 0;
}

void bfs_bufs_free(bf_store *s) {
  for (size_t i = 0; i < s->nbufs; i++) free(s->bufs[i].recs);
  free(s->bufs);
  s->bufs = NULL;
  s->nbufs = s->bufs_cap = 0;
}

/* ---- the chunk cursor (the query layer's timeline) ---- */

struct bf_store_chunks {
  bf_store *s;
  sqlite3_stmt *st;
};

int bf_store_chunks_open(bf_store *s, int64_t session_id, const bf_sample_filter *f, bf_store_chunks **out) {
  *out = NULL;
  bf_store_chunks *c = calloc(1, sizeof *c);
  if (!c) return bf_store_fail(s, -ENOMEM, "out of memory");
  c->s = s;
  if (sqlite3_prepare_v2(s->db, chunks_sql(0, f && f->thread_id), -1, &c->st, NULL) != SQLITE_OK) {
    int rc = bf_store_fail(s, -EIO, "database '%s': cannot read samples: %s", s->path, sqlite3_errmsg(s->db));
    free(c);
    return rc;
  }
  sqlite3_bind_int64(c->st, 1, session_id);
  if (f && f->thread_id) sqlite3_bind_int64(c->st, 2, f->thread_id);
  *out = c;
  return 0;
}

int bf_store_chunks_next(bf_store_chunks *c, int64_t *thread_id, int64_t *first_ts_ns, int64_t *last_ts_ns,
                         const uint8_t **data, size_t *len) {
  int rc = sqlite3_step(c->st);
  if (rc == SQLITE_DONE) return 0;
  if (rc != SQLITE_ROW)
    return bf_store_fail(c->s, -EIO, "database '%s': cannot read samples: %s", c->s->path,
                         sqlite3_errmsg(c->s->db));
  *thread_id = sqlite3_column_int64(c->st, 0);
  *first_ts_ns = sqlite3_column_int64(c->st, 1);
  *last_ts_ns = sqlite3_column_int64(c->st, 2);
  *data = sqlite3_column_blob(c->st, 3);
  *len = (size_t)sqlite3_column_bytes(c->st, 3);
  return 1;
}

void bf_store_chunks_close(bf_store_chunks *c) {
  if (!c) return;
  sqlite3_finalize(c->st);
  free(c);
}

const char *bf_wait_class_name(unsigned cls) {
  static const char *const names[BF_WAIT_CLASSES] = {"", "cpu", "network", "disk", "lock", "gil", "sleep", "fault",
                                                     "other"};
  return cls < BF_WAIT_CLASSES ? names[cls] : "other";
}
