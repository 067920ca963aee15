/* cmd_import_pyroscope.c — `bifocal import --from pyroscope URL --query SEL
 * --since T --until T`: the fleet's merged profile (Pyroscope's querier
 * SelectMergeProfile, connect protocol, protobuf both ways) stored as an
 * imported session carrying its query, for correlate/calibrate/Lua to join
 * with an offline trace. */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"
#include "fleet.h"
#include "import_pyroscope.h"
#include "jsonw.h"
#include "opts.h"

#define DEFAULT_TYPE "process_cpu:cpu:nanoseconds:cpu:nanoseconds"

/* T: Unix seconds, "now", "now-30m" / "-30m" (s, m, h, d), or
 * "YYYY-MM-DDTHH:MM:SSZ". OUT: *ms since the epoch. */
static int parse_time(const char *what, const char *t, int64_t *ms) {
  time_t now = time(NULL);
  char *end;
  if (strcmp(t, "now") == 0) {
    *ms = (int64_t)now * 1000;
    return 0;
  }
  const char *rel = strncmp(t, "now-", 4) == 0 ? t + 3 : t[0] == '-' ? t : NULL;
  if (rel) {
    double v = strtod(rel + 1, &end);
    double mul = *end == 's' ? 1 : *end == 'm' ? 60 : *end == 'h' ? 3600 : *end == 'd' ? 86400 : 0;
    if (end != rel + 1 && mul > 0 && end[1] == 0 && v >= 0) {
      *ms = (int64_t)now * 1000 - (int64_t)(v * mul * 1000);
      return 0;
    }
  } else {
    double v = strtod(t, &end);
    if (end != t && *end == 0 && v > 0) {
      *ms = (int64_t)(v * 1000);
      return 0;
    }
    struct tm tm = {0};
    const char *r = strptime(t, "%Y-%m-%dT%H:%M:%S", &tm);
    if (r && (strcmp(r, "Z") == 0 || *r == 0)) {
      *ms = (int64_t)timegm(&tm) * 1000;
      return 0;
    }
  }
  bf_cli_error("%s '%s': expected Unix seconds, now, now-30m (s/m/h/d) or 2026-12-01T10:00:00Z", what, t);
  return 2;
}

/* What the session keeps of the query (no credential is in any of it). */
static char *query_json(const dest *d, const char *type, const char *sel, int64_t from, int64_t until) {
  bf_jw w;
  if (bf_jw_mem(&w)) return NULL;
  bf_jw_obj(&w);
  bf_jw_kstr(&w, "url", d->shown);
  bf_jw_kstr(&w, "profile_type", type);
  bf_jw_kstr(&w, "query", sel);
  bf_jw_kint(&w, "since_ms", from);
  bf_jw_kint(&w, "until_ms", until);
  bf_jw_end(&w);
  return bf_jw_mem_done(&w);
}

typedef struct iq {
  const char *url, *sel, *type, *hfile;
  int64_t from, until;
  bf_import_opts io;
} iq;

/* Ask, then store. 0 or the exit status. */
static int fetch_and_store(bf_cli *cli, dest *d, const iq *q) {
  uint8_t *req = NULL;
  size_t reqn = 0;
  if (bf_pyroscope_merge_request(q->type, q->sel, q->from, q->until, &req, &reqn)) return 1;
  const char *hdrs[MAX_HEADERS + 3] = {"Content-Type: application/proto", "Connect-Protocol-Version: 1"};
  size_t nh = 2;
  for (size_t i = 0; i < d->nhdr; i++) hdrs[nh++] = d->hdr[i];
  hdrs[nh] = NULL;
  bf_http_req rq = d->rq;
  rq.url = d->url;
  rq.headers = hdrs;
  rq.body = req;
  rq.body_len = reqn;
  bf_http_resp r;
  bf_err err = BF_ERR_INIT;
  char msg[1200];
  bf_http_result res = bf_http_send(&rq, &r, &err);
  free(req);
  if (res == BF_HTTP_OK && r.status != 200) {
    bf_err_set(&err, BF_HTTP_USAGE, "%s answered HTTP %ld: %.*s", d->shown, r.status, (int)(r.len < 160 ? r.len : 160),
             r.body ? (const char *)r.body : "");
    res = BF_HTTP_USAGE;
  }
  if (res != BF_HTTP_OK) {
    bf_fleet_redact(d, err.msg, msg, sizeof msg);
    bf_cli_error("import --from pyroscope: %s", msg);
    bf_http_resp_free(&r);
    return 1;
  }
  bf_store *s;
  int rc = bf_cli_open_store(cli, BF_STORE_CREATE, &s);
  if (rc) {
    bf_http_resp_free(&r);
    return rc;
  }
  char *extra = query_json(d, q->type, q->sel, q->from, q->until);
  char host[256];
  const char *h = strstr(d->shown, "://");
  snprintf(host, sizeof host, "%.*s", h ? (int)strcspn(h + 3, "/") : 0, h ? h + 3 : "");
  bf_import_pprof_meta meta = {.start_ns = q->from * 1000000, .duration_ns = (q->until - q->from) * 1000000,
                               .host = host, .extra_json = extra};
  int64_t id = 0;
  rc = extra ? bf_import_pprof(s, r.body, r.len, &q->io, &meta, &id) : -ENOMEM;
  if (rc) {
    bf_fleet_redact(d, extra ? bf_store_errmsg(s) : "out of memory", msg, sizeof msg);
    bf_cli_error("import --from pyroscope: %s", msg);
  }
  bf_store_close(s);
  free(extra);
  bf_http_resp_free(&r);
  if (rc) return 1;
  printf("%lld\n", (long long)id);
  return 0;
}

