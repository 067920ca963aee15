/* repl.c — the interactive `bifocal` (no command): GNU readline with history and
 * completion, every CLI command by name, `use ID`, `lua CODE`, `= EXPR` and
 * multi-line Lua. From a pipe it reads commands silently (no prompt, no banner).
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <lua.h>
#include <readline/history.h>
#include <readline/readline.h>

#include "cli.h"
#include "lua_host.h"
#include "profile.h"
#include "text.h"
#include "vec.h"

/* ---- state shared with readline callbacks (readline has no user pointer) ---- */

static bf_cli *g_cli;
static volatile sig_atomic_t g_in_readline;

typedef struct repl {
  bf_cli *cli;
  int tty;
  lua_State *L; /* created on first Lua use */
  int status;   /* of the last command */
} repl;

static const char *const builtins[] = {"help", "use", "lua", "quit", "exit", NULL};

static const struct {
  const char *name, *usage, *help;
} builtin_help[] = {
    {"help", "help [CMD]", "list commands, or show one command's usage"},
    {"use", "use [ID|LABEL|none]", "set the current session: commands that take one ID then need none;\n"
                                   "  Lua sees it as the global `session`"},
    {"lua", "lua CODE", "run Lua (the `bifocal` module is loaded; unsandboxed: this is your own prompt);\n"
                        "  an unfinished chunk continues on the next lines. `= EXPR` prints values."},
    {"quit", "quit", "leave (also `exit` or Ctrl-D)"},
    {NULL, NULL, NULL},
};

/* ---- tokenising ------------------------------------------------------------ */

/* Split a line like a shell would for plain words: whitespace separates,
 * '...' is literal, "..." allows \" and \\, a backslash outside quotes escapes
 * the next character. OUT: *argv (NULL-terminated, caller frees with
 * free_argv), *argc. Returns 0 or -EINVAL on an unterminated quote. */
static int tokenize(const char *line, int *argc, char ***argv) {
  size_t len = strlen(line);
  char **v = calloc(len / 2 + 2, sizeof *v);
  char *buf = malloc(len + 1);
  if (!v || !buf) {
    free(v);
    free(buf);
    return -ENOMEM;
  }
  int n = 0;
  const char *p = line;
  for (;;) {
    while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r') p++;
    if (!*p) break;
    size_t k = 0;
    while (*p && *p != ' ' && *p != '\t' && *p != '\n' && *p != '\r') {
      if (*p == '\'') {
        p++;
        while (*p && *p != '\'') buf[k++] = *p++;
        if (!*p) goto bad;
        p++;
      } else if (*p == '"') {
        p++;
        while (*p && *p != '"') {
          if (*p == '\\' && (p[1] == '"' || p[1] == '\\')) p++;
          buf[k++] = *p++;
        }
        if (!*p) goto bad;
        p++;
      } else if (*p == '\\' && p[1]) {
        buf[k++] = p[1];
        p += 2;
      } else {
        buf[k++] = *p++;
      }
    }
    v[n] = strndup(buf, k);
    if (!v[n]) goto bad;
    n++;
  }
  free(buf);
  *argc = n;
  *argv = v;
  return 0;
bad:
  for (int i = 0; i < n; i++) free(v[i]);
  free(v);
  free(buf);
  return -EINVAL;
}

static void free_argv(int argc, char **argv) {
  for (int i = 0; i < argc; i++) free(argv[i]);
  free(argv);
}

/* ---- reading lines ----------------------------------------------------------- */

static void on_sigint(int sig) {
  (void)sig;
  if (g_in_readline) {
    /* abandon the line being typed, like a shell */
    rl_crlf();
    rl_replace_line("", 0);
    rl_on_new_line();
    rl_redisplay();
  } else {
    bf_lua_interrupt();
  }
}

/* One line without its newline (caller frees), NULL at end of input. */
static char *read_line(repl *r, const char *prompt) {
  if (r->tty) {
    g_in_readline = 1;
    char *l = readline(prompt);
    g_in_readline = 0;
    return l;
  }
  char *l = NULL;
  size_t cap = 0;
  ssize_t n = getline(&l, &cap, stdin);
  if (n < 0) {
    free(l);
    return NULL;
  }
  if (n > 0 && l[n - 1] == '\n') l[--n] = 0;
  if (n > 0 && l[n - 1] == '\r') l[--n] = 0;
  return l;
}

/* ---- Lua ------------------------------------------------------------------------ */

