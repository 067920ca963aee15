/* import.c — collapsed-stack import in the dialects users have:
 * FlameGraph (`a;b;c N`), py-spy raw (`func (file:line)` frames, optional
 * `thread (0x..)` / `process N:"cmd"` prefixes), austin 3 text
 * (`P<pid>;T<iid>:<tid>;file:func:line;... metric`, `# key: value` header)
 * and austin 1.x's (Debian's austin 1.0.1: `[Process N;]Thread X;func
 * (file);L<line>;... usec [mem+ mem-]`, or `func (file:line)` frames with -a).
 * All or nothing: the whole file is written in one transaction. */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ident.h"
#include "import.h"
#include "session_meta.h"
#include "query.h"
#include "store_int.h"

#define MAX_LINE (4 << 20) /* bytes per line: 4096 frames of ~1 KB; longer is refused */
#define MAX_DEPTH 4096
/* Sum of sample counts: 10^15 is 11 CPU-days of re-imported nanosecond
 * weights; anything above is a corrupt or hostile count, refused before it
 * turns into millions of 32-bit records. */
#define MAX_TOTAL_COUNT 1000000000000000LL
/* Sum of weights in ns: 10^18 ns is 31 years, and every sum the query layer
 * makes over one session (int64, at most 9.2 * 10^18) stays exact below it. */
#define MAX_TOTAL_WEIGHT_NS 1000000000000000000LL
/* austin's "# duration:"/"# interval:" in microseconds: 10^15 us is 31 years. */
#define MAX_HEADER_US 1000000000000000LL

typedef enum { D_FLAMEGRAPH, D_PYSPY, D_AUSTIN, D_AUSTIN1 } dialect;

typedef struct frame_id {
  const char *file, *qual;
  size_t file_len, qual_len;
  int64_t first, line;
} frame_id;

static char *trim(char *s) {
  while (isspace((unsigned char)*s)) s++;
  size_t n = strlen(s);
  while (n && isspace((unsigned char)s[n - 1])) s[--n] = 0;
  return s;
}

static int parse_i64(const char *s, size_t n, int64_t *out) {
  if (!n || n > 18) return -1;
  int64_t v = 0;
  for (size_t i = 0; i < n; i++) {
    if (!isdigit((unsigned char)s[i])) return -1;
    v = v * 10 + (s[i] - '0');
  }
  *out = v;
  return 0;
}

/* "name (file:line)", "name (file:first:line)" or "name (file)". */
static int parse_pyspy_frame(const char *f, size_t n, frame_id *out) {
  if (n < 4 || f[n - 1] != ')') return -1;
  const char *open = NULL;
  for (size_t i = n - 1; i > 0; i--)
    if (f[i] == '(' && f[i - 1] == ' ') {
      open = f + i;
      break;
    }
  if (!open) return -1;
  out->qual = f;
  out->qual_len = (size_t)(open - 1 - f);
  const char *in = open + 1;
  size_t in_len = (size_t)(f + n - 1 - in);
  out->file = in;
  out->file_len = in_len;
  out->first = 0;
  out->line = 0;
  /* trailing :digits — line; a second one before it — firstlineno */
  const char *c1 = NULL;
  for (size_t i = in_len; i > 0; i--)
    if (in[i - 1] == ':') {
      c1 = in + i - 1;
      break;
    }
  int64_t a;
  int numbered = 0;
  if (c1 && parse_i64(c1 + 1, (size_t)(in + in_len - c1 - 1), &a) == 0) {
    numbered = 1;
    out->line = a;
    out->file_len = (size_t)(c1 - in);
    const char *c2 = NULL;
    for (size_t i = out->file_len; i > 0; i--)
      if (in[i - 1] == ':') {
        c2 = in + i - 1;
        break;
      }
    int64_t b;
    if (c2 && parse_i64(c2 + 1, (size_t)(c1 - c2 - 1), &b) == 0) {
      out->first = b;
      out->file_len = (size_t)(c2 - in);
    }
  }
  /* an empty co_filename is a filename too: "f (:3:4)" is what export
   * writes for one, and must read back as it was */
  if (!out->qual_len || (!out->file_len && !numbered)) return -1;
  return 0;
}

