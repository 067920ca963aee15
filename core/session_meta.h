/* session_meta.h — the one collector of the context every session records
 * (host, commit, command line, Python version and build, profiler version,
 * label, start, expiry), used by record, trace and import, so the three kinds
 * of session store the same fields the same way.
 */
#ifndef BF_SESSION_META_H
#define BF_SESSION_META_H

#include <stddef.h>
#include <stdint.h>

#include "store.h"

typedef struct bf_meta_src {
  const char *kind, *clock, *mode;
  int pid;                 /* the target process (0: none) */
  const char *command;     /* borrowed; NULL: the target's /proc command line, space-joined */
  const char *commit;      /* given by the user (--commit): wins */
  int find_commit;         /* else git rev-parse HEAD in the target's working
                              directory (this process's when pid is 0); 0: none */
  const char *python_version, *python_build; /* may be NULL */
  const char *profiler_version; /* NULL: none recorded */
  const char *label;
  int64_t ttl_ns;          /* 0: never expires */
} bf_meta_src;

/* Storage the collected strings live in; must outlive the info filled from it. */
typedef struct bf_meta {
  char host[256];
  char commit[64];
  char command[1024]; /* the target's, when src->command is NULL */
} bf_meta;

/* Fill info (zeroed first) from src: kind, clock, mode, start_ns (now), host
 * ("" when unknown), pid, command (NULL when unknown), python_version and
 * build, profiler_version, commit (NULL when none), label, status
 * "incomplete" and expires_at_ns. Never fails (missing facts stay empty). */
void bf_meta_collect(const bf_meta_src *src, bf_meta *m, bf_session_info *info);

/* argv[0..argc) joined by single spaces, as sessions record a command line
 * (malloc'd; NULL when out of memory). */
char *bf_meta_join_argv(int argc, char *const *argv);

/* Run argv (PATH searched) in directory dir (NULL: here) with stderr
 * discarded and stdout captured into buf (NUL-terminated, cut at len-1).
 * Returns its exit status, or -1 when it could not run or died by a signal. */
int bf_meta_capture(char *const argv[], const char *dir, char *buf, size_t len);

#endif
