/* out_file.c — atomic 0600 output files (see out_file.h). */
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "out_file.h"

int bf_out_open(const char *path, bf_out_file *o) {
  memset(o, 0, sizeof *o);
  o->path = path;
  if (!path || strcmp(path, "-") == 0) {
    o->f = stdout;
    return 0;
  }
  if (asprintf(&o->tmp, "%s.tmp.%d", path, (int)getpid()) < 0) {
    o->tmp = NULL;
    bf_cli_error("out of memory");
    return 1;
  }
  int fd = open(o->tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0 || !(o->f = fdopen(fd, "w"))) {
    bf_cli_error("cannot write '%s': %m", path);
    if (fd >= 0) close(fd);
    free(o->tmp);
    o->tmp = NULL;
    return 1;
  }
  return 0;
}

int bf_out_close(bf_out_file *o, int ok) {
  if (!o->f) return 1;
  int werr = o->f == stdout ? fflush(stdout) : fclose(o->f);
  o->f = NULL;
  if (!o->tmp) {
    if (ok && werr) bf_cli_error("write to stdout failed");
    return ok && !werr ? 0 : 1;
  }
  int rc = 0;
  if (!ok || werr) {
    if (ok) bf_cli_error("cannot write '%s': %m", o->path);
    unlink(o->tmp);
    rc = 1;
  } else if (rename(o->tmp, o->path) != 0) {
    bf_cli_error("cannot write '%s': %m", o->path);
    unlink(o->tmp);
    rc = 1;
  }
  free(o->tmp);
  o->tmp = NULL;
  return rc;
}