/* austin: "file:func:line" (file may contain ':'; split from the right). */
static int parse_austin_frame(const char *f, size_t n, frame_id *out) {
  const char *c1 = NULL, *c2 = NULL;
  for (size_t i = n; i > 0; i--)
    if (f[i - 1] == ':') {
      if (!c1)
        c1 = f + i - 1;
      else {
        c2 = f + i - 1;
        break;
      }
    }
  if (!c1 || !c2) return -1;
  int64_t line;
  if (parse_i64(c1 + 1, (size_t)(f + n - c1 - 1), &line)) return -1;
  out->file = f;
  out->file_len = (size_t)(c2 - f);
  out->qual = c2 + 1;
  out->qual_len = (size_t)(c1 - c2 - 1);
  out->first = 0;
  out->line = line;
  if (!out->file_len || !out->qual_len) return -1;
  return 0;
}

typedef struct imp {
  bf_store *s;
  const char *path;
  int64_t session;
  dialect d;
  int64_t lineno;
  int64_t samples, records;
  int64_t invalid;      /* austin ":INVALID:" samples: counted, not stored */
  int64_t zero_lines;   /* FlameGraph/py-spy lines with count 0: nothing to store */
  int64_t total_weight; /* ns (austin) or counts; at most MAX_TOTAL_WEIGHT_NS */
  char *sbuf1, *sbuf2;
  size_t sbuf_cap;
} imp;

static int fail_line(imp *m, const char *what) {
  return bf_store_fail(m->s, -EINVAL, "%s:%lld: %s; nothing imported", m->path, (long long)m->lineno, what);
}

static int intern_frame(imp *m, const frame_id *fr, int64_t *frame) {
  size_t need = (fr->file_len > fr->qual_len ? fr->file_len : fr->qual_len) + 1;
  if (need > m->sbuf_cap) {
    char *a = realloc(m->sbuf1, need), *b = a ? realloc(m->sbuf2, need) : NULL;
    if (a) m->sbuf1 = a;
    if (b) m->sbuf2 = b;
    if (!a || !b) return bf_store_fail(m->s, -ENOMEM, "out of memory");
    m->sbuf_cap = need;
  }
  memcpy(m->sbuf1, fr->file, fr->file_len);
  m->sbuf1[fr->file_len] = 0;
  memcpy(m->sbuf2, fr->qual, fr->qual_len);
  m->sbuf2[fr->qual_len] = 0;
  int64_t fn;
  int rc = bf_store_intern_function(m->s, m->sbuf1, m->sbuf2, fr->first, &fn);
  if (rc) return rc;
  return bf_store_intern_frame(m->s, fn, fr->line, frame);
}

static int parse_thread_token(const char *t, size_t n, int64_t *tid) {
  /* austin "T<iid>:<tid>" / "T<tid>" (hex or decimal); py-spy "thread (0x7F..)" */
  char buf[64];
  if (n >= sizeof buf) n = sizeof buf - 1;
  memcpy(buf, t, n);
  buf[n] = 0;
  char *p = buf;
  char *colon = strrchr(p, ':');
  if (colon) p = colon + 1;
  char *end = NULL;
  errno = 0;
  unsigned long long v = strtoull(p, &end, 16);
  if (errno || end == p) return -1;
  *tid = (int64_t)(v & 0x7fffffffffffffffULL);
  return 0;
}

/* One sample line. */
/* The metric at the end of a line. OUT: *count, *weight, *idle.
 * 0; 1 when the line counts nothing (count 0); else the error. */
