/* cmd_push.c — `bifocal push SESSION... --to URL`: sessions sent to a fleet
 * backend, one request per session, retried with backoff within stated
 * bounds. otlp+http(s):// gets OTLP profiles (gzip, protobuf) at
 * /v1development/profiles; pyroscope(+https):// gets pprof at /ingest as
 * multipart/form-data with its sample type config. Credentials come from the
 * environment or a 0600 headers file, live in memory only and are redacted
 * from every message. */
#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <zlib.h>

#include "cli.h"
#include "clock.h"
#include "exports.h"
#include "fleet.h"
#include "http.h"
#include "jsonw.h"
#include "opts.h"
#include "otlp.h"
#include "query.h"
#include "text.h"
#include "util.h"

#define RETRY_AFTER_MAX_S 30

/* ---- payloads ---------------------------------------------------------------- */

static int gzip_buf(const uint8_t *in, size_t n, char **out, size_t *outn) {
  z_stream z;
  memset(&z, 0, sizeof z);
  if (deflateInit2(&z, Z_DEFAULT_COMPRESSION, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK) return -ENOMEM;
  size_t cap = deflateBound(&z, (uLong)n) + 64;
  char *b = malloc(cap);
  if (!b) {
    deflateEnd(&z);
    return -ENOMEM;
  }
  z.next_in = (Bytef *)in;
  z.avail_in = (uInt)n;
  z.next_out = (Bytef *)b;
  z.avail_out = (uInt)cap;
  int zr = deflate(&z, Z_FINISH);
  *outn = cap - z.avail_out;
  deflateEnd(&z);
  if (zr != Z_STREAM_END) {
    free(b);
    return -EIO;
  }
  *out = b;
  return 0;
}

static int otlp_payload(const dest *d, bf_store *s, int64_t id, bf_push_payload *p) {
  bf_otlp_opts o = {.service_name = d->service, .resource_attributes = getenv("OTEL_RESOURCE_ATTRIBUTES")};
  uint8_t *raw = NULL;
  size_t n = 0;
  int rc = bf_otlp_encode(s, &id, 1, &d->filter, &o, &raw, &n);
  if (rc) return rc;
  if (d->gzip) {
    rc = gzip_buf(raw, n, &p->body, &p->len);
    free(raw);
  } else {
    p->body = (char *)raw;
    p->len = n;
  }
  snprintf(p->url, sizeof p->url, "%s", d->url);
  snprintf(p->ctype, sizeof p->ctype, "application/x-protobuf");
  return rc;
}

/* Percent-encode s (unreserved characters kept) onto the end of buf. */
static void qput(char *buf, size_t len, const char *s) {
  size_t o = strlen(buf);
  for (; *s && o + 4 < len; s++) {
    unsigned char c = (unsigned char)*s;
    if ((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || strchr("-._~", c))
      buf[o++] = (char)c;
    else
      o += (size_t)snprintf(buf + o, len - o, "%%%02X", c);
  }
  buf[o] = 0;
}

/* A Pyroscope label value: what its name syntax allows ({k=v,...}), else '_'. */
static void label(char *name, size_t len, const char *key, const char *v) {
  if (!v || !*v) return;
  size_t o = strlen(name);
  o += (size_t)snprintf(name + o, o < len ? len - o : 0, "%s%s=", name[o - 1] == '{' ? "" : ",", key);
  for (; *v && o + 2 < len; v++)
    name[o++] = (isalnum((unsigned char)*v) || strchr("_.:/-@", *v)) ? *v : '_';
  name[o] = 0;
}

/* pprof of the session as the "profile" part of a form, with a sample type
 * config naming what its first value is (Pyroscope shows APP.<clock>). */
static int pyroscope_payload(const dest *d, bf_store *s, int64_t id, const bf_session_info *in, bf_push_payload *p) {
  char *pb = NULL;
  size_t pn = 0;
  FILE *m = open_memstream(&pb, &pn);
  if (!m) return -ENOMEM;
  int rc = bf_export_pprof(s, id, &d->filter, m);
  if (fclose(m) && !rc) rc = -EIO;
  if (rc) {
    free(pb);
    return rc;
  }
  int traced = strcmp(in->kind, "traced") == 0;
  const char *clock = in->clock && strcmp(in->clock, "cpu") == 0 ? "cpu" : "wall";
  char cfg[512], head[512], tail[256], boundary[64];
  bf_jw cw; /* the sample type's config: {"samples":{"units":"samples",…}} */
  if (bf_jw_mem(&cw)) {
    free(pb);
    return -ENOMEM;
  }
  bf_jw_obj(&cw);
  bf_jw_key(&cw, traced ? "calls" : "samples");
  bf_jw_obj(&cw);
  bf_jw_kstr(&cw, "units", "samples");
  bf_jw_kstr(&cw, "aggregation", "sum");
  bf_jw_kstr(&cw, "display-name", traced ? "calls" : clock);
  bf_jw_kbool(&cw, "sampled", !traced);
  bf_jw_end(&cw);
  bf_jw_end(&cw);
  char *cj = bf_jw_mem_done(&cw);
  if (!cj) {
    free(pb);
    return -ENOMEM;
  }
  snprintf(cfg, sizeof cfg, "%s", cj);
  free(cj);
  snprintf(boundary, sizeof boundary, "bifocal-%lld-%ld", (long long)id, (long)time(NULL));
  snprintf(head, sizeof head, "--%s\r\nContent-Disposition: form-data; name=\"profile\"; filename=\"profile.pprof\"\r\n"
           "Content-Type: application/octet-stream\r\n\r\n", boundary);
  snprintf(tail, sizeof tail, "\r\n--%s\r\nContent-Disposition: form-data; name=\"sample_type_config\"; "
           "filename=\"sample_type_config.json\"\r\nContent-Type: application/json\r\n\r\n", boundary);
  size_t hl = strlen(head), tl = strlen(tail), cl = strlen(cfg), el = strlen(boundary) + 16; /* "\r\n--B--\r\n" and its NUL */
  p->body = malloc(hl + pn + tl + cl + el);
  if (!p->body) {
    free(pb);
    return -ENOMEM;
  }
  memcpy(p->body, head, hl);
  memcpy(p->body + hl, pb, pn);
  memcpy(p->body + hl + pn, tail, tl);
  memcpy(p->body + hl + pn + tl, cfg, cl);
  p->len = hl + pn + tl + cl;
  p->len += (size_t)sprintf(p->body + p->len, "\r\n--%s--\r\n", boundary);
  free(pb);
  snprintf(p->ctype, sizeof p->ctype, "multipart/form-data; boundary=%s", boundary);
  /* name=APP{labels}&from=&until=&sampleRate=&spyName=bifocal&format=pprof */
  char name[1024], num[64];
  snprintf(name, sizeof name, "%s{", d->service);
  char sid[32];
  snprintf(sid, sizeof sid, "%lld", (long long)id);
  label(name, sizeof name, "bifocal_session", sid);
  label(name, sizeof name, "bifocal_clock", in->clock);
  label(name, sizeof name, "bifocal_mode", in->mode);
  label(name, sizeof name, "hostname", in->host);
  label(name, sizeof name, "python_version", in->python_version);
  label(name, sizeof name, "commit", in->commit);
  label(name, sizeof name, "label", in->label);
  snprintf(name + strlen(name), sizeof name - strlen(name), "}");
  int64_t t0 = in->start_ns + d->filter.since_ns, t1 = in->start_ns + in->duration_ns;
  if (d->filter.until_ns > 0 && (in->duration_ns <= 0 || in->start_ns + d->filter.until_ns < t1))
    t1 = in->start_ns + d->filter.until_ns;
  int64_t from = t0 / 1000000000, until = (t1 + 999999999) / 1000000000;
  if (until <= from) until = from + 1;
  snprintf(p->url, sizeof p->url, "%s?name=", d->url);
  qput(p->url, sizeof p->url, name);
  snprintf(num, sizeof num, "&from=%lld&until=%lld", (long long)from, (long long)until);
  snprintf(p->url + strlen(p->url), sizeof p->url - strlen(p->url), "%s", num);
  if (in->rate_hz > 0)
    snprintf(p->url + strlen(p->url), sizeof p->url - strlen(p->url), "&sampleRate=%lld", (long long)llround(in->rate_hz));
  snprintf(p->url + strlen(p->url), sizeof p->url - strlen(p->url), "&spyName=bifocal&format=pprof");
  return 0;
}

int bf_push_encode(const dest *d, bf_store *s, int64_t id, const bf_session_info *in, bf_push_payload *p) {
  return d->kind == DEST_OTLP ? otlp_payload(d, s, id, p) : pyroscope_payload(d, s, id, in, p);
}

/* ---- sending ----------------------------------------------------------------- */

static void nap_ms(long ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) && errno == EINTR) {
  }
}

