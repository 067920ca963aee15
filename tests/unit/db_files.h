/* db_files.h — the C tests' and benches' clean-up of a scratch SQLite
 * database: the file and its WAL side files (-wal, -shm). Header only; no
 * project includes, so unit tests, fuzz targets and benches share it. */
#ifndef BF_DB_FILES_H
#define BF_DB_FILES_H
#include <stdio.h>
#include <unistd.h>

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
