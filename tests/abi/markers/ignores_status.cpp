// Must not compile with -Werror=unused-result: gpumem_alloc's status is GPUMEM_NODISCARD.
#include <gpumem/gpumem.h>

void leak(void** p) { gpumem_alloc(nullptr, 64, nullptr, p); }