/* OTLP's answer: an ExportProfilesServiceResponse; rejected profiles, if any. */
static int64_t otlp_rejected(const uint8_t *b, size_t n, char *msg, size_t mlen) {
  msg[0] = 0;
  /* field 1 (partial_success), length-delimited: fields 1 (varint), 2 (string) */
  if (n < 2 || b[0] != 0x0a || b[1] >= 0x80 || (size_t)b[1] + 2 > n) return 0;
  const uint8_t *p = b + 2, *end = b + 2 + b[1];
  int64_t rejected = 0;
  while (p < end) {
    uint8_t tag = *p++;
    if (tag == 0x08) {
      uint64_t v = 0;
      for (int sh = 0; p < end && sh < 64; sh += 7) {
        v |= (uint64_t)(*p & 0x7f) << sh;
        if (!(*p++ & 0x80)) break;
      }
      rejected = (int64_t)v;
    } else if (tag == 0x12 && p < end && *p < 0x80 && p + 1 + *p <= end) {
      snprintf(msg, mlen, "%.*s", (int)*p, (const char *)p + 1);
      p += 1 + *p;
    } else {
      break;
    }
  }
  return rejected;
}

static int retryable(bf_http_result r, long status) {
  if (r == BF_HTTP_CONNECT || r == BF_HTTP_TIMEOUT || r == BF_HTTP_TRANSFER) return 1;
  return r == BF_HTTP_OK && (status == 408 || status == 429 || status == 502 || status == 503 || status == 504 ||
                             status == 500);
}