static int parse_metric(imp *m, char *metric, int64_t *count, int64_t *weight, int *idle) {
  *count = 1;
  *weight = 0;
  *idle = 0;
  if (m->d == D_AUSTIN || m->d == D_AUSTIN1) {
    /* "time" or "time,idle,mem..." (full mode); austin 1.x: its time alone */
    char *comma = strchr(metric, ',');
    size_t l = comma ? (size_t)(comma - metric) : strlen(metric);
    if (parse_i64(metric, l, weight)) return fail_line(m, "bad austin metric (expected microseconds)");
    /* checked before the multiplication: 18 digits of microseconds overflow ns */
    if (*weight > (MAX_TOTAL_WEIGHT_NS - m->total_weight) / 1000)
      return fail_line(m, "austin metrics add up to more than 10^15 microseconds (31 years), more than any "
                          "capture holds (the metric is corrupt or not a time)");
    if (comma) {
      char *c2 = strchr(comma + 1, ',');
      size_t l2 = c2 ? (size_t)(c2 - comma - 1) : strlen(comma + 1);
      int64_t iv;
      if (parse_i64(comma + 1, l2, &iv) == 0) *idle = iv != 0;
    }
    *weight *= 1000; /* µs → ns */
  } else {
    if (parse_i64(metric, strlen(metric), count) || *count < 0)
      return fail_line(m, "bad sample count (expected a non-negative integer at the end of the line)");
    if (*count == 0) {
      m->zero_lines++;
      return 1;
    }
    *weight = *count;
  }
  if (*weight > MAX_TOTAL_WEIGHT_NS - m->total_weight)
    return fail_line(m, "sample weights add up to more than 10^18, more than any capture holds (the count is "
                        "corrupt or not a sample count)");
  if (*count > MAX_TOTAL_COUNT - m->samples)
    return fail_line(m, "sample counts add up to more than 10^15, more than any capture holds (the count is "
                        "corrupt or not a sample count)");
  return 0;
}

/* Never misparse austin's old layout into functions named "L13". */
static int refuse_old_austin(imp *m, const char *stack) {
  for (const char *q = stack; q;) {
    const char *e = strchr(q, ';');
    size_t ql = e ? (size_t)(e - q) : strlen(q);
    if (ql > 1 && q[0] == 'L' && strspn(q + 1, "0123456789") == ql - 1)
      return fail_line(m, "a frame 'L<number>' is a line number of austin's old (before 3.0) layout, which is "
                          "not supported; record with austin 3 or convert to 'a;b;c COUNT' lines");
    q = e ? e + 1 : NULL;
  }
  return 0;
}

/* A token that is not a frame: austin's process/thread/GC marks, py-spy's
 * process/thread roots. 1 when skipped (OUT: *tid, *gc), 0 for a frame,
 * else the error. */
static int meta_token(imp *m, const char *p, size_t fl, int tok, int depth, int *seen_p, int64_t *tid, int *gc) {
  if (m->d == D_AUSTIN && tok == 1 && p[0] == 'P' && fl > 1 && isdigit((unsigned char)p[1])) {
    *seen_p = 1;
    return 1; /* process token */
  }
  if (m->d == D_AUSTIN && tok == 1 + *seen_p && p[0] == 'T' && fl > 1)
    return parse_thread_token(p + 1, fl - 1, tid) ? fail_line(m, "bad austin thread token") : 1;
  if (m->d == D_AUSTIN1 && tok == 1 && fl > 8 && strncmp(p, "Process ", 8) == 0) {
    *seen_p = 1;
    return 1;
  }
  if (m->d == D_AUSTIN1 && tok == 1 + *seen_p && fl > 7 && strncmp(p, "Thread ", 7) == 0)
    return parse_thread_token(p + 7, fl - 7, tid) ? fail_line(m, "bad austin 1.x thread token") : 1;
  if (m->d == D_PYSPY && depth == 0 && fl > 8 && strncmp(p, "process ", 8) == 0) return 1;
  if (m->d == D_AUSTIN && fl == 4 && strncmp(p, ":GC:", 4) == 0) {
    *gc = 1;
    return 1;
  }
  if (m->d == D_PYSPY && depth == 0 && fl > 8 && strncmp(p, "thread (", 8) == 0)
    return parse_thread_token(p + 8, fl - 8, tid) ? fail_line(m, "bad py-spy thread frame") : 1;
  return 0;
}

/* Interns the ';'-separated frames of stack, outermost first.
 * OUT: *leaf (stack id, 0 when empty), *depth, *tid, *gc. */
