/* Compiles as strict C99: a status used, or dropped with a cast, and a deprecated declaration
 * that nothing calls. */
#include <gpumem/gpumem.h>

GPUMEM_DEPRECATED("use gpumem_new_call") int gpumem_old_call(void);

int call(void** p) {
  (void)gpumem_free(NULL, NULL, NULL);
  return gpumem_alloc(NULL, 64, NULL, p) == GPUMEM_SUCCESS;
}
