/* native.c — mixed Python + C stacks. Per sample: interrupt the chosen
 * threads (PTRACE_SEIZE once, PTRACE_INTERRUPT per sample), copy each one's
 * registers and live stack, walk the Python frames while they are all
 * stopped (one consistent moment), resume them, and only then unwind the
 * copies with libunwind's remote interface: the ptrace accessors locate the
 * unwind tables, memory reads are served from the copy (or read live for
 * what lies outside it). Eval-loop C frames are replaced by the Python frames
 * they run, other C frames are symbolised once per address.
 */
#include "jsonw.h"
#include "native_int.h"

static int prime(bf_smp_native *n);

int nat_seterr(bf_smp_native *n, int rc, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(n->err, sizeof n->err, fmt, ap);
  va_end(ap);
  return rc;
}


const char *bf_smp_native_errmsg(const bf_smp_native *n) { return n ? n->err : "out of memory"; }

/* ---- handle ------------------------------------------------------------------ */

int bf_smp_native_new(bf_smp *h, const char *threads, bf_smp_native **out) {
#if !defined(__x86_64__)
  (void)h, (void)threads, (void)out;
  return smp_seterr(h, -ENOTSUP, "native stacks are only supported on x86-64");
#else
  bf_smp_native *n = calloc(1, sizeof *n);
  if (!n) {
    return smp_seterr(h, -ENOMEM, "out of memory");
  }
  n->h = h;
  n->pid = bf_smp_pid(h);
  int rc = nat_parse_filter(n, threads);
  if (rc < 0) {
    if (rc == -ENOMEM)
      smp_seterr(h, rc, "out of memory");
    else /* repl/cli_hints.c names the option */
      smp_seterr(h, rc, "native thread filter '%s' is not a comma list of thread ids or name globs",
               threads ? threads : "");
    bf_smp_native_free(n);
    return rc;
  }
  unw_accessors_t acc;
  nat_accessors(&acc);
  n->as = unw_create_addr_space(&acc, 0);
  n->upt_pid = n->as ? _UPT_create(n->pid) : NULL;
  if (!n->as || !n->upt_pid) {
    smp_seterr(h, -ENOTSUP, "libunwind: cannot create a remote address space");
    bf_smp_native_free(n);
    return -ENOTSUP;
  }
  unw_set_caching_policy(n->as, UNW_CACHE_GLOBAL);
  n->stop_wait_ns = NAT_STOP_WAIT_NS;
  /* stops are awaited with sigtimedwait: SIGCHLD must stay pending */
  sigset_t chld;
  sigemptyset(&chld);
  sigaddset(&chld, SIGCHLD);
  pthread_sigmask(SIG_BLOCK, &chld, &n->old_mask);
  n->mask_set = 1;
  unw_set_cache_size(n->as, 4096, 0);
  n->samples = 1;
  n->pages = calloc(NAT_PAGES, sizeof *n->pages); /* optional: NULL reads live */
  nat_read_root(n);
  rc = nat_maps_refresh(n);
  if (rc < 0) {
    smp_seterr(h, rc, "cannot read /proc/%d/maps: %s", n->pid, strerror(-rc));
    bf_smp_native_free(n);
    return rc;
  }
  /* the interpreter's own object: libpython if mapped, else the executable */
  for (size_t i = 0; i < n->nmaps && !n->interp_path; i++) {
    const char *p = n->maps[i].path;
    const char *b = p ? strrchr(p, '/') : NULL;
    if (b && strncmp(b + 1, "libpython3.", 11) == 0) n->interp_path = p;
  }
  if (!n->interp_path) {
    char link[64], exe[512];
    snprintf(link, sizeof link, "/proc/%d/exe", n->pid);
    ssize_t k = readlink(link, exe, sizeof exe - 1);
    if (k > 0) {
      exe[k] = 0;
      char *d = strstr(exe, " (deleted)");
      if (d) *d = 0;
      n->interp_path = nat_intern_path(n, nat_target_path(n, exe));
    }
  }
  rc = prime(n);
  if (rc < 0) {
    smp_seterr(h, rc, "%s", n->err);
    bf_smp_native_free(n);
    return rc;
  }
  snprintf(n->err, sizeof n->err, "ok");
  *out = n;
  return 0;
#endif
}

