/* out_file.h — the one checked writer for every view, export and diff -o:
 * a regular file (or none yet) is written to a 0600 temporary beside it,
 * fsync'd and renamed into place only when complete; character devices,
 * FIFOs and "-" (stdout) are written directly; a symlink is followed to its
 * target, never replaced; the open database (and its -wal/-shm) is refused. */
#ifndef BF_OUT_FILE_H
#define BF_OUT_FILE_H

#include <stdio.h>

typedef struct bf_out_file {
  FILE *f;     /* write here */
  char *tmp;   /* temporary path (NULL when written directly) */
  char *path;  /* resolved target (symlinks followed) */
  const char *arg;
  int direct;  /* stdout, a character device or a FIFO */
  int anon;    /* 1: an unnamed O_TMPFILE so far; 3: named tmp once complete */
} bf_out_file;

/* Remember the database path so that -o never writes over it (or its -wal,
 * -shm or -journal), whatever name reaches it. */
void bf_out_protect(const char *db_path);

/* Open path ("-" or NULL = stdout). Returns 0 or prints one error line and
 * returns 1. OUT: *o. */
int bf_out_open(const char *path, bf_out_file *o);

/* Finish: ok = the content is complete. Every write is checked here; on
 * success the temporary is renamed onto the target; otherwise it is removed
 * and nothing is left behind. Returns 0 or prints one error and returns 1. */
int bf_out_close(bf_out_file *o, int ok);

#endif
