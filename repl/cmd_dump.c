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
#include "cli.h"
#include "native.h"
#include "sampler.h"
#include "text.h"

int bf_smp_cli_pid(const char *arg, int *pid); /* cmd_top.c */

int bf_smp_cli_pid(const char *arg, int *pid) {
  char *end;
  errno = 0;
  long v = arg ? strtol(arg, &end, 10) : 0;
  if (!arg || errno || *end || v <= 0 || v > 4194304) {
    bf_cli_error("'%s' is not a process id (expected a positive integer)", arg ? arg : "");
    return 2;
  }
  *pid = (int)v;
  return 0;
}

static void status_words(uint32_t f, char *buf, size_t len) {
  snprintf(buf, len, "%s%s%s%s", (f & BF_SMP_GIL) ? "holds GIL, " : "",
           (f & BF_SMP_ON_CPU) ? "on CPU" : (f & BF_SMP_IDLE) ? "idle" : "unknown",
           (f & BF_SMP_GC) ? ", GC running" : "", "");
}

int bf_cmd_dump(bf_cli *cli, int argc, char **argv) {
  static const struct option opts[] = {{"help", no_argument, NULL, 'h'},
                                       {"native", no_argument, NULL, 'n'},
                                       {"native-threads", required_argument, NULL, 'N'},
                                       {NULL, 0, NULL, 0}};
  int c, native = 0;
  const char *native_threads = NULL;
  while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
    if (c == 'n') {
      native = 1;
      continue;
    }
    if (c == 'N') { /* implies --native */
      if (optarg[strspn(optarg, ", ")] == 0) {
        bf_cli_error("bad --native-threads '%s' (a comma list of thread ids or name globs)", optarg);
        return 2;
      }
      native = 1;
      native_threads = optarg;
      continue;
    }
    if (c == 'h') {
      printf("usage: bifocal dump [--native] [--native-threads N|GLOB,...] PID\n");
      return 0;
    }
    return 2;
  }
  if (optind + 1 != argc) {
    bf_cli_error("dump needs exactly one PID (usage: bifocal dump PID)");
    return 2;
  }
  int pid;
  int rc = bf_smp_cli_pid(argv[optind], &pid);
  if (rc) return rc;
  bf_audit *au = NULL; /* audited before the target is touched */
  if ((rc = bf_audit_begin(cli, NULL, "dump", pid, &au))) return rc;
  bf_smp *h = bf_smp_new();
  if (!h) {
    bf_cli_error("out of memory");
    bf_audit_end(au, "out of memory", 0);
    return 1;
  }
  rc = bf_smp_attach(h, pid);
  if (rc < 0) {
    bf_cli_error("%s", bf_smp_errmsg(h));
    bf_audit_end(au, bf_smp_errmsg(h), 0);
    bf_smp_free(h);
    return 1;
  }
  const bf_smp_thread *t = NULL;
  size_t n = 0;
  bf_smp_native *nat = NULL; /* --native: merged C + Python stacks */
  if (native) {
    char msg[256];
    rc = bf_smp_native_new(h, native_threads, &nat, msg, sizeof msg);
    if (rc < 0) {
      bf_cli_error("%s", msg);
      bf_audit_end(au, msg, 0);
      bf_smp_free(h);
      return rc == -EINVAL ? 2 : 1;
    }
    bf_smp_native_set_stop_wait(nat, 1000000000LL); /* one sample: wait for every thread */
  }
  /* a torn read costs a retry, not the dump: each sample is already re-read
   * until consistent (a few reads); past DUMP_TRIES of those, say so */
  enum { DUMP_TRIES = 20 };
  for (int tries = 0; tries < DUMP_TRIES; tries++) {
    rc = nat ? bf_smp_native_sample(nat, BF_SMP_WANT_STATE, &t, &n)
             : bf_smp_sample(h, BF_SMP_WANT_STATE, &t, &n);
    if (rc != -EIO) break;
  }
  char torn_msg[256];
  if (rc == -EIO && !nat)
    snprintf(torn_msg, sizeof torn_msg,
             "could not read a consistent stack of process %d: it kept changing while being "
             "read (%d tries); run dump again, or dump --native, which stops the target",
             pid, DUMP_TRIES);
  const char *fail = rc == -EIO && !nat ? torn_msg
                     : nat              ? bf_smp_native_errmsg(nat)
                                        : bf_smp_errmsg(h);
  bf_audit_end(au, rc < 0 ? fail : NULL, 0);
  if (rc < 0) {
    bf_cli_error("%s", fail);
    bf_smp_native_free(nat);
    bf_smp_free(h);
    return 1;
  }
  printf("Process %d: Python %s (%s), %zu thread%s\n", pid, bf_smp_python_version(h),
         bf_smp_python_build(h), n, n == 1 ? "" : "s");
  for (size_t i = 0; i < n; i++) {
    char st[64];
    status_words(t[i].flags, st, sizeof st);
    /* the Python name (threading) first; the OS name too when it differs */
    const char *pyn = t[i].py_name, *os = t[i].name;
    char osn[64] = "";
    char b1[128], b2[128], b3[512], b4[512]; /* names from the target: shown inert */
    if (pyn && os && strcmp(pyn, os) != 0) snprintf(osn, sizeof osn, "OS name \"%s\"; ", bf_inert(os, b1, sizeof b1));
    printf("\nThread %lld \"%s\" (%sident 0x%llx; %s)\n", (long long)t[i].native_tid,
           bf_inert(pyn ? pyn : os ? os : "?", b2, sizeof b2), osn, (unsigned long long)t[i].thread_id, st);
    if (!t[i].nframes) printf("  (no Python frames)\n");
    for (size_t k = t[i].nframes; k-- > 0;) {
      const bf_smp_frame *f = &t[i].frames[k];
      if (f->flags & BF_SMP_FRAME_NATIVE) {
        const char *lib = strrchr(f->code->filename, '/');
        printf("  (native) %s in %s\n", bf_inert(f->code->qualname, b3, sizeof b3),
               bf_inert(lib ? lib + 1 : f->code->filename, b4, sizeof b4));
        continue;
      }
      printf("  File \"%s\", line %d, in %s\n", bf_inert(f->code->filename, b4, sizeof b4), (int)f->line,
             bf_inert(f->code->qualname, b3, sizeof b3));
    }
  }
  bf_smp_native_free(nat); /* threads were resumed already; this detaches */
  bf_smp_free(h);
  return 0;
}
