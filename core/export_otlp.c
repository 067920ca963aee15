/* export_otlp.c — sessions as an OTLP ExportProfilesServiceRequest
 * (opentelemetry-proto 1.11.0, profiles/v1development), encoded by hand like
 * export_pprof.c: one shared dictionary (strings, functions, locations,
 * stacks, attributes; each table's entry 0 the zero value), one
 * ResourceProfiles per session, one Profile per value type. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "otlp.h"
#include "pb.h"
#include "query.h"
#include "store_int.h"
#include "text.h"
#include "views_int.h"

#define NOFRAME_FID (-1)

typedef struct ox {
  bf_store *s;
  bf_pb_strtab st;
  bf_pb locs, funcs, attrs, stacks; /* dictionary tables after their zero entry */
  int32_t nloc, nfunc, nattr, nstack;
  bf_map3 loc_idx, func_idx, attr_idx, stack_idx;
  bf_pb rps; /* encoded ResourceProfiles entries */
  int oom;
} ox;

/* s with invalid UTF-8 bytes replaced by U+FFFD (protobuf strings must be
 * UTF-8; thread names and file names may not be): NULL when s is valid
 * already, else a copy the caller frees (*oom set when none can be made). */
static char *utf8_fixed(const char *s, int *oom) {
  size_t n = strlen(s), i = 0;
  uint32_t cp;
  while (i < n) {
    size_t k = bf_utf8_seq((const unsigned char *)s + i, n - i, &cp);
    if (!k) break;
    i += k;
  }
  if (i == n) return NULL;
  char *fixed = malloc(n * 3 + 1), *o = fixed;
  if (!fixed) {
    *oom = 1;
    return NULL;
  }
  for (i = 0; i < n;) {
    size_t k = bf_utf8_seq((const unsigned char *)s + i, n - i, &cp);
    if (k) {
      memcpy(o, s + i, k);
      o += k;
      i += k;
    } else {
      memcpy(o, "\xef\xbf\xbd", 3);
      o += 3;
      i++;
    }
  }
  *o = 0;
  return fixed;
}

/* String-table index of s (made valid UTF-8). */
static int32_t sid(ox *x, const char *s) {
  if (!s) s = "";
  char *fixed = utf8_fixed(s, &x->oom);
  int32_t id = bf_pb_str_id(&x->st, fixed ? fixed : s);
  free(fixed);
  return id;
}

/* ---- AnyValue and attributes ------------------------------------------------ */
enum { AV_STR = 1, AV_INT = 3, AV_DBL = 4 };

static void anyvalue(bf_pb *p, int kind, const char *str, int64_t i, double d) {
  if (kind == AV_STR) bf_pb_str(p, 1, str);
  if (kind == AV_INT) bf_pb_uint(p, 3, (uint64_t)i);
  if (kind == AV_DBL) {
    uint64_t bits;
    memcpy(&bits, &d, sizeof bits);
    bf_pb_fixed64(p, 4, bits);
  }
}

/* Index of the attribute-table entry key = value (unit may be NULL). */
static int32_t attr(ox *x, const char *key, int kind, const char *str, int64_t i, double d, const char *unit) {
  int32_t k = sid(x, key), u = unit ? sid(x, unit) : 0;
  int64_t bits = i;
  if (kind == AV_STR) bits = (int64_t)(bf_hash_str(str, strlen(str)) ^ (uint64_t)strlen(str) << 48);
  if (kind == AV_DBL) memcpy(&bits, &d, sizeof bits);
  int64_t *hit = bf_map3_get(&x->attr_idx, k, kind | (int64_t)u << 8, bits);
  if (hit) return (int32_t)*hit;
  bf_pb e = {0}, v = {0};
  bf_pb_uint(&e, 1, (uint64_t)k);
  anyvalue(&v, kind, str, i, d);
  bf_pb_msg(&e, 2, &v);
  if (u) bf_pb_uint(&e, 3, (uint64_t)u);
  bf_pb_msg(&x->attrs, 6, &e);
  x->oom |= e.oom | v.oom;
  bf_pb_free(&e);
  bf_pb_free(&v);
  if (bf_map3_put(&x->attr_idx, k, kind | (int64_t)u << 8, bits, x->nattr)) x->oom = 1;
  return x->nattr++;
}

