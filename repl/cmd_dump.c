/* cmd_dump.c — `bifocal dump PID`: every thread's current Python stack once,
 * printed like a traceback (outermost call first), with thread id, name and
 * status. Needs no database.
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "audit.h"
#include "jsonw.h"
#include "cli.h"
#include "opts.h"
#include "native.h"
#include "locals.h"
#include "inspect.h"
#include "sampler.h"
#include "text.h"

/* "holds GIL, on CPU", "idle: recvfrom tcp 127.0.0.1:5432 (network)" (the
 * wait from the kernel lens; its text names the target's sockets and files:
 * shown inert) */
static void status_words(const bf_smp_thread *t, char *buf, size_t len) {
  uint32_t f = t->flags;
  const char *wait = bf_inspect_wait(t);
  char wb[400] = "", ib[320];
  if (wait) snprintf(wb, sizeof wb, ": %s (%s)", bf_inert(wait, ib, sizeof ib), bf_inspect_wait_class(t));
  snprintf(buf, len, "%s%s%s%s", (f & BF_SMP_GIL) ? "holds GIL, " : "",
           (f & BF_SMP_ON_CPU) ? "on CPU" : (f & BF_SMP_IDLE) ? "idle" : "unknown", wb,
           (f & BF_SMP_GC) ? ", GC running" : "");
}

/* What a dump prints, per process. */
/* a torn read costs a retry, not the dump: each sample is already re-read
 * until consistent (a few reads); past DUMP_TRIES of those, say so */
enum { DUMP_TRIES = 20 };

typedef struct dump_out {
  int json;
  int locals; /* --locals */
  char err[512];
  int nproc; /* processes printed so far */
  FILE *f;   /* all of it, printed once complete */
  bf_jw w;   /* the JSON of it (--json) */
} dump_out;

/* --locals of frame f: JSON ("locals": [...]) or text lines under the frame.
 * Returns 0, or -ENOTSUP (this Python; d->err says why). */
static int print_locals(dump_out *d, bf_smp *h, const bf_smp_frame *f) {
  bf_smp_local *v = NULL;
  size_t nv = 0;
  int rc = h ? bf_smp_locals(h, f, &v, &nv) : -EINVAL;
  if (rc == -ENOTSUP) {
    snprintf(d->err, sizeof d->err, "%s", bf_smp_errmsg(h));
    return rc;
  }
  if (d->json) {
    bf_jw *w = &d->w;
    if (rc < 0) {
      bf_jw_key(w, "locals");
      bf_jw_null(w);
      bf_jw_kstr(w, "locals_error", h ? bf_smp_errmsg(h) : "no locals with --native");
      return 0;
    }
    bf_jw_key(w, "locals");
    bf_jw_arr(w);
    for (size_t i = 0; i < nv; i++) {
      bf_jw_obj(w);
      bf_jw_kstr(w, "name", v[i].name);
      bf_jw_kstr(w, "type", v[i].type);
      bf_jw_kstr(w, "repr", v[i].repr);
      bf_jw_end(w);
    }
    bf_jw_end(w);
  } else if (rc < 0) {
    fprintf(d->f, "      (locals not read: %s)\n", h ? bf_smp_errmsg(h) : "not with --native");
  } else {
    for (size_t i = 0; i < nv; i++) { /* names and values come from the target: inert */
      char name[256], type[160], repr[1024];
      if (v[i].repr)
        fprintf(d->f, "      %s = %s\n", bf_inert(v[i].name, name, sizeof name),
                bf_inert(v[i].repr, repr, sizeof repr));
      else
        fprintf(d->f, "      %s: %s (not shown)\n", bf_inert(v[i].name, name, sizeof name),
                bf_inert(v[i].type, type, sizeof type));
    }
  }
  bf_smp_locals_free(v, nv);
  return 0;
}

