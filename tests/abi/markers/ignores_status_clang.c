/* Must not compile with clang and -Werror=unused-result: gpumem_alloc's status is GPUMEM_NODISCARD. */
#include <gpumem/gpumem.h>

void leak(void** p) { gpumem_alloc(NULL, 64, NULL, p); }
