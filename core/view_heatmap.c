#include <errno.h>
#include "store_int.h"
#include "views.h"
int bf_view_heatmap(bf_store *s, int64_t id, const bf_view_opts *o, FILE *out) {
  (void)id; (void)o; (void)out;
  return bf_store_fail(s, -ENOSYS, "not yet");
}
