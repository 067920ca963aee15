/* import_pyroscope.c — pprof (profile.proto) into an imported session, for
 * `import --from pyroscope`: the untrusted bytes are gunzipped within a bound,
 * decoded with every length checked, turned into py-spy-style collapsed
 * stacks ("qualname (file:first:line)") in a private temporary file, and
 * imported by bf_import_collapsed; the window and the query go on the session. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include "import_pyroscope.h"
#include "pb.h"
#include "store_int.h"

#define MAX_INFLATED (256u << 20)

typedef struct span {
  const uint8_t *p;
  size_t n;
} span;

/* One field of a message: 1 and its number, wire type, value or span; 0 at
 * the end; -1 when malformed. */
typedef struct field {
  uint32_t num, wire;
  uint64_t v;
  span s;
} field;

static int rd_varint(span *m, uint64_t *v) {
  *v = 0;
  for (int sh = 0; sh < 64; sh += 7) {
    if (!m->n) return -1;
    uint8_t b = *m->p++;
    m->n--;
    *v |= (uint64_t)(b & 0x7f) << sh;
    if (!(b & 0x80)) return 0;
  }
  return -1;
}

static int next_field(span *m, field *f) {
  if (!m->n) return 0;
  uint64_t tag;
  if (rd_varint(m, &tag)) return -1;
  f->num = (uint32_t)(tag >> 3);
  f->wire = (uint32_t)(tag & 7);
  switch (f->wire) {
    case 0: return rd_varint(m, &f->v) ? -1 : 1;
    case 1:
    case 5: {
      size_t w = f->wire == 1 ? 8 : 4;
      if (m->n < w) return -1;
      f->v = 0;
      for (size_t i = 0; i < w; i++) f->v |= (uint64_t)m->p[i] << (8 * i);
      m->p += w;
      m->n -= w;
      return 1;
    }
    case 2:
      if (rd_varint(m, &f->v) || f->v > m->n) return -1;
      f->s = (span){m->p, (size_t)f->v};
      m->p += f->v;
      m->n -= (size_t)f->v;
      return 1;
    default: return -1;
  }
}

/* Values of a repeated integer field, packed (wire 2) or not (wire 0). */
static int each_int(const field *f, int (*fn)(void *, uint64_t), void *ud) {
  if (f->wire == 0) return fn(ud, f->v);
  if (f->wire != 2) return -1;
  span s = f->s;
  while (s.n) {
    uint64_t v;
    if (rd_varint(&s, &v)) return -1;
    int rc = fn(ud, v);
    if (rc) return rc;
  }
  return 0;
}

typedef struct pfunc {
  uint64_t id;
  int64_t name, sys, file, start;
} pfunc;

typedef struct pline {
  uint64_t func;
  int64_t line;
} pline;

typedef struct ploc {
  uint64_t id;
  size_t off, n; /* lines[off .. off+n) */
} ploc;

typedef struct pp {
  span *str;
  size_t nstr, strcap;
  pfunc *fn;
  size_t nfn, fncap;
  ploc *loc;
  size_t nloc, loccap;
  pline *line;
  size_t nline, linecap;
  span *smp;
  size_t nsmp, smpcap;
  int64_t type_of[16]; /* sample_type[i].type string index */
  int64_t unit_of[16];
  size_t ntypes;
  int64_t default_type, period;
  bf_map3 fidx, lidx;
} pp;

#define GROW(arr, n, cap) bf_vec_grow((void **)&(arr), &(cap), (n) + 1, sizeof *(arr), 64)

static int parse_function(pp *x, span m) {
  pfunc f = {0};
  field fl;
  int r;
  while ((r = next_field(&m, &fl)) == 1) {
    if (fl.wire != 0) continue;
    if (fl.num == 1) f.id = fl.v;
    if (fl.num == 2) f.name = (int64_t)fl.v;
    if (fl.num == 3) f.sys = (int64_t)fl.v;
    if (fl.num == 4) f.file = (int64_t)fl.v;
    if (fl.num == 5) f.start = (int64_t)fl.v;
  }
  if (r < 0 || GROW(x->fn, x->nfn, x->fncap)) return r < 0 ? -EBADMSG : -ENOMEM;
  if (bf_map3_put(&x->fidx, (int64_t)f.id, 0, 0, (int64_t)x->nfn)) return -ENOMEM;
  x->fn[x->nfn++] = f;
  return 0;
}

