/* push_record.c — record --push: each window of the session being recorded,
 * encoded once it closes, spooled in the database (core/spool.h) and sent by
 * a process of its own, so the sampler never waits on the network; and push
 * --resume, which sends what a record left in the spool. Credentials stay in
 * memory (fleet.h): the spool holds the request without its headers.
 * A process, not a thread: a second connection to the database inside the
 * recorder would open and close the file before SQLite sees it (the store's
 * header check), and closing any descriptor of a file drops every fcntl lock
 * the process holds on it: the recorder's own, after which another
 * process's last close deletes the WAL the recorder still writes. */
#include <errno.h>
#include <inttypes.h>
#include <pwd.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "fleet.h"
#include "jsonw.h"
#include "query.h"
#include "sampler.h"
#include "spool.h"
#include "util.h"

#define RETRY_AFTER_CAP_MS 600000L /* a longer Retry-After is taken as this */
#define BACKOFF_MAX_MS 30000L
#define CLOSE_MARGIN_NS 1500000000LL /* the recorder writes every thread's samples each second */
#define IDLE_CLOSE_NS 10000000000LL  /* a window without any later sample closes this long after its end */

struct bf_push_rec {
  dest d;
  bf_push_cfg cfg;
  char db_path[4096];
  volatile int64_t sid;
  atomic_int finishing;
  _Atomic int64_t deadline_mono_ns; /* set with finishing */
  pid_t child;
  int64_t next_seq; /* windows spooled so far */
  int64_t dropped, unsaid, unsaid_last, drop_said_ns; /* dropped windows, and those not said yet */
  int down;         /* the last attempt failed (said once until one succeeds) */
};

int bf_push_record_opt(int c, const char *arg, bf_push_cfg *cfg) {
  int64_t v;
  char *end;
  cfg->others |= c != BF_PUSH_OPT;
  switch (c - BF_PUSH_OPT) {
    case 0: cfg->to = arg; return 0;
    case 1:
      if (bf_parse_duration_ns(arg, &v) < 0 || v < 1000000000LL || v > 3600000000000LL) {
        bf_cli_error("--every takes 1s .. 1h (e.g. 10s), not '%s'", arg);
        return 2;
      }
      cfg->every_ns = v;
      return 0;
    case 2: {
      double x = strtod(arg, &end);
      int64_t mul = 1;
      if (*end == 'k' || *end == 'K') mul = 1 << 10, end++;
      else if (*end == 'M' || *end == 'm') mul = 1 << 20, end++;
      else if (*end == 'G' || *end == 'g') mul = 1 << 30, end++;
      if (*end == 'B' || *end == 'b') end++;
      if (end == arg || *end || !(x >= 0) || x * (double)mul > 1e12) {
        bf_cli_error("--push-spool-max takes a size such as 64MB or 512k (0 keeps no unsent window), not '%s'", arg);
        return 2;
      }
      cfg->spool_max_bytes = (int64_t)(x * (double)mul);
      return 0;
    }
    case 3: cfg->hfile = arg; return 0;
    case 4:
    case 5: {
      double s = strtod(arg, &end);
      if (end == arg || *end || !(s >= (c == BF_PUSH_OPT + 4 ? 0 : 0.1)) || s > 3600) {
        bf_cli_error("%s takes seconds (%s .. 3600), not '%s'", c == BF_PUSH_OPT + 4 ? "--push-wait" : "--push-timeout",
                     c == BF_PUSH_OPT + 4 ? "0" : "0.1", arg);
        return 2;
      }
      *(c == BF_PUSH_OPT + 4 ? &cfg->wait_ms : &cfg->timeout_ms) = (long)(s * 1000 + 0.5);
      return 0;
    }
  }
  return 2;
}

static void nap_ms(long ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) && errno == EINTR) {
  }
}

/* An audit row of its own for dropped windows (the record's row says how the
 * capture went). */
static void audit_drop(bf_store *s, int64_t sid, const char *what) {
  struct passwd *pw = getpwuid(getuid());
  bf_audit_entry e = {.time_ns = bf_wall_ns(), .user = pw ? pw->pw_name : NULL, .uid = getuid(), .target_uid = -1,
                      .command = "record --push", .argv = NULL, .outcome = what, .session_id = sid};
  int64_t id;
  bf_store_audit_add(s, &e, &id);
}