static void set_lua_session(repl *r) {
  if (!r->L) return;
  char code[96];
  if (r->cli->current_session > 0)
    snprintf(code, sizeof code, "session = bifocal.session(%lld)", r->cli->current_session);
  else
    snprintf(code, sizeof code, "session = nil");
  bf_err err = BF_ERR_INIT;
  if (bf_lua_exec(r->L, code, "=use", 0, &err) == BF_LUA_ERROR) {
    bf_fputs_inert_lines(stderr, err.msg); /* Lua errors may quote names */
    fputc('\n', stderr);
  }
}

static lua_State *get_lua(repl *r) {
  if (r->L) return r->L;
  bf_err err = BF_ERR_INIT;
  bf_lua_opts o = {.db_path = r->cli->db_path, .sandbox = 0};
  r->L = bf_lua_new(&o, &err);
  if (!r->L) {
    bf_cli_error("%s", err.msg);
    return NULL;
  }
  set_lua_session(r);
  return r->L;
}

/* Run Lua source, reading continuation lines while the chunk is unfinished. */
static int run_lua(repl *r, const char *code, int print) {
  lua_State *L = get_lua(r);
  if (!L) return 1;
  char *chunk = strdup(code);
  if (!chunk) return 1;
  for (;;) {
    bf_err err = BF_ERR_INIT;
    int st = bf_lua_exec(L, chunk, "=lua", print, &err);
    if (st == BF_LUA_OK) break;
    if (st == BF_LUA_ERROR) {
      bf_fputs_inert_lines(stderr, err.msg); /* Lua errors may quote names */
      fputc('\n', stderr);
      free(chunk);
      return 1;
    }
    char *more = read_line(r, "   ...> ");
    if (!more) {
      fprintf(stderr, "bifocal: unfinished Lua chunk at end of input\n");
      free(chunk);
      return 1;
    }
    if (r->tty && *more) add_history(more);
    size_t a = strlen(chunk), b = strlen(more);
    char *n = realloc(chunk, a + b + 2);
    if (!n) {
      free(more);
      free(chunk);
      return 1;
    }
    chunk = n;
    chunk[a] = '\n';
    memcpy(chunk + a + 1, more, b + 1);
    free(more);
  }
  free(chunk);
  return 0;
}

/* ---- builtins ------------------------------------------------------------------ */

static int cmd_use(repl *r, int argc, char **argv) {
  if (argc < 2) {
    if (r->cli->current_session > 0)
      printf("current session: %lld\n", r->cli->current_session);
    else
      printf("no current session (use ID)\n");
    return 0;
  }
  if (strcmp(argv[1], "none") == 0 || strcmp(argv[1], "-") == 0) {
    r->cli->current_session = 0;
    set_lua_session(r);
    return 0;
  }
  bf_store *s;
  int rc = bf_cli_open_store(r->cli, BF_STORE_READONLY, &s);
  if (rc) return rc;
  int64_t id;
  long long saved = r->cli->current_session;
  r->cli->current_session = 0;
  rc = bf_cli_session_arg(r->cli, s, argv[1], &id);
  if (rc) {
    r->cli->current_session = saved;
    bf_store_close(s);
    return rc;
  }
  bf_session_info *in = NULL;
  if (bf_store_session_get(s, id, &in) == 0) {
    char k[64], c[64], lb[512];
    if (r->tty)
      printf("using session %lld (%s, %s clock%s%s)\n", (long long)id, bf_inert(in->kind, k, sizeof k),
             in->clock ? bf_inert(in->clock, c, sizeof c) : "?", in->label ? ", " : "", bf_inert(in->label, lb, sizeof lb));
    bf_session_info_free(in);
  }
  bf_store_close(s);
  r->cli->current_session = id;
  set_lua_session(r);
  return 0;
}

static int cmd_help(repl *r, int argc, char **argv) {
  (void)r;
  if (argc > 1) {
    for (int i = 0; builtin_help[i].name; i++)
      if (strcmp(argv[1], builtin_help[i].name) == 0 ||
          (strcmp(argv[1], "exit") == 0 && strcmp(builtin_help[i].name, "quit") == 0)) {
        printf("usage: %s\n  %s\n", builtin_help[i].usage, builtin_help[i].help);
        return 0;
      }
    if (strcmp(argv[1], "=") == 0) {
      printf("usage: = EXPR\n  evaluate Lua expressions and print their values\n");
      return 0;
    }
    return bf_cli_dispatch(r->cli, argc, argv);
  }
  printf("commands (also as `bifocal COMMAND` from a shell):\n");
  for (const bf_cmd *c = bf_cmds; c->name; c++) printf("  %-10s %s\n", c->name, c->summary);
  printf("\nin the REPL:\n");
  for (int i = 0; builtin_help[i].name; i++) {
    const char *h = builtin_help[i].help, *nl = strchr(h, '\n');
    printf("  %-22s %.*s\n", builtin_help[i].usage, nl ? (int)(nl - h) : (int)strlen(h), h);
  }
  printf("  %-22s %s\n", "= EXPR", "evaluate Lua expressions and print their values");
  printf("\n`help CMD` shows one command's usage.\n");
  return 0;
}