static int32_t attr_s(ox *x, const char *key, const char *v) { return attr(x, key, AV_STR, v ? v : "", 0, 0, NULL); }
static int32_t attr_i(ox *x, const char *key, int64_t v) { return attr(x, key, AV_INT, NULL, v, 0, NULL); }

/* A KeyValue (Resource attributes carry their strings inline). */
static void keyvalue(bf_pb *p, int field, const char *key, int kind, const char *str, int64_t i) {
  bf_pb kv = {0}, v = {0};
  bf_pb_str(&kv, 1, key);
  anyvalue(&v, kind, str, i, 0);
  bf_pb_msg(&kv, 2, &v);
  bf_pb_msg(p, field, &kv);
  p->oom |= kv.oom;
  bf_pb_free(&kv);
  bf_pb_free(&v);
}

/* ---- functions, locations, stacks ------------------------------------------- */

/* Function index of fid (NOFRAME_FID: the "[no Python frame]" pseudo function).
 * OUT: *firstline. */
static int func_index(ox *x, int64_t fid, int64_t *firstline, int32_t *out) {
  int64_t *hit = bf_map3_get(&x->func_idx, fid, 0, 0);
  bf_function_ref ref = {.file = "", .qualname = BF_NO_PYTHON_FRAME};
  if (fid != NOFRAME_FID) {
    int rc = bf_store_function_get(x->s, fid, &ref);
    if (rc) return rc;
  }
  *firstline = ref.firstlineno;
  if (hit) {
    *out = (int32_t)*hit;
    return 0;
  }
  char sys[2048];
  if (fid == NOFRAME_FID)
    snprintf(sys, sizeof sys, "bifocal:no-python-frame");
  else
    snprintf(sys, sizeof sys, "%s:%lld:%s", ref.file, (long long)ref.firstlineno, ref.qualname);
  bf_pb f = {0};
  bf_pb_uint(&f, 1, (uint64_t)sid(x, ref.qualname));
  bf_pb_uint(&f, 2, (uint64_t)sid(x, sys));
  if (*ref.file) bf_pb_uint(&f, 3, (uint64_t)sid(x, ref.file));
  if (ref.firstlineno) bf_pb_uint(&f, 4, (uint64_t)ref.firstlineno);
  bf_pb_msg(&x->funcs, 3, &f);
  bf_pb_free(&f);
  if (bf_map3_put(&x->func_idx, fid, 0, 0, x->nfunc)) x->oom = 1;
  *out = x->nfunc++;
  return 0;
}

/* Location index of (fid, line); line < 0: the function's first line. */
static int loc_index(ox *x, int64_t fid, int64_t line, int32_t *out) {
  int64_t first;
  int32_t fi;
  int rc = func_index(x, fid, &first, &fi);
  if (rc) return rc;
  if (line < 0) line = first;
  int64_t *hit = bf_map3_get(&x->loc_idx, fid, line, 0);
  if (hit) {
    *out = (int32_t)*hit;
    return 0;
  }
  bf_pb l = {0}, ln = {0};
  bf_pb_uint(&ln, 1, (uint64_t)fi);
  if (line) bf_pb_uint(&ln, 2, (uint64_t)line);
  bf_pb_msg(&l, 3, &ln);
  bf_pb_msg(&x->locs, 2, &l);
  bf_pb_free(&l);
  bf_pb_free(&ln);
  if (bf_map3_put(&x->loc_idx, fid, line, 0, x->nloc)) x->oom = 1;
  *out = x->nloc++;
  return 0;
}

/* Stack index for key (a, b, c) with locations loc[0..n) (leaf first),
 * writing the Stack the first time the key is seen. */