void bf_smp_native_free(bf_smp_native *n) {
  if (!n) return;
  /* release every thread: a running tracee must be stopped to detach */
  for (size_t i = 0; i < n->nth; i++) {
    nat_thread *t = &n->th[i];
    if (t->state == NT_RUNNING) {
      if (ptrace(PTRACE_INTERRUPT, t->tid, 0, 0) == 0)
        t->state = NT_PENDING;
      else
        t->state = NT_GONE;
    }
  }
  int64_t give_up = bf_mono_ns() + NAT_DETACH_WAIT_NS;
  for (;;) {
    int pending = 0;
    for (size_t i = 0; i < n->nth; i++) {
      nat_thread *t = &n->th[i];
      if (t->state == NT_STOPPED) {
        ptrace(PTRACE_DETACH, t->tid, 0, 0);
        t->state = NT_GONE;
        continue;
      }
      if (t->state != NT_PENDING) continue;
      int st;
      pid_t r = waitpid(t->tid, &st, WNOHANG | __WALL);
      if (r < 0 && errno == EINTR) {
        pending++;
        continue;
      }
      if (r < 0) {
        t->state = NT_GONE;
        continue;
      }
      if (r == 0) {
        pending++;
        continue;
      }
      if (WIFSTOPPED(st)) {
        int sig = WSTOPSIG(st), ev = (unsigned)st >> 16;
        /* hand a signal caught on the way on; a job-control stop stays */
        ptrace(PTRACE_DETACH, t->tid, 0, (void *)(intptr_t)(ev == 0 ? sig : 0));
      } else if (t->tid == n->pid) {
        n->leader_exited = 1;
        n->leader_status = st;
      }
      t->state = NT_GONE;
    }
    /* past the bound, the kernel's detach at our exit releases the rest */
    if (!pending || bf_mono_ns() > give_up) break;
    struct timespec ts = {0, 1000000};
    nanosleep(&ts, NULL);
  }
  for (size_t i = 0; i < n->nth; i++) {
    if (n->th[i].upt) _UPT_destroy(n->th[i].upt);
    if (n->th[i].stat_fd >= 0) close(n->th[i].stat_fd);
    free(n->th[i].stack);
  }
  free(n->th);
  if (n->upt_pid) _UPT_destroy(n->upt_pid);
  if (n->as) unw_destroy_addr_space(n->as);
  for (size_t i = 0; i < n->ncodes; i++) {
    free((char *)n->codes[i]->pub.qualname);
    free(n->codes[i]);
  }
  free(n->codes);
  bf_map3_free(&n->code_map);
  bf_pmap_free(&n->ips);
  nat_objs_free(n);
  for (size_t i = 0; i < n->npaths; i++) free(n->paths[i]);
  free(n->paths);
  free(n->maps);
  free(n->want);
  free(n->out);
  free(n->frames);
  free(n->cf);
  free(n->filter);
  free(n->globs);
  free(n->ftids);
  free(n->retired);
  free(n->pages);
  for (size_t i = 0; i < n->nnames; i++) {
    if (n->names[i].stat_fd >= 0) close(n->names[i].stat_fd);
    if (n->names[i].sched_fd >= 0) close(n->names[i].sched_fd);
  }
  free(n->names);
  if (n->mask_set) {
    sigset_t chld;
    sigemptyset(&chld);
    sigaddset(&chld, SIGCHLD);
    struct timespec zero = {0, 0};
    while (sigtimedwait(&chld, NULL, &zero) > 0) {
    }
    pthread_sigmask(SIG_SETMASK, &n->old_mask, NULL);
  }
  free(n);
}

int bf_smp_native_child_exited(bf_smp_native *n, int *status) {
  nat_reap_events(n);
  if (!n->leader_exited) return 0;
  *status = n->leader_status;
  return 1;
}

/* ---- sampling ----------------------------------------------------------------- */