/* ---- completion ---------------------------------------------------------------- */

typedef struct strlist {
  char **v;
  size_t n, cap;
} strlist;

static void sl_add(strlist *l, const char *s) {
  for (size_t i = 0; i < l->n; i++)
    if (strcmp(l->v[i], s) == 0) return;
  if (bf_vec_grow((void **)&l->v, &l->cap, l->n + 1, sizeof *l->v, 64)) return;
  char *d = strdup(s);
  if (d) l->v[l->n++] = d;
}

static void sl_clear(strlist *l) {
  for (size_t i = 0; i < l->n; i++) free(l->v[i]);
  l->n = 0;
}

static strlist g_cands;
static size_t g_cand_i;

static void add_option(void *ud, const char *opt) {
  (void)ud;
  sl_add(&g_cands, opt);
}

static void add_options(const char *cmd) {
  if (!bf_cli_find(cmd)) return;
  bf_cli_option_names(cmd, add_option, NULL);
}

/* The word before the one being completed (ends before start). */
static void word_before(int start, char *out, size_t len) {
  int e = start;
  while (e > 0 && (rl_line_buffer[e - 1] == ' ' || rl_line_buffer[e - 1] == '\t')) e--;
  int b = e;
  while (b > 0 && rl_line_buffer[b - 1] != ' ' && rl_line_buffer[b - 1] != '\t') b--;
  snprintf(out, len, "%.*s", e - b, rl_line_buffer + b);
}

static void add_sessions_and_functions(int functions) {
  bf_store *s = NULL;
  if (bf_store_open(g_cli->db_path, BF_STORE_READONLY, &s, NULL) < 0) return;
  bf_session_info **v = NULL;
  size_t n = 0;
  int64_t newest = 0;
  if (bf_store_session_list(s, &v, &n) == 0) {
    for (size_t i = 0; i < n; i++) {
      char id[32];
      snprintf(id, sizeof id, "%lld", (long long)v[i]->id);
      if (!functions) {
        sl_add(&g_cands, id);
        if (v[i]->label) sl_add(&g_cands, v[i]->label);
      }
      newest = v[i]->id;
      bf_session_info_free(v[i]);
    }
    free(v);
  }
  if (functions) {
    int64_t sid = g_cli->current_session > 0 ? g_cli->current_session : newest;
    bf_profile *p = NULL;
    if (sid > 0 && bf_profile_functions(s, sid, NULL, BF_SORT_SELF, &p) == 0) {
      for (size_t i = 0; i < p->n; i++) sl_add(&g_cands, p->rows[i].qualname);
      bf_profile_free(p);
    }
  }
  bf_store_close(s);
}

/* Session labels and ids, newest first (shown in this order: sorting off). */
static void add_sessions_newest(void) {
  bf_store *s = NULL;
  if (bf_store_open(g_cli->db_path, BF_STORE_READONLY, &s, NULL) < 0) return;
  bf_session_info **v = NULL;
  size_t n = 0;
  if (bf_store_session_list(s, &v, &n) == 0) {
    for (size_t i = n; i-- > 0;) {
      char id[32];
      snprintf(id, sizeof id, "%lld", (long long)v[i]->id);
      if (v[i]->label) sl_add(&g_cands, v[i]->label);
      sl_add(&g_cands, id);
    }
    for (size_t i = 0; i < n; i++) bf_session_info_free(v[i]);
    free(v);
  }
  bf_store_close(s);
  rl_sort_completion_matches = 0;
}

/* The word at start is one of cmd's session arguments (bf_cli_session_args). */
static int at_session_arg(const char *cmd, int start) {
  int want = bf_cli_session_args(cmd);
  if (!want) return 0;
  int words = 0; /* arguments before this one, options left out */
  const char *p = rl_line_buffer;
  for (int i = 0; i < start; i++)
    if ((i == 0 || p[i - 1] == ' ' || p[i - 1] == '\t') && p[i] != ' ' && p[i] != '\t' && p[i] != '-') words++;
  return want < 0 || words - 1 < want; /* the first word is the command */
}