void bf_push_send(const dest *d, const bf_push_payload *p, bf_push_outcome *out) {
  const char *hdrs[MAX_HEADERS + 3];
  char ct[160];
  size_t nh = 0;
  snprintf(ct, sizeof ct, "Content-Type: %s", p->ctype);
  hdrs[nh++] = ct;
  if (d->kind == DEST_OTLP && d->gzip) hdrs[nh++] = "Content-Encoding: gzip";
  for (size_t i = 0; i < d->nhdr; i++) hdrs[nh++] = d->hdr[i];
  hdrs[nh] = NULL;
  bf_http_req rq = d->rq;
  rq.url = p->url;
  rq.headers = hdrs;
  rq.body = p->body;
  rq.body_len = p->len;
  out->bytes = p->len;
  long backoff = 500;
  for (int a = 0; a <= d->retries; a++) {
    bf_http_resp r;
    bf_err err = BF_ERR_INIT;
    bf_http_result res = bf_http_send(&rq, &r, &err);
    out->attempts = a + 1;
    out->status = r.status;
    if (res == BF_HTTP_OK && r.status >= 200 && r.status < 300) {
      char msg[256];
      int64_t rej = d->kind == DEST_OTLP ? otlp_rejected(r.body, r.len, msg, sizeof msg) : 0;
      if (rej > 0) {
        char m2[1024];
        snprintf(m2, sizeof m2, "%s accepted the request but rejected %lld profile(s): %s", d->shown, (long long)rej,
                 msg);
        bf_fleet_redact(d, m2, out->error.msg, sizeof out->error.msg);
      } else {
        out->ok = 1;
      }
      bf_http_resp_free(&r);
      return;
    }
    if (res == BF_HTTP_OK) {
      char body[200];
      snprintf(body, sizeof body, "%.*s", (int)(r.len < 160 ? r.len : 160), r.body ? (const char *)r.body : "");
      for (char *c = body; *c; c++)
        if (*c == '\n' || *c == '\r') *c = ' ';
      snprintf(err.msg, sizeof err.msg, "%s answered HTTP %ld%s%s", d->shown, r.status, *body ? ": " : "", body);
    }
    long wait = backoff;
    if (res == BF_HTTP_OK && r.retry_after_s >= 0) wait = r.retry_after_s * 1000;
    out->retry_after_ms = res == BF_HTTP_OK && r.retry_after_s >= 0 ? r.retry_after_s * 1000 : -1;
    bf_http_resp_free(&r);
    out->retryable = retryable(res, out->status);
    if (!retryable(res, out->status) || a == d->retries) {
      snprintf(err.msg + strlen(err.msg), sizeof err.msg - strlen(err.msg), "%s",
               retryable(res, out->status) && d->retries > 0
                   ? " (gave up after the last retry; the session stays in the database)" : "");
      bf_fleet_redact(d, err.msg, out->error.msg, sizeof out->error.msg);
      return;
    }
    if (wait > RETRY_AFTER_MAX_S * 1000L) {
      snprintf(err.msg + strlen(err.msg), sizeof err.msg - strlen(err.msg), " and asks to wait %ld s, more than the %d s bound: try later",
               wait / 1000, RETRY_AFTER_MAX_S);
      bf_fleet_redact(d, err.msg, out->error.msg, sizeof out->error.msg);
      return;
    }
    nap_ms(wait);
    backoff = backoff * 2 > 8000 ? 8000 : backoff * 2;
  }
}