/* Has window [.., end_ns) of the session closed? */
static int window_closed(bf_store *s, int64_t sid, int64_t start_ns, int64_t end_ns) {
  bf_sample_filter f = {.since_ns = end_ns + CLOSE_MARGIN_NS};
  bf_q_cursor *c = NULL;
  const bf_sample *smp;
  int any = 0;
  if (bf_q_timeline_open(s, sid, &f, &c) == 0) any = bf_q_timeline_next(c, &smp) == 1;
  bf_q_timeline_close(c);
  return any || bf_wall_ns() - start_ns > end_ns + IDLE_CLOSE_NS;
}

/* Encode window seq (the last one when last: to the session's end) and
 * spool it, then keep the spool in its bound. 0, or -1 to try later. */
static int spool_window(bf_push_rec *p, bf_store *s, const bf_session_info *in, int64_t seq, int last) {
  dest dw = p->d;
  int64_t w = p->cfg.every_ns;
  dw.filter = (bf_sample_filter){.since_ns = seq * w, .until_ns = last ? 0 : (seq + 1) * w};
  bf_push_payload pl = {0};
  int rc = bf_push_encode(&dw, s, p->sid, in, &pl);
  if (rc) {
    bf_cli_warn("record --push: window %" PRId64 " of session %" PRId64 " cannot be encoded yet (%s); trying again",
                seq, p->sid, bf_store_errmsg(s));
    free(pl.body);
    return -1;
  }
  bf_spool_row r = {.session_id = p->sid, .seq = seq, .window_start_ns = seq * w,
                    .window_end_ns = last ? (in->duration_ns > seq * w ? in->duration_ns : seq * w) : (seq + 1) * w};
  snprintf(r.target, sizeof r.target, "%s", p->d.shown);
  snprintf(r.url_suffix, sizeof r.url_suffix, "%s", pl.url + strlen(p->d.url));
  snprintf(r.content_type, sizeof r.content_type, "%s", pl.ctype);
  rc = bf_spool_add(s, &r, pl.body, pl.len);
  free(pl.body);
  if (rc) return -1; /* the recorder holds the lock: next round */
  int64_t n, a, b;
  if (bf_spool_trim(s, p->d.shown, p->cfg.spool_max_bytes, &n, &a, &b) == 0 && n > 0) {
    p->dropped += n;
    p->unsaid += n;
    if (p->unsaid_last < 0 || b > p->unsaid_last) p->unsaid_last = b;
    int64_t now = bf_mono_ns();
    if (!p->drop_said_ns || now - p->drop_said_ns > 60000000000LL) { /* said at once, then once a minute */
      char what[1024];
      snprintf(what, sizeof what,
               "the push spool for %s passed its bound (%" PRId64 " bytes): dropped the %" PRId64
               " oldest unsent window(s), up to window %" PRId64 " of session %" PRId64 " (%" PRId64
               " so far); their samples stay in the session",
               p->d.shown, p->cfg.spool_max_bytes, p->unsaid, p->unsaid_last, p->sid, p->dropped);
      bf_cli_warn("record --push: %s", what);
      audit_drop(s, p->sid, what);
      p->drop_said_ns = now;
      p->unsaid = 0;
      p->unsaid_last = -1;
    }
  }
  return 0;
}

/* A spooled request is sent with the user's credentials: only what bifocal
 * itself spools goes (a crafted database could hold a header in the content
 * type, or another path in the URL). */
static int row_ok(const bf_spool_row *r) {
  const char *ct = r->content_type, *mp = "multipart/form-data; boundary=";
  if (strcmp(ct, "application/x-protobuf") != 0) {
    if (strncmp(ct, mp, strlen(mp)) != 0 || !ct[strlen(mp)]) return 0;
    for (const char *c = ct + strlen(mp); *c; c++)
      if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') || *c == '-')) return 0;
  }
  const char *u = r->url_suffix;
  if (*u && *u != '?') return 0;
  for (; *u; u++)
    if (*u <= ' ' || *u >= 0x7f || *u == '#') return 0;
  return r->payload != NULL;
}

