/* check_db.h — the store tests' closing check: PRAGMA integrity_check is "ok". */
#ifndef BF_CHECK_DB_H
#define BF_CHECK_DB_H
#include <sqlite3.h>
#include <string.h>

#include "check.h"

static void check_integrity(const char *path) {
  sqlite3 *db;
  CHECK(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL) == SQLITE_OK);
  sqlite3_stmt *st;
  CHECK(sqlite3_prepare_v2(db, "PRAGMA integrity_check", -1, &st, NULL) == SQLITE_OK);
  CHECK(sqlite3_step(st) == SQLITE_ROW);
  CHECK(strcmp((const char *)sqlite3_column_text(st, 0), "ok") == 0);
  sqlite3_finalize(st);
  sqlite3_close(db);
}
#endif