static int32_t stack_index(ox *x, int64_t a, int64_t b, int64_t c, const int32_t *loc, size_t n) {
  int64_t *hit = bf_map3_get(&x->stack_idx, a, b, c);
  if (hit) return (int32_t)*hit;
  bf_pb st = {0}, packed = {0};
  for (size_t i = 0; i < n; i++) bf_pb_varint(&packed, (uint64_t)loc[i]);
  if (n) bf_pb_msg(&st, 1, &packed);
  bf_pb_msg(&x->stacks, 7, &st);
  x->oom |= packed.oom;
  bf_pb_free(&st);
  bf_pb_free(&packed);
  if (bf_map3_put(&x->stack_idx, a, b, c, x->nstack)) x->oom = 1;
  return x->nstack++;
}

/* ---- one session ------------------------------------------------------------ */

typedef struct osess {
  ox *x;
  const bf_session_info *info;
  bf_wstacks *w;
  int32_t (*tattr)[3]; /* per thread: thread.id, thread.name, bifocal.task (0: none) */
  int32_t *stk;        /* per wstack row: stack index; then the no-frame stack */
  int32_t noframe_stack;
  bf_pb edges;         /* traced: the calls profile's samples */
  int32_t pattr[24];   /* the profile's attribute indices */
  size_t npattr;
} osess;

static void sample(bf_pb *prof, int32_t stack, const int32_t *attrs, int64_t value) {
  bf_pb smp = {0}, packed = {0};
  bf_pb_uint(&smp, 1, (uint64_t)stack);
  for (int i = 0; attrs && i < 3; i++)
    if (attrs[i]) bf_pb_varint(&packed, (uint64_t)attrs[i]);
  if (packed.n) bf_pb_msg(&smp, 2, &packed);
  bf_pb_varint(&packed, (uint64_t)value);
  bf_pb_msg(&smp, 4, &packed);
  bf_pb_msg(prof, 2, &smp);
  prof->oom |= packed.oom;
  bf_pb_free(&smp);
  bf_pb_free(&packed);
}

static int sess_threads(osess *o) {
  const bf_wstacks *w = o->w;
  o->tattr = calloc(w->nthreads ? w->nthreads : 1, sizeof *o->tattr);
  if (!o->tattr) return -ENOMEM;
  for (size_t t = 0; t < w->nthreads; t++) {
    const bf_wthread *th = &w->threads[t];
    const char *task = bf_task_name(th->name, th->native_tid);
    if (task) {
      o->tattr[t][2] = attr_s(o->x, "bifocal.task", task);
      continue;
    }
    if (th->id == 0) continue; /* traced "all threads" */
    o->tattr[t][0] = attr_i(o->x, "thread.id", th->native_tid);
    if (th->name && *th->name) o->tattr[t][1] = attr_s(o->x, "thread.name", th->name);
  }
  return 0;
}

static int sess_stacks(osess *o) {
  const bf_wstacks *w = o->w;
  size_t maxd = 1;
  for (size_t i = 0; i < w->n; i++)
    if (w->v[i].depth > maxd) maxd = w->v[i].depth;
  int32_t *loc = malloc(maxd * sizeof *loc);
  o->stk = malloc((w->n ? w->n : 1) * sizeof *o->stk);
  if (!loc || !o->stk) {
    free(loc);
    return -ENOMEM;
  }
  int rc = 0;
  for (size_t i = 0; i < w->n && !rc; i++) {
    const bf_wstack *sk = &w->v[i];
    for (uint32_t d = 0; d < sk->depth && !rc; d++)
      rc = loc_index(o->x, w->fids[sk->off + d], w->lines[sk->off + d], &loc[sk->depth - 1 - d]);
    /* a stored stack id names the same frames in every session of the database */
    if (!rc) o->stk[i] = stack_index(o->x, sk->stack_id ? 'S' : 'R', sk->stack_id ? sk->stack_id : o->info->id,
                                     sk->stack_id ? 0 : (int64_t)i, loc, sk->depth);
  }
  if (!rc && w->empty_count > 0 && !(rc = loc_index(o->x, NOFRAME_FID, 0, loc)))
    o->noframe_stack = stack_index(o->x, 'N', 0, 0, loc, 1);
  free(loc);
  return rc;
}