static int print_process(void *ud, bf_smp *h, int pid, const char *version, const char *build,
                         const bf_smp_thread *t, size_t n) {
  dump_out *d = ud;
  if (d->json) {
    bf_jw *w = &d->w;
    if (d->nproc++) bf_jw_pad(w, "\n");
    bf_jw_obj(w);
    bf_jw_kint(w, "pid", pid);
    bf_jw_kstr(w, "python_version", version);
    bf_jw_kstr(w, "python_build", build);
    bf_jw_key(w, "threads");
    bf_jw_arr(w);
    for (size_t i = 0; i < n; i++) {
      bf_jw_pad(w, "\n ");
      bf_jw_obj(w);
      bf_jw_kint(w, "native_tid", (long long)t[i].native_tid);
      char ident[24]; /* unsigned: all 64 bits */
      snprintf(ident, sizeof ident, "%llu", (unsigned long long)t[i].thread_id);
      bf_jw_key(w, "thread_id");
      bf_jw_raw(w, ident);
      bf_jw_kstr(w, "name", t[i].py_name ? t[i].py_name : t[i].name);
      bf_jw_kstr(w, "os_name", t[i].name);
      bf_jw_kbool(w, "holds_gil", !!(t[i].flags & BF_SMP_GIL));
      bf_jw_kbool(w, "on_cpu", !!(t[i].flags & BF_SMP_ON_CPU));
      bf_jw_kbool(w, "idle", !!(t[i].flags & BF_SMP_IDLE));
      bf_jw_kbool(w, "gc", !!(t[i].flags & BF_SMP_GC));
      bf_jw_key(w, "kernel"); /* the kernel lens: null when not read (--native) */
      if (t[i].kclass) {
        bf_jw_obj(w);
        bf_jw_kstr(w, "class", bf_inspect_wait_class(&t[i]));
        bf_jw_kstr(w, "wait", bf_inspect_wait(&t[i]));
        bf_jw_kint(w, "run_delay_ns", (long long)t[i].run_delay_ns);
        bf_jw_kint(w, "major_faults", (long long)t[i].majflt);
        bf_jw_end(w);
      } else {
        bf_jw_null(w);
      }
      bf_jw_key(w, "frames");
      bf_jw_arr(w);
      /* innermost first, as py-spy's dump --json */
      for (size_t k = 0; k < t[i].nframes; k++) {
        const bf_smp_frame *f = &t[i].frames[k];
        bf_jw_pad(w, "\n  ");
        bf_jw_obj(w);
        bf_jw_kstr(w, "function", f->code->qualname);
        bf_jw_kstr(w, "file", f->code->filename);
        bf_jw_kint(w, "line", (int)f->line);
        bf_jw_kint(w, "firstlineno", (long long)f->code->firstlineno);
        bf_jw_kbool(w, "native", !!(f->flags & BF_SMP_FRAME_NATIVE));
        if (d->locals && !(f->flags & BF_SMP_FRAME_NATIVE) && print_locals(d, h, f) < 0) return -ENOTSUP;
        bf_jw_end(w);
      }
      bf_jw_end(w);
      bf_jw_end(w);
    }
    bf_jw_end(w);
    bf_jw_end(w);
    return 0;
  }
  fprintf(d->f, "%sProcess %d: Python %s (%s), %zu thread%s\n", d->nproc++ ? "\n" : "", pid, version, build, n,
         n == 1 ? "" : "s");
  for (size_t i = 0; i < n; i++) {
    char st[512];
    status_words(&t[i], st, sizeof st);
    /* the Python name (threading) first; the OS name too when it differs */
    const char *pyn = t[i].py_name, *os = t[i].name;
    char osn[64] = "";
    char b1[128], b2[128], b3[512], b4[512]; /* names from the target: shown inert */
    if (pyn && os && strcmp(pyn, os) != 0) snprintf(osn, sizeof osn, "OS name \"%s\"; ", bf_inert(os, b1, sizeof b1));
    fprintf(d->f, "\nThread %lld \"%s\" (%sident 0x%llx; %s)\n", (long long)t[i].native_tid,
            bf_inert(pyn ? pyn : os ? os : "?", b2, sizeof b2), osn, (unsigned long long)t[i].thread_id, st);
    if (!t[i].nframes) fprintf(d->f, "  (no Python frames)\n");
    for (size_t k = t[i].nframes; k-- > 0;) {
      const bf_smp_frame *f = &t[i].frames[k];
      if (f->flags & BF_SMP_FRAME_NATIVE) {
        const char *lib = strrchr(f->code->filename, '/');
        fprintf(d->f, "  (native) %s in %s\n", bf_inert(f->code->qualname, b3, sizeof b3),
                bf_inert(lib ? lib + 1 : f->code->filename, b4, sizeof b4));
        continue;
      }
      fprintf(d->f, "  File \"%s\", line %d, in %s\n", bf_inert(f->code->filename, b4, sizeof b4), (int)f->line,
              bf_inert(f->code->qualname, b3, sizeof b3));
      if (d->locals && print_locals(d, h, f) < 0) return -ENOTSUP;
    }
  }
  return 0;
}