static int parse_location(pp *x, span m) {
  ploc l = {.off = x->nline};
  field fl;
  int r;
  while ((r = next_field(&m, &fl)) == 1) {
    if (fl.num == 1 && fl.wire == 0) l.id = fl.v;
    if (fl.num != 4 || fl.wire != 2) continue;
    pline ln = {0};
    span lm = fl.s;
    field g;
    int r2;
    while ((r2 = next_field(&lm, &g)) == 1) {
      if (g.num == 1 && g.wire == 0) ln.func = g.v;
      if (g.num == 2 && g.wire == 0) ln.line = (int64_t)g.v;
    }
    if (r2 < 0) return -EBADMSG;
    if (GROW(x->line, x->nline, x->linecap)) return -ENOMEM;
    x->line[x->nline++] = ln;
    l.n++;
  }
  if (r < 0) return -EBADMSG;
  if (GROW(x->loc, x->nloc, x->loccap) || bf_map3_put(&x->lidx, (int64_t)l.id, 0, 0, (int64_t)x->nloc))
    return -ENOMEM;
  x->loc[x->nloc++] = l;
  return 0;
}

static int parse_profile(pp *x, span m) {
  field f;
  int r, rc = 0;
  while (!rc && (r = next_field(&m, &f)) == 1) {
    if (f.num == 1 && f.wire == 2 && x->ntypes < 16) {
      span vt = f.s;
      field g;
      x->type_of[x->ntypes] = x->unit_of[x->ntypes] = 0;
      while (next_field(&vt, &g) == 1)
        if (g.wire == 0 && (g.num == 1 || g.num == 2)) (g.num == 1 ? x->type_of : x->unit_of)[x->ntypes] = (int64_t)g.v;
      x->ntypes++;
    } else if (f.num == 2 && f.wire == 2) {
      if (GROW(x->smp, x->nsmp, x->smpcap)) return -ENOMEM;
      x->smp[x->nsmp++] = f.s;
    } else if (f.num == 4 && f.wire == 2) {
      rc = parse_location(x, f.s);
    } else if (f.num == 5 && f.wire == 2) {
      rc = parse_function(x, f.s);
    } else if (f.num == 6 && f.wire == 2) {
      if (GROW(x->str, x->nstr, x->strcap)) return -ENOMEM;
      x->str[x->nstr++] = f.s;
    } else if (f.num == 12 && f.wire == 0) {
      x->period = (int64_t)f.v;
    } else if (f.num == 14 && f.wire == 0) {
      x->default_type = (int64_t)f.v;
    }
  }
  return rc ? rc : r < 0 ? -EBADMSG : 0;
}

static int str_is(const pp *x, int64_t i, const char *s) {
  return i >= 0 && (size_t)i < x->nstr && x->str[i].n == strlen(s) && memcmp(x->str[i].p, s, x->str[i].n) == 0;
}

/* Append string i with the collapsed format's separators made inert. */
static void put_str(FILE *out, const pp *x, int64_t i, size_t max) {
  if (i < 0 || (size_t)i >= x->nstr) return;
  for (size_t k = 0; k < x->str[i].n && k < max; k++) {
    char c = (char)x->str[i].p[k];
    fputc(c == ';' ? ':' : (c == '\n' || c == '\r' || c == '\t') ? ' ' : c, out);
  }
}

/* One frame "qualname (file:first:line)"; a bifocal system name
 * "file:first:qualname" is split back into its identity. */
static void put_frame(FILE *out, const pp *x, const pline *ln) {
  int64_t *hit = bf_map3_get(&x->fidx, (int64_t)ln->func, 0, 0);
  if (!hit) {
    fputs("[unknown function]", out);
    return;
  }
  const pfunc *f = &x->fn[*hit];
  if (f->sys > 0 && (size_t)f->sys < x->nstr) {
    const span *s = &x->str[f->sys];
    /* file:first:qualname with the qualname after the last ':' that follows digits */
    for (size_t i = s->n; i > 1; i--) {
      if (s->p[i - 1] != ':') continue;
      size_t j = i - 1;
      while (j > 0 && s->p[j - 1] >= '0' && s->p[j - 1] <= '9') j--;
      if (j == i - 1 || j == 0 || s->p[j - 1] != ':') continue;
      fprintf(out, "%.*s (%.*s:%.*s:%lld)", (int)(s->n - i), (const char *)s->p + i, (int)(j - 1),
              (const char *)s->p, (int)(i - 1 - j), (const char *)s->p + j, (long long)ln->line);
      return;
    }
  }
  put_str(out, x, f->name, 4096);
  if (f->file > 0 && (size_t)f->file < x->nstr && x->str[f->file].n) {
    fputs(" (", out);
    put_str(out, x, f->file, 4096);
    fprintf(out, ":%lld:%lld)", (long long)f->start, (long long)ln->line);
  }
}