/* traced: one sample per caller→callee edge, the callee as leaf */
static int edge_cb(void *ud, const bf_trace_edge *e) {
  osess *o = ud;
  if (e->calls <= 0) return 0;
  int32_t loc[2];
  int rc = loc_index(o->x, e->callee_function_id, -1, &loc[0]);
  if (!rc && e->caller_function_id) rc = loc_index(o->x, e->caller_function_id, -1, &loc[1]);
  if (rc) return rc;
  int32_t st = stack_index(o->x, 'E', e->callee_function_id, e->caller_function_id, loc, e->caller_function_id ? 2 : 1);
  sample(&o->edges, st, NULL, e->calls);
  return 0;
}

static void sess_attrs(osess *o) {
  ox *x = o->x;
  const bf_session_info *in = o->info;
  int32_t *a = o->pattr;
  size_t n = 0;
  a[n++] = attr_i(x, "bifocal.session.id", in->id);
  a[n++] = attr_s(x, "bifocal.session.kind", in->kind);
  a[n++] = attr_s(x, "bifocal.clock", in->clock);
  a[n++] = attr_s(x, "bifocal.mode", in->mode);
  if (in->rate_hz > 0) a[n++] = attr(x, "bifocal.rate", AV_DBL, NULL, 0, in->rate_hz, "Hz");
  if (in->achieved_rate_hz > 0) a[n++] = attr(x, "bifocal.achieved_rate", AV_DBL, NULL, 0, in->achieved_rate_hz, "Hz");
  if (in->python_build && *in->python_build) a[n++] = attr_s(x, "bifocal.python.build", in->python_build);
  if (in->commit && *in->commit) a[n++] = attr_s(x, "bifocal.commit", in->commit);
  if (in->label && *in->label) a[n++] = attr_s(x, "bifocal.label", in->label);
  if (in->status && *in->status) a[n++] = attr_s(x, "bifocal.status", in->status);
  if (in->profiler_version && *in->profiler_version) a[n++] = attr_s(x, "bifocal.profiler.version", in->profiler_version);
  a[n++] = attr_i(x, "bifocal.samples", in->samples);
  a[n++] = attr_i(x, "bifocal.samples.missed", in->missed);
  a[n++] = attr_i(x, "bifocal.samples.invalid", in->invalid);
  o->npattr = n;
}

/* A Profile of one value type from samples already encoded in smp. */
static void profile(osess *o, bf_pb *out, const char *type, const char *unit, int with_period, int which,
                    bf_pb *smp) {
  ox *x = o->x;
  const bf_session_info *in = o->info;
  bf_pb p = {0}, vt = {0};
  bf_pb_uint(&vt, 1, (uint64_t)sid(x, type));
  bf_pb_uint(&vt, 2, (uint64_t)sid(x, unit));
  bf_pb_msg(&p, 1, &vt);
  bf_pb_raw(&p, smp->b, smp->n);
  p.oom |= smp->oom;
  if (in->start_ns > 0) bf_pb_fixed64(&p, 3, (uint64_t)in->start_ns);
  if (in->duration_ns > 0) bf_pb_uint(&p, 4, (uint64_t)in->duration_ns);
  if (with_period && in->rate_hz > 0) {
    bf_pb_uint(&vt, 1, (uint64_t)sid(x, in->clock && strcmp(in->clock, "cpu") == 0 ? "cpu" : "wall"));
    bf_pb_uint(&vt, 2, (uint64_t)sid(x, "nanoseconds"));
    bf_pb_msg(&p, 5, &vt);
    bf_pb_uint(&p, 6, (uint64_t)llround(1e9 / in->rate_hz));
  }
  /* profile_id: 16 bytes from the session's identity, so a re-push is recognisable */
  char key[512];
  uint8_t id[16];
  for (int h = 0; h < 2; h++) {
    snprintf(key, sizeof key, "%d|%s|%lld|%lld|%lld|%d", h, in->host ? in->host : "", (long long)in->pid,
             (long long)in->start_ns, (long long)in->id, which);
    uint64_t v = bf_hash_str(key, strlen(key));
    memcpy(id + 8 * h, &v, 8);
  }
  bf_pb_bytes(&p, 7, id, sizeof id);
  for (size_t i = 0; i < o->npattr; i++) bf_pb_varint(&vt, (uint64_t)o->pattr[i]);
  bf_pb_msg(&p, 11, &vt);
  bf_pb_msg(out, 2, &p);
  out->oom |= vt.oom;
  bf_pb_free(&p);
  bf_pb_free(&vt);
}