static char *cand_gen(const char *text, int state) {
  if (!state) g_cand_i = 0;
  size_t l = strlen(text);
  while (g_cand_i < g_cands.n) {
    const char *c = g_cands.v[g_cand_i++];
    if (strncmp(c, text, l) == 0) return strdup(c);
  }
  return NULL;
}

/* Options of a script, from its "-- usage:" line. */
static void add_script_options(const char *line) {
  char word[256] = "";
  const char *p = line;
  /* the first non-option word after `run` is the script */
  while (*p == ' ') p++;
  p += strcspn(p, " ");
  for (;;) {
    while (*p == ' ') p++;
    if (!*p) return;
    size_t n = strcspn(p, " ");
    if (*p != '-') {
      snprintf(word, sizeof word, "%.*s", (int)n, p);
      break;
    }
    p += n;
  }
  char buf[4096];
  FILE *f = fopen(bf_lua_find_script(word, buf, sizeof buf), "r");
  if (!f) return;
  char l[1024];
  for (int i = 0; i < 30 && fgets(l, sizeof l, f); i++) {
    if (strncmp(l, "-- usage:", 9) != 0) continue;
    for (const char *q = l; (q = strstr(q, "--")) != NULL;) {
      const char *e = q + 2;
      while ((*e >= 'a' && *e <= 'z') || *e == '-' || (*e >= '0' && *e <= '9')) e++;
      if (e - q > 2 && q[2] != ' ' && q[2] != '-') {
        char opt[64];
        snprintf(opt, sizeof opt, "%.*s", (int)(e - q), q);
        sl_add(&g_cands, opt);
      }
      q = e;
    }
    break;
  }
  fclose(f);
}

static void add_name(void *ud, const char *name) {
  (void)ud;
  sl_add(&g_cands, name);
}

/* Shipped script names first, then files. */
static int g_files_state;
static char *script_or_file_gen(const char *text, int state) {
  if (!state) g_files_state = 0;
  char *c = cand_gen(text, state);
  if (c) return c;
  return rl_filename_completion_function(text, g_files_state++);
}

static char **complete(const char *text, int start, int end) {
  (void)end;
  sl_clear(&g_cands);
  rl_attempted_completion_over = 1;
  rl_sort_completion_matches = 1;
  /* first word of the line? */
  int first = 1;
  for (int i = 0; i < start; i++)
    if (rl_line_buffer[i] != ' ' && rl_line_buffer[i] != '\t') first = 0;
  char cmd[64] = "", prev[64] = "";
  sscanf(rl_line_buffer, "%63s", cmd);
  word_before(start, prev, sizeof prev);
  const char *prev_values = !first && prev[0] == '-' ? bf_cli_option_values(cmd, prev) : NULL;
  if (first) {
    for (const bf_cmd *c = bf_cmds; c->name; c++) sl_add(&g_cands, c->name);
    for (int i = 0; builtins[i]; i++) sl_add(&g_cands, builtins[i]);
  } else if (strcmp(cmd, "lua") == 0 || cmd[0] == '=') {
    add_sessions_and_functions(1);
    rl_completer_quote_characters = "\"'";
  } else if (strcmp(cmd, "help") == 0) {
    for (const bf_cmd *c = bf_cmds; c->name; c++) sl_add(&g_cands, c->name);
    for (int i = 0; builtins[i]; i++) sl_add(&g_cands, builtins[i]);
  } else if (prev_values) { /* the value of an option: --view fl<TAB> */
    if (prev_values[0] == '@') {
      rl_attempted_completion_over = 0; /* file and directory names */
      return NULL;
    }
    char w[128];
    for (const char *v = prev_values; *v;) {
      size_t n = strcspn(v, " ");
      snprintf(w, sizeof w, "%.*s", (int)(n < 127 ? n : 127), v);
      sl_add(&g_cands, w);
      v += n;
      while (*v == ' ') v++;
    }
  } else if (text[0] != '-' && at_session_arg(cmd, start)) { /* sessions, and only them, first */
    add_sessions_newest();
  } else if (text[0] == '-') {
    add_options(cmd);
    if (strcmp(cmd, "run") == 0) add_script_options(rl_line_buffer);
  } else if (strcmp(cmd, "run") == 0 || strcmp(cmd, "import") == 0) {
    rl_attempted_completion_over = 0; /* file names */
    /* script arguments are sessions too: offer them besides files */
    if (strcmp(cmd, "run") == 0) {
      const char *p = rl_line_buffer;
      int words = 0;
      for (int i = 0; i < start; i++)
        if ((i == 0 || p[i - 1] == ' ') && p[i] != ' ') words++;
      if (words >= 2) {
        add_sessions_and_functions(0);
        rl_attempted_completion_over = 1;
      } else if (text[0] != '-') {
        bf_lua_script_names(add_name, NULL);
        return rl_completion_matches(text, script_or_file_gen);
      }
    }
    if (!rl_attempted_completion_over) return NULL;
  } else {
    add_sessions_and_functions(0);
    add_sessions_and_functions(1);
  }
  return rl_completion_matches(text, cand_gen);
}

