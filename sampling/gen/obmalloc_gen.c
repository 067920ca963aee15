/* obmalloc_gen.c — the offsets sampling/pyalloc.c reads pymalloc's state by,
 * printed from one CPython's own headers (obmalloc_offsets.sh). */
#define Py_BUILD_CORE 1
#include "Python.h"
#include "internal/pycore_runtime.h"
#include "internal/pycore_interp.h"
#include "internal/pycore_obmalloc.h"
#include <stdio.h>
#include <stddef.h>
int main(void) {
  printf("version %s\n", PY_VERSION);
  printf("is_obmalloc %zu size %zu\n", offsetof(PyInterpreterState, obmalloc), sizeof(((PyInterpreterState*)0)->obmalloc));
  printf("rt_main_interp %zu\n", offsetof(_PyRuntimeState, _main_interpreter));
  printf("st_mgmt %zu\n", offsetof(struct _obmalloc_state, mgmt));
  printf("mg_arenas %zu mg_maxarenas %zu mg_narenas %zu\n", offsetof(struct _obmalloc_mgmt, arenas), offsetof(struct _obmalloc_mgmt, maxarenas), offsetof(struct _obmalloc_mgmt, narenas_currently_allocated));
  printf("ao_size %zu ao_address %zu ao_nfree %zu ao_ntotal %zu\n", sizeof(struct arena_object), offsetof(struct arena_object, address), offsetof(struct arena_object, nfreepools), offsetof(struct arena_object, ntotalpools));
  printf("arena_size %d pool_size %d\n", (int)ARENA_SIZE, (int)POOL_SIZE);
#ifdef Py_GIL_DISABLED
  printf("free-threaded\n");
#endif
  return 0;
}
