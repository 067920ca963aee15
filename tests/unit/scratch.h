/* scratch.h — the C tests' and benches' scratch files: a temporary
 * directory with names inside it, and the clean-up of a scratch SQLite
 * database with its WAL side files. Header only, no project includes, so
 * unit tests, fuzz targets and benches share it. */
#ifndef BF_SCRATCH_H
#define BF_SCRATCH_H
#include <stdio.h>
#include <unistd.h>

/* The scratch directory (fill it with mkdtemp(scratch_dir()) from a
 * "/tmp/NAME-XXXXXX" template written into it). */
#define SCRATCH_DIR_LEN 256
static inline char *scratch_dir(void) {
  static char dir[SCRATCH_DIR_LEN];
  return dir;
}

/* "<scratch dir>/name"; the last four results stay valid. */
static inline const char *tmp_path(const char *name) {
  static char buf[4][512];
  static int k;
  k = (k + 1) % 4;
  snprintf(buf[k], sizeof buf[k], "%s/%s", scratch_dir(), name);
  return buf[k];
}

/* Remove path, path-wal and path-shm; a missing one is fine. */
static inline void unlink_db(const char *path) {
  char side[4200];
  unlink(path);
  snprintf(side, sizeof side, "%s-wal", path);
  unlink(side);
  snprintf(side, sizeof side, "%s-shm", path);
  unlink(side);
}
#endif