static int parse_frames(imp *m, char *stack, int64_t *leaf, int *depth, int64_t *tid, int *gc) {
  int64_t parent = 0;
  int tok = 0, seen_p = 0;
  for (char *p = stack; p;) {
    tok++;
    char *semi = strchr(p, ';');
    size_t fl = semi ? (size_t)(semi - p) : strlen(p);
    char *next = semi ? semi + 1 : NULL;
    int rc = fl ? meta_token(m, p, fl, tok, *depth, &seen_p, tid, gc) : 1;
    if (rc < 0) return rc;
    if (rc) {
      p = next;
      continue;
    }
    frame_id fr;
    if (m->d == D_AUSTIN) {
      if (parse_austin_frame(p, fl, &fr)) return fail_line(m, "bad austin frame (expected file:function:line)");
    } else if (m->d == D_AUSTIN1) {
      if (parse_pyspy_frame(p, fl, &fr)) return fail_line(m, "bad austin 1.x frame (expected 'function (file)')");
      int64_t line; /* the default layout gives the line as the next token, "L<line>" */
      size_t nl = next ? strcspn(next, ";") : 0;
      if (nl > 1 && next[0] == 'L' && parse_i64(next + 1, nl - 1, &line) == 0) {
        fr.line = line;
        next = next[nl] ? next + nl + 1 : NULL;
      }
    } else if (m->d == D_PYSPY && parse_pyspy_frame(p, fl, &fr) == 0) {
      /* ok */
    } else {
      fr = (frame_id){BF_IDENT_UNKNOWN, p, sizeof BF_IDENT_UNKNOWN - 1, fl, 0, 0};
    }
    int64_t frame, stk;
    if ((rc = intern_frame(m, &fr, &frame))) return rc;
    if ((rc = bf_store_intern_stack(m->s, parent, frame, &stk))) return rc;
    parent = stk;
    if (++*depth > MAX_DEPTH) return fail_line(m, "stack deeper than 4096 frames");
    p = next;
  }
  *leaf = parent;
  return 0;
}

/* Start of the last whitespace-separated token of line[0..n). */
static size_t last_token(const char *line, size_t n) {
  while (n > 0 && !isspace((unsigned char)line[n - 1])) n--;
  return n;
}

/* austin 1.x -f ends a line with three numbers, "usec mem+ mem-": the time is
 * the first. Where that metric starts (the last token otherwise). */
static size_t austin1_metric(char *line, size_t n) {
  size_t at[3], end = n;
  for (int k = 0; k < 3; k++) {
    size_t sp = last_token(line, end);
    int64_t v;
    if (sp == 0 || parse_i64(line + sp, end - sp, &v)) return last_token(line, n);
    at[k] = sp;
    end = sp - 1;
    while (end > 0 && isspace((unsigned char)line[end - 1])) end--;
  }
  line[at[1] - 1] = 0; /* the two memory figures are left out */
  return at[2];
}

static int import_line(imp *m, char *line) {
  size_t n = strlen(line);
  /* metric: last whitespace-separated token (austin 1.x full mode: see above) */
  size_t sp = m->d == D_AUSTIN1 ? austin1_metric(line, n) : last_token(line, n);
  if (sp == 0) return fail_line(m, "expected 'frame;frame;... COUNT' (no count at the end of the line)");
  char *metric = line + sp;
  line[sp - 1] = 0;
  char *stack = trim(line);
  int64_t count, weight;
  int idle, rc = parse_metric(m, metric, &count, &weight, &idle);
  if (rc) return rc > 0 ? 0 : rc;
  if (!*stack) return fail_line(m, "empty stack");
  if (m->d == D_AUSTIN && strstr(stack, ":INVALID:")) { /* austin's mark of a sample it could not read */
    m->invalid++;
    return 0;
  }
  if (m->d != D_AUSTIN1 && (rc = refuse_old_austin(m, stack))) return rc;
  int gc = 0, depth = 0;
  if (strcmp(stack, BF_NO_PYTHON_FRAME) == 0) stack += strlen(stack); /* bifocal's own: no frame */
  int64_t tid = 0, parent = 0;
  if ((rc = parse_frames(m, stack, &parent, &depth, &tid, &gc))) return rc;
  if (depth == 0 && m->d != D_AUSTIN && m->d != D_AUSTIN1 && *stack)
    return fail_line(m, "no frames before the count");
  int64_t thread;
  if ((rc = bf_store_intern_thread(m->s, m->session, tid, NULL, &thread))) return rc;
  /* counts above 32 bits (e.g. re-imported cpu-ns weights) split into records */
  for (int64_t left = count, wleft = weight; left > 0;) {
    uint32_t c = left > 0xffffffffLL ? 0xffffffffu : (uint32_t)left;
    int64_t w = (left == c) ? wleft : (int64_t)((double)weight * c / (double)count);
    bf_sample smp = {.thread_id = thread, .stack_id = parent, .ts_ns = 0,
                     .flags = (idle ? BF_SAMPLE_IDLE : 0) | (gc ? BF_SAMPLE_GC : 0), .count = c, .weight = w};
    if ((rc = bf_store_sample_add(m->s, m->session, &smp))) return rc;
    left -= c;
    wleft -= w;
  }
  m->samples += count;
  m->records++;
  m->total_weight += weight; /* bounded in parse_metric */
  return 0;
}

