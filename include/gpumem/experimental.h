/**
 * @file gpumem/experimental.h
 * @brief The experimental tier: functions outside the ABI promise (docs/abi.md).
 *
 * What is declared here may change or go in any release, minor and patch ones included; its
 * symbols carry the version node `GPUMEM_EXPERIMENTAL`, never a release's, so a program that uses
 * them says so in its symbol table. A function that settles moves to a release's header and node,
 * where the promise then holds. `gpumem.h` does not include this header: include it by name.
 *
 * Thread safety: as the function's documentation says.
 */
#ifndef GPUMEM_EXPERIMENTAL_H
#define GPUMEM_EXPERIMENTAL_H

#include "gpumem/core.h"

#ifdef __cplusplus
extern "C" {
#endif

/**
 * @brief Ends what gpumem runs and caches in the background, once the caller holds no handle.
 *
 * Joins the worker threads that split large host copies, frees the pinned staging buffers of
 * copies from pageable memory (as gpumem_copy_staging_release()), gives back what every device
 * pool caches (as gpumem_pool_release() on all streams) and flushes the pinning cache (as
 * gpumem_pin_cache_flush()). gpumem stays usable: a later call starts again what it needs.
 *
 * Call it before unloading the library, or from a test that checks for leaked threads. It may be
 * called from any thread, but not while another thread calls into gpumem.
 *
 * @return ::GPUMEM_SUCCESS; ::GPUMEM_ERROR_BUSY, doing nothing, while a handle the caller made is
 *         live (an allocator or pool, an array, a recording or a trace reader: the detail says how
 *         many) or a copy is running; the errors of the calls above otherwise, with what came
 *         before them done.
 * @since 0.4.0 (experimental)
 */
GPUMEM_NODISCARD GPUMEM_API gpumem_status_t gpumem_shutdown(void);

#ifdef __cplusplus
}
#endif

#endif /* GPUMEM_EXPERIMENTAL_H */