/* Choose the first threads (one walk) and seize them, so that a refusal is
 * reported before the caller writes anything. */
static int prime(bf_smp_native *n) {
  const bf_smp_thread *pt;
  size_t npt;
  int rc = -EIO;
  for (int tries = 0; tries < 20 && rc == -EIO; tries++) rc = bf_smp_sample(n->h, 0, &pt, &npt);
  if (rc < 0) return nat_seterr(n, rc, "%s", bf_smp_errmsg(n->h));
  n->nwant = 0;
  for (size_t i = 0; i < npt; i++) {
    if (pt[i].native_tid <= 0 || !nat_selected(n, &pt[i])) continue;
    if (bf_vec_grow((void **)&n->want, &n->cap_want, n->nwant + 1, sizeof *n->want, 16) < 0)
      return nat_seterr(n, -ENOMEM, "out of memory");
    n->want[n->nwant++] = (int)pt[i].native_tid;
  }
  for (size_t i = 0; i < n->nwant; i++) {
    nat_seize_wanted(n, i, &rc);
    if (rc < 0) return rc;
  }
  return 0;
}

int bf_smp_native_sample(bf_smp_native *n, unsigned want, const bf_smp_thread **threads,
                         size_t *count) {
  const bf_smp_thread *pt;
  size_t npt;
  int rc;
  n->samples++;
  nat_reap_events(n);
  /* which threads to stop: those of the previous sample (new threads are
   * seized when a walk first sees them; prime() chose the first ones) */
  for (size_t i = 0; i < n->nwant; i++) {
    nat_thread *t = nat_seize_wanted(n, i, &rc);
    if (rc < 0) return rc;
    if (!t) continue;
    if (t->state == NT_PENDING) continue; /* still on its way from an earlier sample */
    if (t->state != NT_RUNNING) continue;
    if (want & BF_SMP_WANT_STATE) nat_read_run_state(n, t);
    t->t_interrupt = bf_mono_ns();
    if (ptrace(PTRACE_INTERRUPT, t->tid, 0, 0) < 0) {
      t->state = NT_GONE;
      smp_forget_tid(n->h, t->tid);
      continue;
    }
    t->state = NT_PENDING;
  }
  size_t pending = 0;
  for (size_t i = 0; i < n->nwant; i++) {
    nat_thread *t = nat_thread_find(n, n->want[i]);
    pending += t && t->state == NT_PENDING;
  }
  int intr = nat_collect_stops(n, pending, n->stop_wait_ns) == -EINTR;
  /* threads still not stopped (waiting for a CPU, or in uninterruptible
   * sleep) get no C frames this time; their stop is resumed when it comes */
  /* the Python frames, read while the chosen threads stand still */
  /* (thread state and CPU time come from /proc afterwards, not in here) */
  unsigned walk_want = want & ~(unsigned)(BF_SMP_WANT_STATE | BF_SMP_WANT_CPU_TIME);
  rc = intr ? -EINTR : bf_smp_sample(n->h, walk_want, &pt, &npt);
  for (size_t i = 0; i < n->nth; i++) nat_resume(n, &n->th[i]);
  nat_reap_events(n); /* stops that came in after the deadline: resume them now */
  if (rc < 0) {
    if (rc == -EINTR) return nat_seterr(n, rc, "interrupted while waiting for a thread to stop");
    return nat_seterr(n, rc, "%s", bf_smp_errmsg(n->h));
  }
  /* unwind (threads running again) and merge */
  n->nout = n->nframes = 0;
  n->nwant = 0;
  if (bf_vec_grow((void **)&n->out, &n->cap_out, npt ? npt : 1, sizeof *n->out, 16) < 0) return -ENOMEM;
  for (size_t i = 0; i < npt; i++) {
    bf_smp_thread *o = &n->out[n->nout++];
    *o = pt[i];
    size_t first = n->nframes;
    nat_thread *t = pt[i].native_tid > 0 ? nat_thread_find(n, (int)pt[i].native_tid) : NULL;
    if (pt[i].native_tid > 0 && nat_selected(n, &pt[i])) {
      if (bf_vec_grow((void **)&n->want, &n->cap_want, n->nwant + 1, sizeof *n->want, 16) < 0) return -ENOMEM;
      n->want[n->nwant++] = (int)pt[i].native_tid;
    }
    size_t nc = t && t->snap_ok && t->state != NT_GONE ? nat_unwind(n, t) : 0;
    if (t) {
      t->snap_ok = 0;
      const char *nm = nat_thread_name(n, t->tid); /* fresh: threads rename themselves */
      snprintf(t->name, sizeof t->name, "%s", nm && *nm ? nm : pt[i].name ? pt[i].name : "");
    }
    /* state: as it was before the stop for the threads stopped now */
    nat_tname *ti = (want & (BF_SMP_WANT_STATE | BF_SMP_WANT_CPU_TIME)) && pt[i].native_tid > 0
                        ? nat_tinfo(n, (int)pt[i].native_tid)
                        : NULL;
    char buf[512];
    if (want & BF_SMP_WANT_STATE) {
      if (t && t->state_sample == n->samples && t->run_state)
        o->flags |= t->run_state;
      else if (ti && nat_proc_read(n, ti->tid, &ti->stat_fd, "stat", buf, sizeof buf) > 0)
        o->flags |= nat_stat_state(buf);
    }
    if ((want & BF_SMP_WANT_CPU_TIME) && ti &&
        nat_proc_read(n, ti->tid, &ti->sched_fd, "schedstat", buf, sizeof buf) > 0)
      o->cpu_ns = strtoll(buf, NULL, 10);
    if (nc) {
      rc = nat_merge(n, pt[i].frames, pt[i].nframes, nc);
      if (rc == 0) o->flags |= BF_SMP_NATIVE;
      if (rc > 0) rc = 0;
    } else {
      rc = 0;
      for (size_t j = 0; j < pt[i].nframes && rc == 0; j++)
        rc = nat_push_out_frame(n, pt[i].frames[j].code, pt[i].frames[j].line, pt[i].frames[j].flags);
    }
    if (rc < 0) return nat_seterr(n, rc, "out of memory");
    o->nframes = n->nframes - first;
    o->frames = (const bf_smp_frame *)(uintptr_t)first;
  }
  for (size_t i = 0; i < n->nout; i++) n->out[i].frames = n->frames + (uintptr_t)n->out[i].frames;
  nat_reap_events(n);
  /* forget threads that are gone */
  for (size_t i = 0; i < n->nth; i++)
    if (n->th[i].state == NT_GONE && n->th[i].tid) {
      n->gone++;
      nat_thread_drop(n, &n->th[i]);
    }
  *threads = n->out;
  *count = n->nout;
  return 0;
}