/* Send the oldest waiting window if it is due. 1 sent or tried, 0 nothing due. */
static int send_due(bf_push_rec *p, bf_store *s, int finishing) {
  bf_spool_row r;
  if (bf_spool_first(s, p->d.shown, p->sid, 0, 1, &r) != 1) return 0;
  int64_t now = bf_wall_ns();
  if (r.next_try_ns > now) {
    bf_spool_row_clear(&r);
    return 0;
  }
  if (!row_ok(&r)) {
    bf_cli_warn("record --push: window %" PRId64 " in the spool is not as bifocal wrote it: not sent", r.seq);
    bf_spool_failed(s, r.id, 0, 1, 0);
    bf_spool_row_clear(&r);
    return 1;
  }
  dest dw = p->d;
  dw.retries = 0;
  if (finishing) {
    int64_t left = (atomic_load(&p->deadline_mono_ns) - bf_mono_ns()) / 1000000;
    if (left < dw.rq.timeout_ms) dw.rq.timeout_ms = left > 200 ? (long)left : 200;
  }
  bf_push_payload pl = {.body = (char *)r.payload, .len = r.payload_len};
  snprintf(pl.url, sizeof pl.url, "%s%s", p->d.url, r.url_suffix);
  snprintf(pl.ctype, sizeof pl.ctype, "%s", r.content_type);
  bf_push_outcome o = {0};
  bf_push_send(&dw, &pl, &o);
  now = bf_wall_ns(); /* backoff and Retry-After count from the answer */
  if (o.ok) {
    /* a delivered window not marked would go again: outlast the recorder's commits */
    for (int i = 0; i < 10 && bf_spool_sent(s, r.id, o.status); i++) nap_ms(200);
    if (p->down) bf_cli_warn("record --push: %s takes windows again (from window %" PRId64 ")", p->d.shown, r.seq);
    p->down = 0;
  } else if (o.retryable) {
    long wait = BACKOFF_MAX_MS;
    if (r.attempts < 5) wait = 1000L << r.attempts;
    if (o.retry_after_ms >= 0) wait = o.retry_after_ms < RETRY_AFTER_CAP_MS ? o.retry_after_ms : RETRY_AFTER_CAP_MS;
    bf_spool_failed(s, r.id, o.status, 0, now + (int64_t)wait * 1000000);
    if (!p->down)
      bf_cli_warn("record --push: window %" PRId64 " waits in the spool: %s; retrying with backoff", r.seq, o.error.msg);
    p->down = 1;
  } else {
    bf_spool_failed(s, r.id, o.status, 1, 0);
    bf_cli_warn("record --push: window %" PRId64 " refused: %s; it stays in the spool (push --resume sends it again)",
                r.seq, o.error.msg);
  }
  bf_spool_row_clear(&r);
  return 1;
}

/* One round: spool every closed window, then send one. 1 when the session
 * has ended and its last window is spooled. */
static int round_once(bf_push_rec *p, bf_store *s, int finishing, int *sent) {
  bf_session_info *in = NULL;
  *sent = 0;
  if (bf_store_session_get(s, p->sid, &in)) return 0;
  int done = finishing || (in->status && strcmp(in->status, "incomplete") != 0);
  int64_t w = p->cfg.every_ns, all = 0;
  for (;;) {
    int64_t end = (p->next_seq + 1) * w;
    if (done && p->next_seq > 0 && p->next_seq * w >= in->duration_ns) {
      all = 1;
      break;
    }
    int last = done && end >= in->duration_ns;
    if (!done && !window_closed(s, p->sid, in->start_ns, end)) break;
    if (spool_window(p, s, in, p->next_seq, last)) break;
    p->next_seq++;
    if (last) {
      all = 1;
      break;
    }
  }
  bf_session_info_free(in);
  *sent = send_due(p, s, finishing);
  return all;
}

/* The pusher process's loop, until the capture ended and what it could send
 * in the time left is sent. */
static void pusher(bf_push_rec *p) {
  bf_store *s = NULL;
  bf_err msg = BF_ERR_INIT;
  if (bf_store_open(p->db_path, 0, &s, &msg)) {
    bf_cli_error("record --push: cannot open '%s' for the spool: %s (the samples are recorded; push them later)",
                 p->db_path, bf_err_msg(&msg, "?"));
    return;
  }
  bf_store_set_busy_timeout(s, 2000);
  while (p->sid <= 0 && !atomic_load(&p->finishing)) nap_ms(50);
  while (p->sid > 0) {
    int fin = atomic_load(&p->finishing), sent;
    int all = round_once(p, s, fin, &sent);
    if (fin && bf_mono_ns() >= atomic_load(&p->deadline_mono_ns)) break;
    if (fin && all) { /* done when nothing waits, or the next try comes after the bound */
      bf_spool_row r;
      if (bf_spool_first(s, p->d.shown, p->sid, 0, 0, &r) != 1) break;
      int64_t left = atomic_load(&p->deadline_mono_ns) - bf_mono_ns();
      if (r.next_try_ns - bf_wall_ns() > left) break;
    }
    if (!sent) nap_ms(100);
  }
  bf_store_close(s);
}