typedef struct sctx {
  uint64_t *locs;
  size_t n, cap;
  int64_t vals[16];
  size_t nv;
} sctx;

static int add_loc(void *ud, uint64_t v) {
  sctx *c = ud;
  if (c->n > 4096) return -EBADMSG;
  if (bf_vec_grow((void **)&c->locs, &c->cap, c->n + 1, sizeof *c->locs, 64)) return -ENOMEM;
  c->locs[c->n++] = v;
  return 0;
}

static int add_val(void *ud, uint64_t v) {
  sctx *c = ud;
  if (c->nv < 16) c->vals[c->nv] = (int64_t)v;
  c->nv++;
  return 0;
}

/* Every sample as a collapsed line of the chosen value (vi). */
static int write_samples(const pp *x, size_t vi, int per_period, FILE *out) {
  sctx c = {0};
  int rc = 0;
  for (size_t i = 0; i < x->nsmp && !rc; i++) {
    span m = x->smp[i];
    field f;
    int r;
    c.n = c.nv = 0;
    while (!rc && (r = next_field(&m, &f)) == 1) {
      if (f.num == 1) rc = each_int(&f, add_loc, &c);
      if (f.num == 2) rc = each_int(&f, add_val, &c);
    }
    if (!rc && r < 0) rc = -EBADMSG;
    if (rc || vi >= c.nv || vi >= 16 || c.n == 0) continue;
    int64_t v = c.vals[vi];
    if (per_period) v = (int64_t)llround((double)v / (double)x->period);
    if (v <= 0) continue;
    for (size_t k = c.n; k-- > 0;) { /* leaf first in pprof, root first here */
      int64_t *hit = bf_map3_get(&x->lidx, (int64_t)c.locs[k], 0, 0);
      if (!hit) {
        rc = -EBADMSG;
        break;
      }
      const ploc *l = &x->loc[*hit];
      for (size_t j = l->n; j-- > 0;) { /* the last line is the caller of the inlined ones */
        put_frame(out, x, &x->line[l->off + j]);
        if (j || k) fputc(';', out);
      }
      if (l->n == 0) fputs(k ? "[unknown location];" : "[unknown location]", out);
    }
    fprintf(out, " %lld\n", (long long)v);
  }
  free(c.locs);
  return rc;
}

static int inflate_all(const uint8_t *d, size_t n, uint8_t **out, size_t *outn) {
  z_stream z;
  memset(&z, 0, sizeof z);
  if (inflateInit2(&z, 15 + 32) != Z_OK) return -ENOMEM;
  size_t cap = n * 4 + 4096, len = 0;
  uint8_t *b = malloc(cap);
  int zr = Z_OK;
  z.next_in = (Bytef *)d;
  z.avail_in = (uInt)n;
  while (b && zr != Z_STREAM_END) {
    if (len == cap) {
      if (cap >= MAX_INFLATED) break;
      uint8_t *nb = realloc(b, cap * 2 > MAX_INFLATED ? MAX_INFLATED : cap * 2);
      if (!nb) break;
      b = nb;
      cap = cap * 2 > MAX_INFLATED ? MAX_INFLATED : cap * 2;
    }
    z.next_out = b + len;
    z.avail_out = (uInt)(cap - len);
    zr = inflate(&z, Z_NO_FLUSH);
    len = cap - z.avail_out;
    if (zr != Z_OK && zr != Z_STREAM_END) break;
  }
  inflateEnd(&z);
  if (!b || zr != Z_STREAM_END) {
    free(b);
    return !b ? -ENOMEM : -EBADMSG;
  }
  *out = b;
  *outn = len;
  return 0;
}

static void pp_free(pp *x) {
  free(x->str);
  free(x->fn);
  free(x->loc);
  free(x->line);
  free(x->smp);
  bf_map3_free(&x->fidx);
  bf_map3_free(&x->lidx);
}

/* The session's window, host and extra after the import. */
static int set_meta(bf_store *s, int64_t id, const bf_import_pprof_meta *meta) {
  bf_session_info *in;
  int rc = bf_store_session_get(s, id, &in);
  if (rc) return rc;
  bf_session_info up = *in;
  char *extra = NULL;
  if (meta->start_ns > 0) up.start_ns = meta->start_ns;
  if (meta->duration_ns > 0) up.duration_ns = meta->duration_ns;
  if (meta->host) up.host = meta->host;
  up.mode = "pyroscope";
  up.command = "import --from pyroscope"; /* not the temporary file it went through */
  if (meta->extra_json) {
    const char *old = in->extra_json;
    size_t ol = old ? strlen(old) : 0;
    int has = ol > 2 && old[0] == '{';
    if (asprintf(&extra, "{\"pyroscope\":%s%s%.*s}", meta->extra_json, has ? "," : "", has ? (int)(ol - 2) : 0,
                 has ? old + 1 : "") < 0)
      extra = NULL;
    if (!extra) rc = -ENOMEM;
    up.extra_json = extra;
  }
  if (!rc) rc = bf_store_session_update(s, &up);
  free(extra);
  bf_session_info_free(in);
  return rc;
}