/* ---- statistics ----------------------------------------------------------------- */

static int64_t hist_pct(const uint64_t *hist, double q) {
  uint64_t total = 0, acc = 0;
  for (size_t i = 0; i < NAT_HIST; i++) total += hist[i];
  if (!total) return 0;
  uint64_t rank = (uint64_t)(q * (double)(total - 1)) + 1;
  for (size_t i = 0; i < NAT_HIST; i++) {
    acc += hist[i];
    if (acc >= rank) {
      if (i < 16) return (int64_t)i;
      size_t e = (i - 16) / 16 + 4, sub = (i - 16) % 16;
      uint64_t lo = (uint64_t)(16 + sub) << (e - 4), w = 1ull << (e - 4);
      return (int64_t)(lo + w / 2);
    }
  }
  return 0;
}

void bf_smp_native_stats_write(const bf_smp_native *n, bf_jw *w) {
  bf_jw_key(w, "native");
  bf_jw_obj(w);
  bf_jw_kint(w, "stops", (long long)n->stops);
  bf_jw_kint(w, "stopped_ns", (long long)n->stopped_ns);
  bf_jw_kint(w, "stop_p50_ns", (long long)hist_pct(n->hist, 0.5));
  bf_jw_kint(w, "stop_p90_ns", (long long)hist_pct(n->hist, 0.9));
  bf_jw_kint(w, "stop_p99_ns", (long long)hist_pct(n->hist, 0.99));
  bf_jw_kint(w, "stop_max_ns", (long long)n->max_ns);
  bf_jw_kint(w, "signals_reinjected", (long long)n->reinjected);
  bf_jw_kint(w, "unwind_failed", (long long)n->unwind_failed);
  bf_jw_kint(w, "unwind_truncated", (long long)n->truncated);
  bf_jw_kint(w, "merge_mismatch", (long long)n->mismatch);
  bf_jw_kint(w, "merge_realigned", (long long)n->realigned);
  bf_jw_kint(w, "threads_gone", (long long)n->gone);
  bf_jw_kint(w, "late_stops", (long long)n->late);
  bf_jw_kint(w, "stop_wait_ns", (long long)n->stop_wait_ns);
  bf_jw_kint(w, "interrupt_p50_ns", (long long)hist_pct(n->hist_lat, 0.5));
  bf_jw_kint(w, "interrupt_p99_ns", (long long)hist_pct(n->hist_lat, 0.99));
  bf_jw_key(w, "threads");
  bf_jw_arr(w);
  size_t listed = 0;
  int64_t omitted = n->omitted;
  for (size_t i = 0; i < n->nretired + n->nth; i++) {
    nat_tstat ts;
    if (i < n->nretired) {
      ts = n->retired[i];
    } else {
      const nat_thread *t = &n->th[i - n->nretired];
      if (!t->tid || !t->stops) continue;
      ts.tid = t->tid;
      memcpy(ts.name, t->name, sizeof ts.name);
      ts.stops = t->stops;
      ts.stopped_ns = t->stopped_ns;
      ts.max_ns = t->max_ns;
    }
    if (listed == NAT_MAX_TSTATS) {
      omitted++;
      continue;
    }
    bf_jw_obj(w);
    bf_jw_kint(w, "tid", ts.tid);
    bf_jw_kstr(w, "name", ts.name);
    bf_jw_kint(w, "stops", (long long)ts.stops);
    bf_jw_kint(w, "stopped_ns", (long long)ts.stopped_ns);
    bf_jw_kint(w, "max_ns", (long long)ts.max_ns);
    bf_jw_end(w);
    listed++;
  }
  bf_jw_end(w);
  bf_jw_kint(w, "threads_omitted", (long long)omitted);
  bf_jw_end(w);
}