static void free_rec(bf_push_rec *p) {
  bf_fleet_dest_free(&p->d);
  munmap(p, sizeof *p);
}

/* The child: gone with its parent, deaf to the stop signals (the parent
 * says when to finish), nice +10. */
static void child_main(bf_push_rec *p, pid_t parent) {
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != parent) _exit(0);
  sigset_t stops;
  sigemptyset(&stops);
  int sigs[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGTSTP};
  for (size_t i = 0; i < sizeof sigs / sizeof *sigs; i++) sigaddset(&stops, sigs[i]);
  sigprocmask(SIG_BLOCK, &stops, NULL);
  signal(SIGPIPE, SIG_IGN);
  setpriority(PRIO_PROCESS, 0, getpriority(PRIO_PROCESS, 0) + 10);
  pusher(p);
  fflush(stderr);
  _exit(0);
}

int bf_push_rec_start(const bf_push_cfg *cfg, const char *db_path, struct bf_smp_record_opts *o, bf_push_rec **out) {
  *out = NULL;
  const char *auth = cfg->to ? strstr(cfg->to, "://") : NULL;
  if (auth && memchr(auth + 3, '@', strcspn(auth + 3, "/?#"))) {
    bf_cli_error("record --push: the URL holds user information, which the audit log would keep: put credentials in "
                 "the environment or --push-headers FILE (see `bifocal help push`)");
    return 2;
  }
  /* shared with the pusher process: the session id, the end, its counts */
  bf_push_rec *p = mmap(NULL, sizeof *p, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    bf_cli_error("out of memory");
    return 1;
  }
  memset(p, 0, sizeof *p);
  bf_fleet_dest_init(&p->d);
  p->cfg = *cfg;
  p->unsaid_last = -1;
  if (!p->cfg.every_ns) p->cfg.every_ns = 10000000000LL;
  snprintf(p->db_path, sizeof p->db_path, "%s", db_path);
  if (cfg->timeout_ms > 0) p->d.rq.timeout_ms = cfg->timeout_ms;
  int rc = bf_fleet_push_dest(&p->d, cfg->to, cfg->hfile);
  if (rc) {
    free_rec(p);
    return rc;
  }
  o->session_started = &p->sid;
  fflush(NULL);
  pid_t parent = getpid(), c = fork();
  if (c < 0) {
    bf_cli_error("record --push: cannot start the pusher process: %s", strerror(errno));
    free_rec(p);
    return 1;
  }
  if (c == 0) child_main(p, parent);
  p->child = c;
  *out = p;
  return 0;
}

/* extra.push of the session and the closing line. */
static int summarise(bf_push_rec *p, bf_store *st, int64_t sid) {
  bf_spool_counts c;
  if (bf_spool_counts_get(st, sid, p->d.shown, &c)) {
    bf_cli_warn("record --push: %s", bf_store_errmsg(st));
    return 1;
  }
  bf_jw w;
  if (bf_jw_mem(&w)) return 1;
  bf_jw_obj(&w);
  bf_jw_kstr(&w, "to", p->d.shown);
  bf_jw_key(&w, "every_s");
  bf_jw_numf(&w, "%.3f", (double)p->cfg.every_ns / 1e9);
  bf_jw_kint(&w, "windows", c.windows);
  bf_jw_kint(&w, "sent", c.sent);
  bf_jw_kint(&w, "waiting", c.pending);
  bf_jw_kint(&w, "refused", c.refused);
  bf_jw_kint(&w, "dropped", c.dropped);
  bf_jw_kint(&w, "waiting_bytes", c.waiting_bytes);
  bf_jw_kint(&w, "spool_max_bytes", p->cfg.spool_max_bytes);
  bf_jw_end(&w);
  char *js = bf_jw_mem_done(&w);
  if (!js) return 1;
  if (p->unsaid > 0) { /* drops since the last line: the audit hears of them too */
    char what[1024];
    snprintf(what, sizeof what, "the push spool for %s passed its bound (%" PRId64 " bytes): %" PRId64
             " window(s) of session %" PRId64 " dropped in all; their samples stay in the session",
             p->d.shown, p->cfg.spool_max_bytes, p->dropped, sid);
    audit_drop(st, sid, what);
  }
  int rc = bf_spool_note_session(st, sid, js);
  free(js);
  if (rc) bf_cli_warn("record --push: %s", bf_store_errmsg(st));
  fprintf(stderr,
          "record --push: session %" PRId64 ": %" PRId64 " window(s) for %s, %" PRId64 " sent, %" PRId64
          " waiting in the spool (%" PRId64 " bytes), %" PRId64 " dropped\n",
          sid, c.windows, p->d.shown, c.sent, c.pending + c.refused, c.waiting_bytes, c.dropped);
  if (c.pending + c.refused)
    fprintf(stderr, "record --push: send the rest with: bifocal push --resume %" PRId64 " --to URL\n", sid);
  return rc ? 1 : 0;
}

