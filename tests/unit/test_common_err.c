/* test_common_err.c — bf_err: set returns its code and formats, a long
 * message is cut inside the buffer, prefix keeps the code, NULL is accepted
 * everywhere, msg falls back when nothing was set. */
#include <errno.h>
#include <string.h>

#include "check.h"
#include "err.h"

int main(void) {
  bf_err e = BF_ERR_INIT;
  CHECK(strcmp(bf_err_msg(&e, "none"), "none") == 0);
  CHECK_EQ_INT(bf_err_set(&e, -ENOENT, "database '%s' does not exist yet", "a.db"), -ENOENT);
  CHECK_EQ_INT(e.code, -ENOENT);
  CHECK(strcmp(bf_err_msg(&e, "none"), "database 'a.db' does not exist yet") == 0);

  CHECK_EQ_INT(bf_err_prefix(&e, "cannot open '%s': ", "x"), -ENOENT);
  CHECK(strcmp(e.msg, "cannot open 'x': database 'a.db' does not exist yet") == 0);

  bf_err_clear(&e);
  CHECK_EQ_INT(e.code, 0);
  CHECK(e.msg[0] == 0);
  bf_err_prefix(&e, "alone");
  CHECK(strcmp(e.msg, "alone") == 0);

  /* longer than the buffer: cut, terminated, never overrun */
  static char big[2 * BF_ERR_MSG_MAX];
  memset(big, 'x', sizeof big - 1);
  bf_err_set(&e, -E2BIG, "%s", big);
  CHECK_EQ_INT(strlen(e.msg), BF_ERR_MSG_MAX - 1);
  bf_err_prefix(&e, "head: ");
  CHECK_EQ_INT(strlen(e.msg), BF_ERR_MSG_MAX - 1);
  CHECK(strncmp(e.msg, "head: xxx", 9) == 0);
  bf_err_set(&e, -E2BIG, "short");
  bf_err_prefix(&e, "%s", big);
  CHECK_EQ_INT(strlen(e.msg), BF_ERR_MSG_MAX - 1);
  CHECK(e.msg[0] == 'x' && e.msg[BF_ERR_MSG_MAX - 2] == 'x');

  /* NULL: the caller wants no text; the code still comes back */
  CHECK_EQ_INT(bf_err_set(NULL, -EIO, "ignored %d", 1), -EIO);
  CHECK_EQ_INT(bf_err_prefix(NULL, "x"), 0);
  bf_err_clear(NULL);
  CHECK(strcmp(bf_err_msg(NULL, "fb"), "fb") == 0);
  return CHECK_DONE();
}
