/* cmd_audit.c — `bifocal audit [--json]`: the audit trail, oldest first. */
#include <stdio.h>

#include "cli.h"
#include "jsonw.h"
#include "util.h"

/* One entry as an object of the array open on ud (a bf_jw). */
static int print_json(void *ud, const bf_audit_entry *e) {
  bf_jw *w = ud;
  char t[32];
  bf_fmt_time(e->time_ns, t, sizeof t);
  bf_jw_obj(w);
  bf_jw_kint(w, "id", e->id);
  bf_jw_kint(w, "time_ns", e->time_ns);
  bf_jw_kstr(w, "time", t);
  bf_jw_kstr(w, "user", e->user);
  bf_jw_kint(w, "uid", e->uid);
  bf_jw_kint(w, "target_pid", e->target_pid);
  bf_jw_kint(w, "target_uid", e->target_uid);
  bf_jw_kstr(w, "command", e->command);
  bf_jw_kstr(w, "argv", e->argv);
  bf_jw_kstr(w, "outcome", e->outcome);
  bf_jw_kint(w, "session_id", e->session_id);
  bf_jw_end(w);
  return 0;
}

/* One line per field in the table: control characters (a newline inside a
 * `-c` script) are shown as '?'. */
static void put_flat(const char *s) {
  for (; s && *s; s++) putchar((unsigned char)*s < 0x20 ? '?' : *s);
}

static int print_row(void *ud, const bf_audit_entry *e) {
  (void)ud;
  char t[32], target[48], sess[24];
  bf_fmt_time(e->time_ns, t, sizeof t);
  if (e->target_pid > 0)
    snprintf(target, sizeof target, "%lld(uid %lld)", (long long)e->target_pid, (long long)e->target_uid);
  else
    snprintf(target, sizeof target, "-");
  if (e->session_id > 0)
    snprintf(sess, sizeof sess, "%lld", (long long)e->session_id);
  else
    snprintf(sess, sizeof sess, "-");
  printf("%-5lld %-19s  %-16s %-6lld %-8s %-18s %-7s ", (long long)e->id, t, e->user ? e->user : "?",
         (long long)e->uid, e->command ? e->command : "?", target, sess);
  put_flat(e->outcome ? e->outcome : "?");
  fputs("\n      ", stdout);
  put_flat(e->argv);
  putchar('\n');
  return 0;
}

int bf_cmd_audit(bf_cli *cli, int argc, char **argv) {
  int json;
  int orc = bf_cli_json_only("audit", argc, argv, &json);
  if (orc >= 0) return orc;
  bf_store *s;
  int rc = bf_cli_open_store(cli, BF_STORE_READONLY, &s);
  if (rc) return rc;
  bf_jw w;
  bf_jw_init(&w, stdout);
  if (json) bf_jw_arr(&w);
  else
    printf("%-5s %-19s  %-16s %-6s %-8s %-18s %-7s %s\n", "ID", "TIME (UTC)", "USER", "UID", "COMMAND",
           "TARGET", "SESSION", "OUTCOME");
  if (bf_store_audit_foreach(s, json ? print_json : print_row, &w) < 0) {
    if (json) {
      bf_jw_end(&w);
      fputc('\n', stdout);
    }
    bf_cli_error("%s", bf_store_errmsg(s));
    bf_store_close(s);
    return 1;
  }
  if (json) {
    bf_jw_end(&w);
    fputc('\n', stdout);
  }
  bf_store_close(s);
  return 0;
}