/* ---- the command ------------------------------------------------------------- */

static void report(const bf_cli *cli, const dest *d, int64_t id, const bf_push_outcome *o, bf_jw *jw) {
  if (jw) { /* an item of the --json array */
    bf_jw_obj(jw);
    bf_jw_kint(jw, "session", (long long)id);
    bf_jw_kstr(jw, "to", d->shown);
    bf_jw_kbool(jw, "ok", o->ok);
    bf_jw_kint(jw, "status", (long long)o->status);
    bf_jw_kint(jw, "attempts", o->attempts);
    bf_jw_kint(jw, "bytes", (long long)o->bytes);
    bf_jw_kstr(jw, "error", o->ok ? NULL : o->error.msg);
    bf_jw_end(jw);
    return;
  }
  (void)cli;
  if (o->ok)
    printf("session %lld pushed to %s (HTTP %ld, %zu bytes, %d attempt%s)\n", (long long)id, d->shown, o->status,
           o->bytes, o->attempts, o->attempts == 1 ? "" : "s");
  else
    bf_cli_error("session %lld not pushed: %s", (long long)id, o->error.msg);
}

static int push_one(bf_cli *cli, const dest *d, bf_store *s, const char *arg, bf_jw *jw) {
  int64_t id;
  int rc = bf_cli_session_arg(cli, s, arg, &id);
  if (rc) return rc;
  bf_session_info *in = NULL;
  bf_push_payload p = {0};
  bf_push_outcome o = {0};
  if ((rc = bf_store_session_get(s, id, &in)) ||
      (rc = bf_push_encode(d, s, id, in, &p))) {
    bf_err_set(&o.error, rc, "cannot encode it: %s", bf_store_errmsg(s));
    if (rc == -ENOMEM) bf_err_set(&o.error, rc, "out of memory encoding it");
  } else {
    bf_push_send(d, &p, &o);
  }
  report(cli, d, id, &o, jw);
  free(p.body);
  bf_session_info_free(in);
  return o.ok ? 0 : 1;
}

static int parse_seconds(const char *arg, const char *what, long *ms) {
  char *end;
  double v = strtod(arg, &end);
  if (end == arg || *end || !(v > 0) || v > 3600) {
    bf_cli_error("%s takes seconds (0 < S <= 3600), not '%s'", what, arg);
    return 2;
  }
  *ms = (long)(v * 1000 + 0.5);
  return 0;
}

/* ---- push --follow: each window of a growing session as it closes ---------- */

/* Window k of session id: encode and send until it is delivered, waiting
 * between rounds while the backend stays away (the samples wait in the
 * database, which the recorder keeps writing: it never waits on this). 0 sent,
 * 1 refused for good. */