/* The samples of the stacks' count (value 0) or weight (value 1). */
static void stack_samples(osess *o, bf_pb *smp, int value) {
  const bf_wstacks *w = o->w;
  for (size_t i = 0; i < w->n; i++) {
    const bf_wstack *sk = &w->v[i];
    int64_t v = value ? (int64_t)llround(sk->weight) : sk->count;
    if (v > 0) sample(smp, o->stk[i], o->tattr[sk->thread], v);
  }
  for (size_t t = 0; w->empty_count > 0 && t < w->nthreads; t++) {
    const bf_wthread *th = &w->threads[t];
    int64_t v = value ? (int64_t)llround(th->empty_weight) : th->empty_count;
    if (th->empty_count > 0 && v > 0) sample(smp, o->noframe_stack, o->tattr[t], v);
  }
}

/* ---- the resource -------------------------------------------------------------- */

typedef struct kvlist {
  char *k[64], *v[64];
  size_t n;
} kvlist;

/* Set key to value (a later setting of a key replaces the earlier one). */
static void kv_set(kvlist *l, const char *k, size_t kn, const char *v, size_t vn) {
  size_t i = 0;
  while (i < l->n && !(strlen(l->k[i]) == kn && strncmp(l->k[i], k, kn) == 0)) i++;
  if (i == l->n) {
    if (l->n == 64) return;
    l->k[i] = strndup(k, kn);
    l->v[i] = NULL;
    l->n++;
  }
  free(l->v[i]);
  l->v[i] = strndup(v, vn);
}

