#include <errno.h>
#include "store_int.h"
#include "views.h"
int bf_export_pprof(bf_store *s, int64_t id, const bf_sample_filter *o, FILE *out) {
  (void)id; (void)o; (void)out;
  return bf_store_fail(s, -ENOSYS, "not yet");
}
