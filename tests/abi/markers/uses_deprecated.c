/* Must not compile with -Werror=deprecated-declarations: GPUMEM_DEPRECATED works in C99. */
#include <gpumem/core.h>

GPUMEM_DEPRECATED("use gpumem_new_call") int gpumem_old_call(void);

int call(void) { return gpumem_old_call(); }