int bf_push_rec_end(bf_push_rec *p, bf_store *st, int64_t sid) {
  if (!p) return 0;
  if (!p->sid && sid > 0) p->sid = sid;
  atomic_store(&p->deadline_mono_ns, bf_mono_ns() + (int64_t)p->cfg.wait_ms * 1000000);
  atomic_store(&p->finishing, 1);
  /* it ends by itself within the wait and one request; past that (plus
   * slack) it is stopped: the spool keeps what it had */
  int64_t hard = bf_mono_ns() + ((int64_t)p->cfg.wait_ms + p->d.rq.timeout_ms + 5000) * 1000000;
  int st_w;
  while (waitpid(p->child, &st_w, WNOHANG) == 0) {
    if (bf_mono_ns() > hard) {
      kill(p->child, SIGKILL);
      waitpid(p->child, &st_w, 0);
      bf_cli_warn("record --push: the pusher did not end in time and was stopped; what it had not sent stays spooled");
      break;
    }
    nap_ms(20);
  }
  int rc = sid > 0 ? summarise(p, st, sid) : 0;
  free_rec(p);
  return rc;
}

/* ---- push --resume ------------------------------------------------------------ */

static int resume_session(const dest *d, bf_store *s, int64_t sid, int *any) {
  for (;;) {
    bf_spool_row r;
    int f = bf_spool_first(s, d->shown, sid, 1, 1, &r);
    if (f < 0) {
      bf_cli_error("%s", bf_store_errmsg(s));
      return 1;
    }
    if (f == 0) return 0;
    *any = 1;
    if (!row_ok(&r)) {
      bf_cli_error("session %" PRId64 " window %" PRId64 ": the spooled request is not as bifocal writes it (its "
                   "content type or URL was changed): not sent; push --since/--until sends that slice afresh",
                   r.session_id, r.seq);
      bf_spool_row_clear(&r);
      return 1;
    }
    bf_push_payload pl = {.body = (char *)r.payload, .len = r.payload_len};
    snprintf(pl.url, sizeof pl.url, "%s%s", d->url, r.url_suffix);
    snprintf(pl.ctype, sizeof pl.ctype, "%s", r.content_type);
    bf_push_outcome o = {0};
    bf_push_send(d, &pl, &o);
    int rc = o.ok ? bf_spool_sent(s, r.id, o.status) : bf_spool_failed(s, r.id, o.status, !o.retryable, 0);
    if (o.ok)
      printf("session %" PRId64 " window %" PRId64 " (%.3f-%.3f s) pushed to %s (HTTP %ld, %zu bytes)\n",
             r.session_id, r.seq, (double)r.window_start_ns / 1e9, (double)r.window_end_ns / 1e9, d->shown, o.status,
             o.bytes);
    else
      bf_cli_error("session %" PRId64 " window %" PRId64 " not pushed: %s (it stays in the spool)", r.session_id, r.seq,
                   o.error.msg);
    fflush(stdout);
    bf_spool_row_clear(&r);
    if (rc) bf_cli_error("%s", bf_store_errmsg(s));
    if (rc || !o.ok) return 1;
  }
}

int bf_push_resume(bf_cli *cli, const dest *d, bf_store *s, char **ids, int nids) {
  int rc = 0, any = 0;
  if (nids == 0) {
    rc = resume_session(d, s, 0, &any);
  } else {
    for (int i = 0; i < nids; i++) {
      int64_t id;
      int r = bf_cli_session_arg(cli, s, ids[i], &id);
      if (!r) r = resume_session(d, s, id, &any);
      if (r > rc) rc = r;
    }
  }
  if (!rc && !any) fprintf(stderr, "push --resume: nothing waits in the spool for %s\n", d->shown);
  return rc;
}
