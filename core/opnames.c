/* opnames.c — opcode byte to name per Python version, from the tables that
 * core/gen/gen_opnames.sh generates with each interpreter's own dis/opcode
 * modules (core/gen/opnames_gen.h). */
#include <stdlib.h>
#include <string.h>

#include "gen/opnames_gen.h"
#include "opnames.h"

const char *bf_opname(const char *python_version, int op, const char **base) {
  if (base) *base = NULL;
  if (!python_version || strncmp(python_version, "3.", 2) != 0 || op < 0 || op > 255) return NULL;
  char *end;
  long minor = strtol(python_version + 2, &end, 10);
  if (end == python_version + 2 || (*end && *end != '.' && *end != '+')) return NULL;
  const char *const(*tab)[2];
  switch (minor) {
    case 11: tab = opnames_3_11; break;
    case 12: tab = opnames_3_12; break;
    case 13: tab = opnames_3_13; break;
    case 14: tab = opnames_3_14; break;
    case 15: tab = opnames_3_15; break;
    default: return NULL;
  }
  if (base) *base = tab[op][1];
  return tab[op][0];
}
