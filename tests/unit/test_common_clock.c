/* test_common_clock.c — the two clocks: the monotonic one never goes back
 * and follows a known sleep; the wall one agrees with time(2). */
#include <time.h>

#include "check.h"
#include "clock.h"

int main(void) {
  int64_t prev = bf_mono_ns(), back = 0;
  for (int i = 0; i < 100000; i++) {
    int64_t t = bf_mono_ns();
    back += t < prev;
    prev = t;
  }
  CHECK_EQ_INT(back, 0);
  int64_t t0 = bf_mono_ns();
  struct timespec d = {0, 20 * 1000000};
  nanosleep(&d, NULL);
  int64_t slept = bf_mono_ns() - t0;
  CHECK(slept >= 20 * 1000000 && slept < 5LL * 1000000000); /* at least the sleep; generous on a loaded host */
  int64_t w = bf_wall_ns() / 1000000000;
  time_t now = time(NULL);
  CHECK(w >= now - 1 && w <= now + 1);
  return CHECK_DONE();
}