/* extra.native.<key> as an integer (bf_smp_native_stats_json wrote it). */
static int json_num(const char *js, const char *key, long long *v) {
  char path[64];
  double d;
  snprintf(path, sizeof path, "native.%s", key);
  if (bf_json_find_num(js, path, &d)) return -ENOENT;
  *v = (long long)d;
  return 0;
}

static void fmt_ns(char *b, size_t len, long long ns) {
  if (ns < 1000000)
    snprintf(b, len, "%.0f us", (double)ns / 1e3);
  else if (ns < 1000000000LL)
    snprintf(b, len, "%.1f ms", (double)ns / 1e6);
  else
    snprintf(b, len, "%.2f s", (double)ns / 1e9);
}

int bf_smp_native_summary(const char *extra_json, char *buf, size_t len) {
  long long stops, total, p50, p99, mx;
  if (!extra_json ||
      json_num(extra_json, "stops", &stops) < 0 || json_num(extra_json, "stopped_ns", &total) < 0 ||
      json_num(extra_json, "stop_p50_ns", &p50) < 0 ||
      json_num(extra_json, "stop_p99_ns", &p99) < 0 || json_num(extra_json, "stop_max_ns", &mx) < 0 ||
      stops <= 0)
    return -ENOENT;
  char a[32], b[32], c[32], d[32];
  fmt_ns(a, sizeof a, p50);
  fmt_ns(b, sizeof b, p99);
  fmt_ns(c, sizeof c, mx);
  fmt_ns(d, sizeof d, total);
  snprintf(buf, len, "threads stopped %lld times: median %s, p99 %s, max %s per stop; %s in all",
           stops, a, b, c, d);
  return 0;
}
