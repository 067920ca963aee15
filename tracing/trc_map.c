/* trc_map.c — inserting into and freeing the collector's map (see trc_map.h);
 * the table itself is common/pmap.c's. */
#include "trc_map.h"

#include <errno.h>

int trc_map_put(trc_map *m, uint64_t key, uint32_t val) {
  if (key == 0 || key == BF_PMAP_GONE) return -EINVAL;
  if (!m->m.slot_size) m->m.slot_size = sizeof(trc_map_slot); /* a zeroed map */
  trc_map_slot *s = bf_pmap_put(&m->m, key, NULL);
  if (!s) return -ENOMEM;
  s->val = val;
  return 0;
}

void trc_map_free(trc_map *m) { bf_pmap_free(&m->m); }
