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

/**
 * @brief What would have served a pool's failed allocation (::gpumem_out_of_memory_info_t::cause).
 * @since 0.4.0 (experimental)
 */
enum gpumem_out_of_memory_cause {
  GPUMEM_OOM_NONE = 0,         /**< No pool ran out of memory on this thread yet. */
  GPUMEM_OOM_OTHER_STREAM = 1, /**< Another stream's arena had a free piece large enough, not lent. */
  GPUMEM_OOM_PENDING = 2,      /**< A free pending on other streams' work was large enough. */
  GPUMEM_OOM_FRAGMENTED = 3,   /**< Enough bytes were free, but not in one piece. */
  GPUMEM_OOM_LIMIT = 4,        /**< The pool's limit: a limit of @c would_serve bytes would do. */
  GPUMEM_OOM_IN_USE = 5        /**< Too much in use: freeing @c would_serve more bytes would do. */
};

/**
 * @brief Where a pool's memory was when an allocation from it failed for want of memory: the
 *        numbers of the failure's detail text, for a program to read. gpumem_last_out_of_memory().
 * @since 0.4.0 (experimental)
 */
typedef struct gpumem_out_of_memory_info_s {
  size_t struct_size;    /**< `sizeof(gpumem_out_of_memory_info_t)`. */
  int32_t device;        /**< The pool's device; -1 for host memory. */
  uint32_t cause;        /**< One ::gpumem_out_of_memory_cause. */
  uint64_t size;         /**< Bytes asked for; 0 with ::GPUMEM_OOM_NONE. */
  uint64_t rounded;      /**< The size as the pool rounds it. */
  uint64_t pool_bytes;   /**< What the pool held from its upstream. */
  uint64_t limit;        /**< The pool's limit; 0 for none. */
  uint64_t in_use;       /**< Of @c pool_bytes, handed out. */
  uint64_t free_pieces;  /**< Of @c pool_bytes, free in pieces of split blocks. */
  uint64_t free_whole;   /**< Of @c pool_bytes, free in whole blocks. */
  uint64_t pending;      /**< Of @c pool_bytes, freed on one stream and waiting for others' work. */
  uint64_t largest_free; /**< The largest free piece, in any stream's arena. */
  uint64_t would_serve;  /**< The bytes @c cause names: the piece, the pending free, the free bytes in
                              all, the limit that would do, or the bytes in use to free. */
} gpumem_out_of_memory_info_t;

/**
 * @brief The calling thread's last out-of-memory failure of a pool: where its memory was.
 *
 * Each failed allocation from a pool (::GPUMEM_ERROR_OUT_OF_MEMORY, through gpumem_alloc(), a
 * drop-in or a pool over another) keeps these figures for its thread, until the next one; a
 * thread where none failed yet gets ::GPUMEM_OOM_NONE and zeros. Thread safety: any thread; each
 * reads its own.
 *
 * @param[out] out_info Receives the figures, as far as its @c struct_size reaches.
 * @return ::GPUMEM_SUCCESS; ::GPUMEM_ERROR_INVALID_ARGUMENT if @p out_info is NULL or its
 *         @c struct_size is too small.
 * @since 0.4.0 (experimental)
 */
GPUMEM_NODISCARD GPUMEM_API gpumem_status_t gpumem_last_out_of_memory(gpumem_out_of_memory_info_t* out_info);

#ifdef __cplusplus
}
#endif

#endif /* GPUMEM_EXPERIMENTAL_H */