static ssize_t read_line(FILE *f, char **buf, size_t *cap, size_t max) {
  size_t n = 0;
  int c;
  while ((c = getc_unlocked(f)) != EOF && c != '\n') {
    if (n >= max) return -2;
    if (n + 1 >= *cap) {
      size_t nc = *cap ? *cap * 2 : 4096;
      if (nc > max + 1) nc = max + 1;
      char *nb = realloc(*buf, nc);
      if (!nb) return -3;
      *buf = nb;
      *cap = nc;
    }
    (*buf)[n++] = (char)c;
  }
  if (c == EOF && n == 0) return -1;
  if (!*buf) {
    *buf = malloc(1);
    if (!*buf) return -3;
    *cap = 1;
  }
  (*buf)[n] = 0;
  return (ssize_t)n;
}

static dialect detect(FILE *f) {
  char *line = NULL;
  size_t cap = 0;
  ssize_t n;
  dialect d = D_FLAMEGRAPH;
  int looked = 0;
  while (looked < 50 && (n = read_line(f, &line, &cap, MAX_LINE)) >= 0) {
    if (memchr(line, 0, (size_t)n)) break;
    char *t = trim(line);
    if (!*t) continue;
    if (*t == '#') {
      if (strncmp(t, "# austin:", 9) == 0) {
        d = D_AUSTIN;
        break;
      }
      continue;
    }
    looked++;
    /* austin 1.x: "Thread <hex>;..." or "Process <pid>;Thread <hex>;..." */
    if (strncmp(t, "Thread ", 7) == 0 ||
        (strncmp(t, "Process ", 8) == 0 && strstr(t, ";Thread ") == t + 8 + strspn(t + 8, "0123456789"))) {
      d = D_AUSTIN1;
      break;
    }
    if (t[0] == 'P' && isdigit((unsigned char)t[1])) {
      char *semi = strchr(t, ';');
      if (semi && semi[1] == 'T') {
        d = D_AUSTIN;
        break;
      }
    }
    /* py-spy if a frame looks like "name (file:line)" */
    char *sp = strrchr(t, ' ');
    if (sp) *sp = 0;
    for (char *p = t; p;) {
      char *semi = strchr(p, ';');
      size_t fl = semi ? (size_t)(semi - p) : strlen(p);
      frame_id fr;
      if (parse_pyspy_frame(p, fl, &fr) == 0 && strncmp(p, "thread (", 8) != 0) {
        d = D_PYSPY;
        goto done;
      }
      p = semi ? semi + 1 : NULL;
    }
  }
done:
  free(line);
  rewind(f);
  return d;
}

static const char *dialect_name(dialect d) {
  return d == D_AUSTIN ? "austin" : d == D_AUSTIN1 ? "austin1" : d == D_PYSPY ? "py-spy" : "flamegraph";
}

/* What austin's "# key: value" header lines say. */
typedef struct hdr {
  const char *clock;
  double interval_us;
  int64_t duration_us;
  char *pyver;
} hdr;

/* One "# key: value" line. 0, or the error. */
static int header_line(imp *m, const char *t, hdr *h) {
  char key[64], val[512];
  if (sscanf(t, "# %63[^:]: %511[^\n]", key, val) != 2) return 0;
  if (strcmp(key, "mode") == 0) {
    if (strcmp(val, "cpu") == 0)
      h->clock = "cpu";
    else if (strcmp(val, "wall") == 0 || strcmp(val, "full") == 0)
      h->clock = "wall";
    else if (strcmp(val, "memory") == 0)
      return fail_line(m, "austin memory-mode captures are not supported (use wall or cpu mode)");
  } else if (strcmp(key, "interval") == 0 || strcmp(key, "duration") == 0) {
    /* whole microseconds, bounded: the ns value and the rates made from it fit */
    int64_t us = 0;
    if (parse_i64(val, strlen(val), &us) || us > MAX_HEADER_US) {
      if (m->d != D_AUSTIN) return 0; /* another tool's comment, not austin's header */
      char msg[256];
      snprintf(msg, sizeof msg, "austin header '# %s: %.40s' is not a time in microseconds (0 to 10^15)", key, val);
      return fail_line(m, msg);
    }
    if (key[0] == 'i') h->interval_us = (double)us;
    else h->duration_us = us;
  } else if (strcmp(key, "python") == 0) {
    free(h->pyver);
    h->pyver = strdup(val);
  }
  return 0;
}

