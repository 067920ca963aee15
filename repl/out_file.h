/* out_file.h — atomic output files of views and exports: written to a 0600
 * temporary beside the target, renamed into place only when complete. */
#ifndef BF_OUT_FILE_H
#define BF_OUT_FILE_H

#include <stdio.h>

typedef struct bf_out_file {
  FILE *f;     /* write here */
  char *tmp;   /* temporary path (NULL for stdout) */
  const char *path;
} bf_out_file;

/* Open path ("-" or NULL = stdout). Returns 0 or prints one error line and
 * returns 1. OUT: *o. */
int bf_out_open(const char *path, bf_out_file *o);

/* Finish: ok = the content is complete. On success renames the temporary onto
 * the target; otherwise removes it. Returns 0 or prints an error and returns 1. */
int bf_out_close(bf_out_file *o, int ok);

#endif