/* The value index to import, and whether it is nanoseconds to turn into samples. */
static size_t pick_value(const pp *x, int *per_period) {
  size_t vi = 0;
  int found = 0;
  for (size_t i = 0; i < x->ntypes; i++)
    if (str_is(x, x->type_of[i], "samples")) {
      vi = i;
      found = 1;
      break;
    }
  for (size_t i = 0; !found && x->default_type && i < x->ntypes; i++)
    if (x->type_of[i] == x->default_type) {
      vi = i;
      found = 1;
    }
  *per_period = vi < x->ntypes && str_is(x, x->unit_of[vi], "nanoseconds") && x->period > 0;
  return vi;
}

int bf_import_pprof(bf_store *s, const uint8_t *data, size_t len, const bf_import_opts *o,
                    const bf_import_pprof_meta *meta, int64_t *session_id) {
  uint8_t *raw = NULL;
  size_t rawn = len;
  int rc = 0;
  if (len >= 2 && data[0] == 0x1f && data[1] == 0x8b) {
    if ((rc = inflate_all(data, len, &raw, &rawn)))
      return bf_store_fail(s, rc, rc == -ENOMEM ? "out of memory inflating the profile"
                                                : "the profile is not valid gzip (or inflates past 256 MiB)");
    data = raw;
  }
  pp x = {.str = NULL};
  char tmp[] = "/tmp/bifocal-pprof-XXXXXX";
  const char *td = getenv("TMPDIR");
  char path[4096];
  snprintf(path, sizeof path, "%s/bifocal-pprof-XXXXXX", td && *td ? td : "/tmp");
  if (strlen(path) >= sizeof path - 1) snprintf(path, sizeof path, "%s", tmp);
  int fd = -1;
  FILE *out = NULL;
  if ((rc = parse_profile(&x, (span){data, rawn}))) {
    rc = bf_store_fail(s, rc, rc == -ENOMEM ? "out of memory decoding the profile"
                                            : "the profile is not a valid pprof profile.proto message");
    goto out;
  }
  if (x.nsmp == 0) {
    rc = bf_store_fail(s, -ENODATA, "the profile holds no samples (nothing matched the query in that window?)");
    goto out;
  }
  if ((fd = mkstemp(path)) < 0 || !(out = fdopen(fd, "w+"))) {
    rc = bf_store_fail(s, -errno, "cannot make a temporary file in %s: %s", td && *td ? td : "/tmp", strerror(errno));
    goto out;
  }
  int per_period;
  size_t vi = pick_value(&x, &per_period);
  if ((rc = write_samples(&x, vi, per_period, out))) {
    rc = bf_store_fail(s, rc, "the profile's samples are malformed (a bad location id or encoding)");
    goto out;
  }
  if (fflush(out)) {
    rc = bf_store_fail(s, -EIO, "writing the temporary file failed: %s", strerror(errno));
    goto out;
  }
  if ((rc = bf_import_collapsed(s, path, o, session_id))) goto out;
  if (meta && (rc = set_meta(s, *session_id, meta))) {
    bf_store_session_delete(s, *session_id);
    rc = bf_store_fail(s, rc, "cannot record the query on the imported session");
  }
out:
  if (out)
    fclose(out);
  else if (fd >= 0)
    close(fd);
  if (fd >= 0) unlink(path);
  pp_free(&x);
  free(raw);
  return rc;
}

int bf_pyroscope_merge_request(const char *profile_type, const char *selector, int64_t start_ms, int64_t end_ms,
                               uint8_t **body, size_t *len) {
  bf_pb p = {0};
  bf_pb_str(&p, 1, profile_type);
  bf_pb_str(&p, 2, selector);
  bf_pb_uint(&p, 3, (uint64_t)start_ms);
  bf_pb_uint(&p, 4, (uint64_t)end_ms);
  if (p.oom) {
    bf_pb_free(&p);
    return -ENOMEM;
  }
  *body = p.b;
  *len = p.n;
  return 0;
}