/* Every line of f: headers into *h, samples into the session. 0, or the error. */
static int import_lines(imp *m, FILE *f, hdr *h) {
  char *line = NULL;
  size_t cap = 0;
  ssize_t n;
  int rc = 0;
  while ((n = read_line(f, &line, &cap, MAX_LINE)) != -1) {
    m->lineno++;
    if (n == -3) {
      rc = bf_store_fail(m->s, -ENOMEM, "out of memory");
      break;
    }
    if (n == -2) {
      rc = fail_line(m, "line longer than 4 MiB: not a collapsed-stack text file");
      break;
    }
    if (memchr(line, 0, (size_t)n)) {
      rc = fail_line(m, "binary data (NUL byte): not a collapsed-stack text file");
      break;
    }
    char *t = trim(line);
    if (!*t) continue;
    if ((rc = *t == '#' ? header_line(m, t, h) : import_line(m, t))) break;
  }
  free(line);
  return rc;
}

int bf_import_collapsed(bf_store *s, const char *path, const bf_import_opts *o, int64_t *session_id) {
  FILE *f = fopen(path, "r");
  if (!f) return bf_store_fail(s, -errno, "cannot read '%s': %s", path, strerror(errno));
  imp m = {.s = s, .path = path};
  m.d = detect(f);
  bf_session_info info;
  bf_meta meta;
  char cmd[1024];
  snprintf(cmd, sizeof cmd, "import %s", path);
  bf_meta_src ms = {.kind = "imported", .clock = "wall", .mode = dialect_name(m.d), .command = cmd,
                    .profiler_version = o ? o->profiler_version : NULL, .label = o ? o->label : NULL,
                    .ttl_ns = o ? o->ttl_ns : 0};
  bf_meta_collect(&ms, &meta, &info);
  char *extra = NULL;
  hdr h = {.clock = info.clock};
  int rc = bf_store_begin(s);
  if (rc) goto out_close;
  if ((rc = bf_store_session_begin(s, &info, &m.session))) goto fail;
  rc = import_lines(&m, f, &h);
  if (rc) goto fail;
  if (ferror(f)) {
    rc = bf_store_fail(s, -EIO, "error reading '%s'; nothing imported", path);
    goto fail;
  }
  if (m.records == 0 && m.invalid == 0) {
    rc = bf_store_fail(s, -EINVAL, "'%s' holds no samples (expected lines like 'a;b;c 12'); nothing imported", path);
    goto fail;
  }
  info.id = m.session;
  info.samples = m.samples;
  info.invalid = m.invalid;
  info.status = "complete";
  info.clock = h.clock;
  info.python_version = h.pyver;
  if (h.interval_us > 0) info.rate_hz = 1e6 / h.interval_us;
  if (h.duration_us > 0) {
    info.duration_ns = h.duration_us * 1000;
    info.achieved_rate_hz = (double)m.samples / ((double)h.duration_us / 1e6);
  }
  if (asprintf(&extra,
               "{\"dialect\":\"%s\",\"records\":%lld,\"total_weight\":%lld,\"invalid\":%lld,\"zero_count_lines\":%lld}",
               dialect_name(m.d), (long long)m.records, (long long)m.total_weight, (long long)m.invalid,
               (long long)m.zero_lines) < 0)
    extra = NULL;
  info.extra_json = extra;
  info.created_ns = 0;
  if ((rc = bf_store_flush(s))) goto fail;
  if ((rc = bf_store_session_update(s, &info))) goto fail;
  if ((rc = bf_store_commit(s))) goto fail;
  *session_id = m.session;
  goto out_close;
fail:
  bf_store_rollback(s);
out_close:
  free(h.pyver);
  free(extra);
  free(m.sbuf1);
  free(m.sbuf2);
  fclose(f);
  return rc;
}