static int hexval(int c) {
  return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

int bf_otel_pairs(const char *spec, char *dec, size_t cap,
                  int (*fn)(void *ud, const char *k, size_t klen, const char *v, size_t vlen), void *ud) {
  while (spec && *spec) {
    const char *end = spec + strcspn(spec, ","), *eq = memchr(spec, '=', (size_t)(end - spec));
    if (eq) {
      const char *k = spec, *ke = eq, *v = eq + 1, *ve = end;
      while (k < ke && *k == ' ') k++;
      while (ke > k && ke[-1] == ' ') ke--;
      while (v < ve && *v == ' ') v++;
      while (ve > v && ve[-1] == ' ') ve--;
      size_t n = 0;
      for (const char *p = v; p < ve && n < cap; p++) {
        if (*p == '%' && ve - p >= 3 && hexval(p[1]) >= 0 && hexval(p[2]) >= 0) {
          dec[n++] = (char)(hexval(p[1]) << 4 | hexval(p[2]));
          p += 2;
        } else {
          dec[n++] = *p;
        }
      }
      int rc = fn(ud, k, (size_t)(ke - k), dec, n);
      if (rc) return rc;
    }
    spec = *end ? end + 1 : end;
  }
  return 0;
}

/* An OTEL_RESOURCE_ATTRIBUTES pair into the kvlist ud (an empty key is
 * skipped). */
static int kv_pair(void *ud, const char *k, size_t klen, const char *v, size_t vlen) {
  if (klen) kv_set(ud, k, klen, v, vlen);
  return 0;
}

/* OTEL_RESOURCE_ATTRIBUTES into l: values of up to 1023 bytes. */
static void kv_parse(kvlist *l, const char *spec) {
  char dec[1024];
  bf_otel_pairs(spec, dec, sizeof dec - 1, kv_pair, l);
}

static void kv_free(kvlist *l) {
  for (size_t i = 0; i < l->n; i++) {
    free(l->k[i]);
    free(l->v[i]);
  }
}

static void resource(ox *x, const bf_session_info *in, const bf_otlp_opts *o, bf_pb *out) {
  kvlist l = {.n = 0};
#define KV(k, v) kv_set(&l, k, strlen(k), v, strlen(v))
  KV("service.name", "unknown_service:bifocal");
  if (o && o->resource_attributes) kv_parse(&l, o->resource_attributes);
  if (o && o->service_name && *o->service_name) KV("service.name", o->service_name);
  if (in->host && *in->host) KV("host.name", in->host);
  if (in->command && *in->command) KV("process.command_line", in->command);
  KV("process.runtime.name", "cpython");
  if (in->python_version && *in->python_version) KV("process.runtime.version", in->python_version);
#undef KV
  bf_pb r = {0};
  for (size_t i = 0; i < l.n; i++) {
    if (!l.k[i] || !l.v[i]) {
      x->oom = 1;
      continue;
    }
    char *k = utf8_fixed(l.k[i], &x->oom), *v = utf8_fixed(l.v[i], &x->oom);
    keyvalue(&r, 1, k ? k : l.k[i], AV_STR, v ? v : l.v[i], 0);
    free(k);
    free(v);
  }
  if (in->pid > 0) keyvalue(&r, 1, "process.pid", AV_INT, NULL, in->pid);
  bf_pb_msg(out, 1, &r);
  bf_pb_free(&r);
  kv_free(&l);
}

/* ---- requests ------------------------------------------------------------------- */

static int encode_session(ox *x, int64_t id, const bf_sample_filter *f, const bf_otlp_opts *opts) {
  osess o = {.x = x};
  int rc = bf_wstacks_load(x->s, id, f, &o.w);
  if (rc) return rc;
  /* a window (f's since/until) is its own profile: its own time range and id */
  bf_session_info win = *o.w->info;
  int64_t since = f && f->since_ns > 0 ? f->since_ns : 0, end = win.duration_ns;
  if (f && f->until_ns > 0 && (end <= 0 || f->until_ns < end)) end = f->until_ns; /* a session still recording has no duration yet */
  if (f && (since || f->until_ns > 0)) {
    win.start_ns += since;
    win.duration_ns = end > since ? end - since : 0;
  }
  o.info = &win;
  bf_q_kind kind = bf_q_kind_of(o.info);
  const char *clock = bf_q_clock_of(o.info) == BF_Q_CPU ? "cpu" : "wall";
  bf_pb rp = {0}, sp = {0}, scope = {0}, smp = {0};
  if ((rc = sess_threads(&o)) || (rc = sess_stacks(&o))) goto out;
  sess_attrs(&o);
  resource(x, o.info, opts, &rp);
  bf_pb_str(&scope, 1, "bifocal");
  bf_pb_str(&scope, 2, BF_VERSION);
  bf_pb_msg(&sp, 1, &scope);
  if (kind == BF_Q_TRACED) {
    if ((rc = bf_q_trace_edges(x->s, id, edge_cb, &o))) goto out;
    profile(&o, &sp, "calls", "count", 0, 0, &o.edges);
    stack_samples(&o, &smp, 1);
    profile(&o, &sp, clock, "nanoseconds", 0, 1, &smp);
  } else {
    stack_samples(&o, &smp, 0);
    profile(&o, &sp, "samples", "count", kind != BF_Q_IMPORTED, 0, &smp);
    if (kind != BF_Q_IMPORTED) {
      bf_pb_free(&smp);
      stack_samples(&o, &smp, 1);
      profile(&o, &sp, clock, "nanoseconds", 1, 1, &smp);
    }
  }
  bf_pb_msg(&rp, 2, &sp);
  bf_pb_msg(&x->rps, 1, &rp);
  x->oom |= rp.oom | sp.oom | scope.oom | smp.oom | o.edges.oom;
out:
  bf_pb_free(&rp);
  bf_pb_free(&sp);
  bf_pb_free(&scope);
  bf_pb_free(&smp);
  bf_pb_free(&o.edges);
  free(o.tattr);
  free(o.stk);
  bf_wstacks_free(o.w);
  return rc;
}

static void ox_free(ox *x) {
  bf_pb_strtab_free(&x->st);
  bf_pb_free(&x->locs);
  bf_pb_free(&x->funcs);
  bf_pb_free(&x->attrs);
  bf_pb_free(&x->stacks);
  bf_pb_free(&x->rps);
  bf_map3_free(&x->loc_idx);
  bf_map3_free(&x->func_idx);
  bf_map3_free(&x->attr_idx);
  bf_map3_free(&x->stack_idx);
}

/* request = resource_profiles (1) ..., dictionary (2) */
static void assemble(ox *x, bf_pb *req) {
  bf_pb d = {0}, zero = {0}, link = {0};
  static const uint8_t zeros[16];
  bf_pb_msg(&d, 1, &zero); /* mapping_table[0] */
  bf_pb_msg(&d, 2, &zero); /* location_table[0] */
  bf_pb_raw(&d, x->locs.b, x->locs.n);
  bf_pb_msg(&d, 3, &zero); /* function_table[0] */
  bf_pb_raw(&d, x->funcs.b, x->funcs.n);
  bf_pb_bytes(&link, 1, zeros, 16); /* link_table[0]: the 16/8-byte zero ids the proto advises */
  bf_pb_bytes(&link, 2, zeros, 8);
  bf_pb_msg(&d, 4, &link);
  bf_pb_raw(&d, x->st.out.b, x->st.out.n);
  bf_pb_msg(&d, 6, &zero); /* attribute_table[0] */
  bf_pb_raw(&d, x->attrs.b, x->attrs.n);
  bf_pb_msg(&d, 7, &zero); /* stack_table[0] */
  bf_pb_raw(&d, x->stacks.b, x->stacks.n);
  bf_pb_raw(req, x->rps.b, x->rps.n);
  bf_pb_msg(req, 2, &d);
  req->oom |= d.oom | link.oom | x->locs.oom | x->funcs.oom | x->st.out.oom | x->attrs.oom | x->stacks.oom |
              x->rps.oom | x->oom;
  bf_pb_free(&d);
  bf_pb_free(&link);
}

int bf_otlp_encode(bf_store *s, const int64_t *ids, size_t n, const bf_sample_filter *f, const bf_otlp_opts *o,
                   uint8_t **buf, size_t *len) {
  ox x = {.s = s, .st = {.field = 5}, .nloc = 1, .nfunc = 1, .nattr = 1, .nstack = 1};
  bf_pb req = {0};
  int rc = 0;
  sid(&x, ""); /* string_table[0] */
  for (size_t i = 0; i < n && !rc; i++) rc = encode_session(&x, ids[i], f, o);
  if (!rc) assemble(&x, &req);
  if (!rc && req.oom) rc = bf_store_fail(s, -ENOMEM, "out of memory encoding OTLP profiles");
  ox_free(&x);
  if (rc) {
    bf_pb_free(&req);
    return rc;
  }
  *buf = req.b;
  *len = req.n;
  return 0;
}

int bf_export_otlp(bf_store *s, int64_t session_id, const bf_sample_filter *f, FILE *out) {
  uint8_t *b = NULL;
  size_t n = 0;
  int rc = bf_otlp_encode(s, &session_id, 1, f, NULL, &b, &n);
  if (rc) return rc;
  if (n && fwrite(b, 1, n, out) != n) rc = bf_store_fail(s, -EIO, "writing the OTLP profiles failed");
  free(b);
  return rc;
}
