/* cmd_sessions.c — `bifocal sessions [--json]`. */
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "correlate.h"
#include "session_json.h"
#include "text.h"
#include "util.h"

int bf_cmd_sessions(bf_cli *cli, int argc, char **argv) {
  int json;
  int orc = bf_cli_json_only("sessions", argc, argv, &json);
  if (orc >= 0) return orc;
  bf_store *s;
  int rc = bf_cli_open_store(cli, BF_STORE_READONLY, &s);
  if (rc) return rc;
  bf_session_info **list = NULL;
  size_t n = 0;
  if (bf_store_session_list(s, &list, &n) < 0) {
    bf_cli_error("%s", bf_store_errmsg(s));
    bf_store_close(s);
    return 1;
  }
  if (json) {
    fputc('[', stdout);
    for (size_t i = 0; i < n; i++) {
      if (i) fputc(',', stdout);
      bf_session_json(stdout, list[i]);
    }
    fputs("]\n", stdout);
  } else if (n == 0) {
    printf("no sessions in %s\n", cli->db_path);
  } else {
    const char *dim = cli->color ? "\033[2m" : "", *rst = cli->color ? "\033[0m" : "";
    /* the executable gets a column only when the sessions ran different ones */
    char exe0[1024] = "", exe[1024], ver[64];
    int exe_w = 0;
    for (size_t i = 0; i < n; i++) {
      bf_session_interp(list[i], exe, sizeof exe, ver, sizeof ver);
      if (!exe[0]) continue;
      if (!exe0[0]) snprintf(exe0, sizeof exe0, "%s", exe);
      else if (strcmp(exe0, exe) != 0) exe_w = 1;
    }
    if (exe_w) {
      exe_w = 10;
      for (size_t i = 0; i < n; i++) {
        bf_session_interp(list[i], exe, sizeof exe, ver, sizeof ver);
        int l = (int)strlen(exe);
        if (l > exe_w) exe_w = l > 60 ? 60 : l;
      }
    }
    printf("%s%4s %-8s %-16s %-4s %-6s %8s %9s %7s %-8s ", dim, "ID", "KIND", "CREATED (UTC)", "CLK", "MODE", "RATE",
           "SAMPLES", "DUR", "PYTHON");
    if (exe_w) printf("%-*s ", exe_w, "EXECUTABLE");
    printf("%-13s %s%s\n", "STATUS", "LABEL", rst);
    for (size_t i = 0; i < n; i++) {
      bf_session_info *in = list[i];
      char created[32], rate[16], dur[16];
      bf_fmt_time(in->created_ns, created, sizeof created);
      created[16] = 0; /* minutes */
      if (in->rate_hz > 0)
        snprintf(rate, sizeof rate, "%.0fHz", in->rate_hz);
      else
        snprintf(rate, sizeof rate, "-");
      snprintf(dur, sizeof dur, "%.1fs", (double)in->duration_ns / 1e9);
      /* every text field may come from an imported file: shown inert */
      char k[64], c[64], m[64], py[64], st[64], lb[512], eb[1024];
      printf("%4lld %-8s %-16s %-4s %-6.6s %8s %9lld %7s %-8s ", (long long)in->id, bf_inert(in->kind, k, sizeof k),
             created, in->clock ? bf_inert(in->clock, c, sizeof c) : "-", in->mode ? bf_inert(in->mode, m, sizeof m) : "-",
             rate, (long long)in->samples, dur, in->python_version ? bf_inert(in->python_version, py, sizeof py) : "-");
      if (exe_w) {
        bf_session_interp(in, exe, sizeof exe, ver, sizeof ver);
        const char *e = bf_inert(exe, eb, sizeof eb);
        size_t l = strlen(e);
        if ((int)l > exe_w) /* keep the end of a long path: the file name tells most */
          printf("…%-*s ", exe_w - 1, e + l - (size_t)(exe_w - 1));
        else
          printf("%-*s ", exe_w, e[0] ? e : "-");
      }
      printf("%-13s %s\n", bf_inert(in->status, st, sizeof st), bf_inert(in->label, lb, sizeof lb));
    }
  }
  for (size_t i = 0; i < n; i++) bf_session_info_free(list[i]);
  free(list);
  bf_store_close(s);
  return 0;
}