int bf_import_is_fleet(int argc, char **argv) {
  static const char *const own[] = {"--from", "--query", "--since", "--until", "--profile-type", "--headers-file",
                                    "--timeout", "--cacert", "--insecure", NULL};
  for (int i = 1; i < argc && strcmp(argv[i], "--") != 0; i++)
    for (const char *const *o = own; *o; o++) {
      size_t n = strlen(*o);
      if (strncmp(argv[i], *o, n) == 0 && (argv[i][n] == 0 || argv[i][n] == '=')) return 1;
    }
  return 0;
}

int bf_cmd_import_pyroscope(bf_cli *cli, int argc, char **argv) {
  static const struct option opts[] = {
      {"from", required_argument, NULL, 'F'},    {"query", required_argument, NULL, 'q'},
      {"since", required_argument, NULL, 'S'},   {"until", required_argument, NULL, 'U'},
      {"profile-type", required_argument, NULL, 'P'}, {"label", required_argument, NULL, 'l'},
      {"ttl", required_argument, NULL, 't'},     {"headers-file", required_argument, NULL, 'H'},
      {"timeout", required_argument, NULL, 'w'}, {"cacert", required_argument, NULL, 'C'},
      {"insecure", no_argument, NULL, 'k'},      {"help", no_argument, NULL, 'h'},
      {0}};
  iq q = {.type = DEFAULT_TYPE, .io = {.profiler_version = BF_VERSION}};
  const char *since = "now-1h", *until = "now", *from = NULL;
  dest d = {.rq = {.max_response = 256u << 20, .max_redirects = 3, .timeout_ms = 30000}};
  int c;
  while ((c = getopt_long(argc, argv, "l:t:h", opts, NULL)) != -1) {
    switch (c) {
      case 'F': from = optarg; break;
      case 'q': q.sel = optarg; break;
      case 'S': since = optarg; break;
      case 'U': until = optarg; break;
      case 'P': q.type = optarg; break;
      case 'l': q.io.label = optarg; break;
      case 't':
        if (bf_opt_ttl(optarg, &q.io.ttl_ns)) return 2;
        break;
      case 'H': q.hfile = optarg; break;
      case 'w': {
        char *end;
        double v = strtod(optarg, &end);
        if (end == optarg || *end || !(v > 0) || v > 3600) {
          bf_cli_error("--timeout takes seconds (0 < S <= 3600), not '%s'", optarg);
          return 2;
        }
        d.rq.timeout_ms = (long)(v * 1000);
        break;
      }
      case 'C': d.rq.ca_file = optarg; break;
      case 'k': d.rq.insecure = 1; break;
      case 'h': bf_cli_usage(bf_cli_find("import"), stdout); return 0;
      default: return 2;
    }
  }
  if (!from || strcmp(from, "pyroscope") != 0) {
    bf_cli_error("import --from takes 'pyroscope' (the one fleet backend bifocal reads from)");
    return 2;
  }
  if (optind != argc - 1 || !q.sel) {
    bf_cli_error("usage: import --from pyroscope URL --query '{service_name=\"x\"}' [--since T] [--until T]");
    return 2;
  }
  if (parse_time("--since", since, &q.from) || parse_time("--until", until, &q.until)) return 2;
  if (q.until <= q.from) {
    bf_cli_error("--until must be after --since");
    return 2;
  }
  /* pyroscope://, pyroscope+https:// or plain http(s):// to a Pyroscope */
  char to[2048];
  const char *u = argv[optind];
  if (strncmp(u, "http://", 7) == 0 || strncmp(u, "https://", 8) == 0)
    snprintf(to, sizeof to, "pyroscope+%s", u);
  else
    snprintf(to, sizeof to, "%s", u);
  int rc = bf_fleet_dest(&d, to, "/querier.v1.QuerierService/SelectMergeProfile");
  if (!rc && d.kind != DEST_PYROSCOPE) {
    bf_cli_error("import --from pyroscope needs a pyroscope:// or http(s):// URL");
    rc = 2;
  }
  if (!rc) rc = bf_fleet_pyroscope_auth(&d);
  if (!rc && q.hfile) rc = bf_fleet_headers_file(&d, q.hfile);
  if (!rc) rc = fetch_and_store(cli, &d, &q);
  bf_fleet_dest_free(&d);
  return rc;
}