/* ---- the loop ---------------------------------------------------------------------- */

static char *history_path(void) {
  const char *e = getenv("BIFOCAL_HISTORY");
  if (e && *e) return strdup(e);
  const char *home = getenv("HOME");
  if (!home || !*home) return NULL;
  size_t n = strlen(home) + 32;
  char *p = malloc(n);
  if (p) snprintf(p, n, "%s/.bifocal_history", home);
  return p;
}

static int one_line(repl *r, char *line) {
  char *p = line;
  while (*p == ' ' || *p == '\t') p++;
  size_t n = strlen(p);
  while (n && (p[n - 1] == ' ' || p[n - 1] == '\t')) p[--n] = 0;
  if (!*p || *p == '#') return 0;
  if (*p == '=') return run_lua(r, p + 1, 1);
  if (strncmp(p, "lua", 3) == 0 && (p[3] == ' ' || p[3] == '\t' || !p[3])) {
    const char *code = p + 3;
    while (*code == ' ' || *code == '\t') code++;
    if (!*code) {
      printf("usage: lua CODE   (or `= EXPR`; unfinished chunks continue on the next lines)\n");
      return 2;
    }
    return run_lua(r, code, 1);
  }
  int argc;
  char **argv;
  int rc = tokenize(p, &argc, &argv);
  if (rc == -EINVAL) {
    bf_cli_error("unterminated quote in: %s", p);
    return 2;
  }
  if (rc < 0) return 1;
  if (argc == 0) {
    free_argv(argc, argv);
    return 0;
  }
  if (strcmp(argv[0], "use") == 0)
    rc = cmd_use(r, argc, argv);
  else if (strcmp(argv[0], "help") == 0)
    rc = cmd_help(r, argc, argv);
  else if (!bf_cli_find(argv[0])) {
    bf_cli_error("unknown command '%s' (type `help`)", argv[0]);
    rc = 2;
  } else {
    /* the audit trail records the REPL line, not just how the REPL started */
    const char *started_as = r->cli->cmdline;
    char *line = NULL;
    if (asprintf(&line, "%s (repl) %s", started_as, p) >= 0) r->cli->cmdline = line;
    rc = bf_cli_dispatch(r->cli, argc, argv);
    r->cli->cmdline = started_as;
    free(line);
  }
  free_argv(argc, argv);
  fflush(stdout);
  fflush(stderr);
  return rc;
}

int bf_repl_main(bf_cli *cli) {
  repl r = {.cli = cli, .tty = isatty(0) && isatty(1)};
  g_cli = cli;
  cli->in_repl = 1;
  char *hist = NULL;
  struct sigaction sa = {0}, old;
  sa.sa_handler = on_sigint;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, &old);
  if (r.tty) {
    rl_readline_name = "bifocal";
    rl_catch_signals = 0;
    rl_attempted_completion_function = complete;
    rl_basic_word_break_characters = " \t\n\"'(,=";
    using_history();
    hist = history_path();
    if (hist) read_history(hist);
    printf("bifocal %s on %s — `help` lists commands, Tab completes, Ctrl-D leaves\n", BF_VERSION, cli->db_path);
  }
  for (;;) {
    char prompt[64];
    if (cli->current_session > 0)
      snprintf(prompt, sizeof prompt, "bifocal[%lld]> ", cli->current_session);
    else
      snprintf(prompt, sizeof prompt, "bifocal> ");
    char *line = read_line(&r, prompt);
    if (!line) {
      if (r.tty) putchar('\n');
      break;
    }
    if (r.tty && *line) add_history(line);
    char first[8] = "";
    sscanf(line, " %7s", first);
    if (strcmp(first, "quit") == 0 || strcmp(first, "exit") == 0) {
      free(line);
      break;
    }
    r.status = one_line(&r, line);
    free(line);
  }
  if (hist) {
    write_history(hist);
    history_truncate_file(hist, 2000);
    free(hist);
  }
  sl_clear(&g_cands);
  free(g_cands.v);
  if (r.L) lua_close(r.L);
  sigaction(SIGINT, &old, NULL);
  return r.tty ? 0 : r.status;
}