static int follow_window(const bf_cli *cli, dest *d, bf_store *s, int64_t id, int64_t k, int64_t every_ns,
                         int64_t end_ns) {
  d->filter.since_ns = k * every_ns;
  d->filter.until_ns = end_ns;
  for (long pause = 1000;; pause = pause * 2 > 30000 ? 30000 : pause * 2) {
    bf_session_info *in = NULL;
    bf_push_payload p = {0};
    bf_push_outcome o = {0};
    int rc = bf_store_session_get(s, id, &in);
    if (!rc) rc = bf_push_encode(d, s, id, in, &p);
    if (rc) {
      bf_cli_error("session %lld window %lld: cannot encode it: %s", (long long)id, (long long)k, bf_store_errmsg(s));
    } else {
      bf_push_send(d, &p, &o);
    }
    free(p.body);
    bf_session_info_free(in);
    if (o.ok) {
      printf("session %lld window %lld (%.3f-%.3f s) pushed to %s (HTTP %ld, %zu bytes)\n", (long long)id,
             (long long)k, (double)k * (double)every_ns / 1e9, (double)end_ns / 1e9, d->shown, o.status, o.bytes);
      fflush(stdout);
      return 0;
    }
    if (rc || !o.retryable) {
      if (!rc) bf_cli_error("session %lld window %lld not pushed: %s", (long long)id, (long long)k, o.error.msg);
      return 1;
    }
    bf_cli_warn("session %lld window %lld waits for the backend (%s); next try in %ld s", (long long)id,
                (long long)k, o.error.msg, pause / 1000);
    nap_ms(pause);
  }
  (void)cli;
}

/* Has the recorder stored a sample at or after end_ns (from the start)? It
 * flushes every thread's samples together, so then the window before is whole. */
static int window_closed(bf_store *s, int64_t id, int64_t end_ns) {
  bf_sample_filter f = {.since_ns = end_ns};
  bf_q_cursor *c = NULL;
  const bf_sample *smp;
  int any = 0;
  if (bf_q_timeline_open(s, id, &f, &c) == 0) any = bf_q_timeline_next(c, &smp) == 1;
  bf_q_timeline_close(c);
  return any;
}

/* Push session id window by window (every_ns long, relative to its start),
 * each once it has closed (a later sample is stored, or 10 s have passed
 * since its end without any), in order, until the session is finished and
 * its last window sent. */
static int follow(const bf_cli *cli, dest *d, bf_store *s, int64_t id, int64_t every_ns) {
  for (int64_t k = 0;;) {
    bf_session_info *in = NULL;
    if (bf_store_session_get(s, id, &in)) {
      bf_cli_error("%s", bf_store_errmsg(s));
      return 1;
    }
    int done = in->status && strcmp(in->status, "incomplete") != 0;
    int64_t start = in->start_ns, dur = in->duration_ns;
    bf_session_info_free(in);
    int64_t end = (k + 1) * every_ns;
    if (done && k * every_ns >= dur && k > 0) return 0;
    if (done || window_closed(s, id, end) || bf_wall_ns() - start > end + 10000000000LL) {
      if (done && end >= dur) end = 0; /* the last window: to the end */
      if (follow_window(cli, d, s, id, k, every_ns, end)) return 1;
      if (!end) return 0;
      k++;
      continue;
    }
    nap_ms(200);
  }
}

typedef struct push_args {
  const char *to, *hfile;
  int json, follow, resume;
  int64_t every_ns;
} push_args;

/* push's options into d and a. -1 to go on, else the exit status. */
static int push_opts(int argc, char **argv, dest *d, push_args *a) {
  static const struct option opts[] = {{"to", required_argument, NULL, 'T'},
                                       {"service", required_argument, NULL, 'N'},
                                       {"headers-file", required_argument, NULL, 'H'},
                                       {"timeout", required_argument, NULL, 'w'},
                                       {"retries", required_argument, NULL, 'R'},
                                       {"cacert", required_argument, NULL, 'C'},
                                       {"insecure", no_argument, NULL, 'k'},
                                       {"json", no_argument, NULL, 'j'},
                                       {"since", required_argument, NULL, 'S'},
                                       {"until", required_argument, NULL, 'U'},
                                       {"follow", no_argument, NULL, 'f'},
                                       {"every", required_argument, NULL, 'e'},
                                       {"resume", no_argument, NULL, 'r'},
                                       {"help", no_argument, NULL, 'h'},
                                       {0}};
  int c;
  while ((c = getopt_long(argc, argv, "jh", opts, NULL)) != -1) {
    switch (c) {
      case 'T': a->to = optarg; break;
      case 'N': d->service = optarg; break;
      case 'H': a->hfile = optarg; break;
      case 'w':
        if (parse_seconds(optarg, "--timeout", &d->rq.timeout_ms)) return 2;
        break;
      case 'R': {
        char *end;
        long v = strtol(optarg, &end, 10);
        if (end == optarg || *end || v < 0 || v > 10) {
          bf_cli_error("--retries takes 0..10, not '%s'", optarg);
          return 2;
        }
        d->retries = (int)v;
        break;
      }
      case 'C': d->rq.ca_file = optarg; break;
      case 'k': d->rq.insecure = 1; break;
      case 'j': a->json = 1; break;
      case 'S':
      case 'U':
        if (bf_opt_window(c, optarg, &d->filter)) return 2;
        break;
      case 'f': a->follow = 1; break;
      case 'r': a->resume = 1; break;
      case 'e':
        if (bf_parse_duration_ns(optarg, &a->every_ns) < 0 || a->every_ns < 1000000000LL ||
            a->every_ns > 3600000000000LL) {
          bf_cli_error("--every takes 1s .. 1h (e.g. 10s), not '%s'", optarg);
          return 2;
        }
        break;
      case 'h': bf_cli_usage(bf_cli_find("push"), stdout); return 0;
      default: return 2;
    }
  }
  if (a->resume && (a->follow || a->json || d->filter.since_ns || d->filter.until_ns)) {
    bf_cli_error("push --resume sends spooled windows as they were spooled: no --follow/--json/--since/--until");
    return 2;
  }
  if (optind >= argc && !a->resume) {
    bf_cli_error("push needs one or more session ids or labels");
    return 2;
  }
  if (a->follow && (optind != argc - 1 || a->json || d->filter.since_ns || d->filter.until_ns)) {
    bf_cli_error("push --follow takes one session (id or label) and no --json/--since/--until");
    return 2;
  }
  return -1;
}