/* Options and their checks; -1 to go on, else the exit status. OUT: *pid, *lo, *d-> */
static int dump_parse(int argc, char **argv, int *pid, bf_inspect_opts *lo, dump_out *d) {
  /* short letters are py-spy's (dump -p PID -j -l -n -s) */
  static const struct option opts[] = {{"help", no_argument, NULL, 'h'},
                                       {"pid", required_argument, NULL, 'p'},
                                       {"json", no_argument, NULL, 'j'},
                                       {"native", no_argument, NULL, 'n'},
                                       {"native-threads", required_argument, NULL, 'N'},
                                       {"subprocesses", no_argument, NULL, 's'},
                                       {"nonblocking", no_argument, NULL, 'B'},
                                       {"locals", no_argument, NULL, 'l'},
                                       {NULL, 0, NULL, 0}};
  int c, nonblocking = 0;
  while ((c = getopt_long(argc, argv, "p:jnslh", opts, NULL)) != -1) {
    switch (c) {
      case 'l': d->locals = 1; break;
      case 'p':
        if (bf_opt_pid(optarg, pid)) return 2;
        break;
      case 'j': d->json = 1; break;
      case 'n': lo->native = 1; break;
      case 'N': /* implies --native */
        if (bf_opt_native_threads(optarg, &lo->native, &lo->native_threads)) return 2;
        break;
      case 's': lo->subprocesses = 1; break;
      case 'B': nonblocking = 1; break;
      case 'h': bf_cli_usage(bf_cli_find("dump"), stdout); return 0;
      default: return 2;
    }
  }
  if (bf_opt_native_blocking(nonblocking, lo->native)) return 2;
  if (d->locals && lo->native) {
    bf_cli_error("--locals and --native do not go together yet: drop one of them");
    return 2;
  }
  int rc;
  if ((rc = bf_opt_pid_once("dump", argc, argv, optind, pid))) return rc;
  return -1;
}

/* One consistent sample of every thread, printed only once complete.
 * Returns -1 when out of memory, else 0 and bf_inspect_sample's result in *rc. */
static int dump_run(bf_inspect *l, const bf_inspect_opts *lo, dump_out *d, int *rc) {
  char *text = NULL;
  size_t text_len = 0;
  d->f = open_memstream(&text, &text_len);
  if (!d->f) return -1;
  bf_jw_init(&d->w, d->f);
  if (d->json && lo->subprocesses) {
    bf_jw_obj(&d->w);
    bf_jw_key(&d->w, "processes");
    bf_jw_arr(&d->w);
  }
  *rc = bf_inspect_sample(l, DUMP_TRIES, print_process, d, NULL);
  if (d->json && lo->subprocesses) {
    bf_jw_end(&d->w);
    bf_jw_end(&d->w);
  }
  if (d->json) fputc('\n', d->f);
  fclose(d->f);
  if (*rc == 0) fwrite(text, 1, text_len, stdout);
  free(text);
  return 0;
}

int bf_cmd_dump(bf_cli *cli, int argc, char **argv) {
  int pid = 0;
  bf_inspect_opts lo = {0};
  dump_out d = {0};
  int rc = dump_parse(argc, argv, &pid, &lo, &d);
  if (rc >= 0) return rc;
  bf_audit *au = NULL; /* audited before the target is touched */
  if ((rc = bf_audit_begin_look(cli, "dump", pid, &au))) return rc;
  lo.native_stop_wait_ns = 1000000000; /* one sample: wait for every thread */
  lo.settled = 1;                      /* and a stack that held still while read */
  bf_inspect *l = NULL;
  if ((rc = bf_inspect_open(pid, &lo, &l))) {
    bf_audit_end(au, "attach failed", 0);
    return rc;
  }
  if (dump_run(l, &lo, &d, &rc) < 0) {
    bf_cli_error("out of memory");
    bf_audit_end(au, "out of memory", 0);
    bf_inspect_free(l);
    return 1;
  }
  char torn_msg[256];
  if (rc == -EIO && !lo.native)
    snprintf(torn_msg, sizeof torn_msg,
             "could not read a consistent stack of process %d: it kept changing while being "
             "read (%d tries); run dump again, or dump --native, which stops the target",
             pid, DUMP_TRIES);
  const char *fail = rc == -ESRCH                    ? "the process exited"
                     : rc == -ENOTSUP && d.err[0] ? d.err
                     : rc == -EIO && !lo.native   ? torn_msg
                                                   : bf_inspect_errmsg(l);
  bf_audit_end(au, rc < 0 ? fail : NULL, 0);
  if (rc < 0) bf_cli_error("%s", fail);
  bf_inspect_free(l); /* threads were resumed already; this detaches */
  return rc < 0 ? 1 : 0;
}