void bf_fleet_dest_init(dest *d) {
  memset(d, 0, sizeof *d);
  d->retries = 3;
  d->rq = (bf_http_req){.max_response = 1 << 20, .max_redirects = 3, .timeout_ms = 10000};
  d->service = getenv("OTEL_SERVICE_NAME");
}

int bf_fleet_push_dest(dest *d, const char *to, const char *hfile) {
  const char *comp = getenv("OTEL_EXPORTER_OTLP_COMPRESSION");
  int rc;
  d->gzip = !(comp && strcmp(comp, "none") == 0);
  if ((rc = bf_fleet_dest(d, to, "/ingest"))) return rc;
  if (!d->service || !*d->service) d->service = d->kind == DEST_OTLP ? NULL : "bifocal";
  if (d->kind == DEST_OTLP)
    rc = bf_fleet_otel_headers(d, getenv("OTEL_EXPORTER_OTLP_PROFILES_HEADERS") ? "OTEL_EXPORTER_OTLP_PROFILES_HEADERS"
                                                                                : "OTEL_EXPORTER_OTLP_HEADERS");
  else
    rc = bf_fleet_pyroscope_auth(d);
  if (!rc && hfile) rc = bf_fleet_headers_file(d, hfile);
  return rc;
}

int bf_cmd_push(bf_cli *cli, int argc, char **argv) {
  dest d;
  bf_fleet_dest_init(&d);
  push_args a = {.every_ns = 10000000000LL};
  int rc = push_opts(argc, argv, &d, &a);
  if (rc >= 0) return rc;
  rc = bf_fleet_push_dest(&d, a.to, a.hfile);
  bf_store *s = NULL;
  if (!rc && a.resume) {
    rc = bf_cli_open_store(cli, 0, &s);
    if (!rc) rc = bf_push_resume(cli, &d, s, argv + optind, argc - optind);
    bf_store_close(s);
    bf_fleet_dest_free(&d);
    return rc;
  }
  if (!rc) rc = bf_cli_open_store(cli, BF_STORE_READONLY, &s);
  if (rc) {
    bf_fleet_dest_free(&d);
    return rc;
  }
  int64_t id;
  if (a.follow) {
    if (!(rc = bf_cli_session_arg(cli, s, argv[optind], &id))) rc = follow(cli, &d, s, id, a.every_ns);
  } else {
    bf_jw w;
    bf_jw_init(&w, stdout);
    if (a.json) bf_jw_arr(&w);
    for (int i = optind; i < argc; i++) {
      int r = push_one(cli, &d, s, argv[i], a.json ? &w : NULL);
      if (r > rc) rc = r;
    }
    if (a.json) {
      bf_jw_end(&w);
      printf("\n");
    }
  }
  bf_store_close(s);
  bf_fleet_dest_free(&d);
  return rc;
}
