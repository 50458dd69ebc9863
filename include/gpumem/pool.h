/**
 * @file pool.h
 * @brief The caching pool: an allocator on top of another that keeps freed memory for reuse.
 *
 * A pool rounds sizes up to 512 bytes and takes each new block from its upstream at exactly that
 * size. Freed blocks stay in the pool, in one arena per stream (the per-thread default stream has
 * one per thread), binned by size; an allocation takes the best-fitting size class, splits a
 * larger block and keeps the remainder, and a free merges with free neighbours from the same
 * upstream block. When the upstream or the limit says no, the pool returns its cached whole blocks
 * to the upstream and retries, then asks the reclaim callbacks (gpumem_reclaim_add()) to drop
 * garbage and retries again, and only then fails with ::GPUMEM_ERROR_OUT_OF_MEMORY.
 *
 * The pool is an allocator: gpumem_alloc(), gpumem_free(), statistics, hooks and destroy work on
 * it as on any other.
 */
#ifndef GPUMEM_POOL_H
#define GPUMEM_POOL_H

#include "allocator.h"

#ifdef __cplusplus
extern "C" {
#endif

/**
 * @brief How to build a pool. Initialize with ::GPUMEM_POOL_PARAMS_INIT or gpumem_pool_params_init().
 *
 * With neither limit given, the environment variable `GPUMEM_GPU_MEMORY_LIMIT` gives one for
 * pools over device memory: bytes (`1073741824`), with a unit (`8GiB`, `512MB`: KB/MB/GB/TB are
 * powers of 1000, KiB/MiB/GiB/TiB of 1024), or a percentage of the device's memory (`50%`).
 * @since 0.1.0
 */
typedef struct gpumem_pool_params_s {
  size_t struct_size;           /**< `sizeof(gpumem_pool_params_t)`. */
  gpumem_allocator_t* upstream; /**< Where blocks come from; required. The pool keeps it busy while it lives. */
  uint64_t limit;               /**< Most bytes the pool may hold from its upstream; 0 for none. */
  double limit_fraction;        /**< Or the limit as a fraction (0, 1] of the device's memory; 0 for none. */
} gpumem_pool_params_t;

/** @brief Initializer for ::gpumem_pool_params_t: no upstream yet, no limit. */
#define GPUMEM_POOL_PARAMS_INIT \
  { sizeof(gpumem_pool_params_t), NULL, 0, 0.0 }

/** @brief What a pool holds, from gpumem_pool_get_info(). @since 0.1.0 */
typedef struct gpumem_pool_info_s {
  size_t struct_size;        /**< `sizeof(gpumem_pool_info_t)`. */
  uint64_t used_bytes;       /**< Bytes handed out and not freed (rounded sizes). */
  uint64_t free_bytes;       /**< Bytes cached, free for reuse. */
  uint64_t total_bytes;      /**< Bytes held from the upstream: used plus free plus pending, and any being
                                  moved between streams or mapped at that moment. */
  uint64_t free_block_count; /**< Free blocks in all arenas. */
  uint64_t limit;            /**< The limit in bytes; 0 for none. */
  uint32_t arena_count;      /**< Streams with an arena: those whose arena holds memory (in use, cached or
                                  pending), and briefly one whose last block another stream took. */
  uint64_t pending_bytes;    /**< Bytes freed while other streams' work may still use them, handed out
                                  again once that work is done (@since 0.3.0). */
  uint64_t address_bytes;    /**< Bytes of addresses the pool's segments span: @c total_bytes, plus
                                  over an upstream with address ranges (gpumem_allocator_create_vm())
                                  the addresses with nothing mapped (@since 0.4.0). */
} gpumem_pool_info_t;

/** @brief States of a pool's blocks in a snapshot. @since 0.3.0 */
enum gpumem_block_state {
  GPUMEM_BLOCK_FREE = 0,    /**< Cached, free for reuse. */
  GPUMEM_BLOCK_IN_USE = 1,  /**< Handed out and not freed. */
  GPUMEM_BLOCK_PENDING = 2, /**< Freed, waiting for other streams' work before reuse. */
  GPUMEM_BLOCK_UNMAPPED = 3 /**< Addresses of a segment with no memory mapped (@since 0.4.0). */
};

/** @brief One block of a pool, from gpumem_pool_snapshot(). @since 0.3.0 */
typedef struct gpumem_block_info_s {
  size_t struct_size;     /**< `sizeof(gpumem_block_info_t)` of the library that calls. */
  void* segment;          /**< The upstream block (segment) it lies in. */
  size_t segment_size;    /**< That segment's bytes. */
  void* address;          /**< The block's address. */
  size_t size;            /**< Its bytes, rounded. */
  size_t requested;       /**< Bytes asked for, for a block in use; else 0. */
  uint32_t state;         /**< One ::gpumem_block_state. */
  gpumem_stream_t stream; /**< The stream it was handed out on (in use), or of its arena. */
} gpumem_block_info_t;

/**
 * @brief Told each block of a snapshot, in order of segment and address. Runs on the thread of
 *        gpumem_pool_snapshot(), with no gpumem lock held; it must return normally.
 */
typedef void (*gpumem_block_fn)(const gpumem_block_info_t* block, void* user_data);

/** @brief Flags of gpumem_pool_release(). @since 0.1.0 */
enum gpumem_pool_release_flags {
  GPUMEM_POOL_RELEASE_ALL_STREAMS = 0x1 /**< Release the free blocks of every arena, not one stream's. */
};

/**
 * @brief Called when a pool is out of memory, so a managed runtime can drop garbage it holds
 *        (CuPy's `gc.collect()`, Julia's `GC.gc()`); the pool retries once all have run.
 *
 * Runs on the allocating thread with no gpumem lock held; may free gpumem memory.
 * @param[in] device The pool's device, or -1 for host memory.
 * @param[in] size The bytes the failing allocation asked for.
 * @param[in] user_data As given to gpumem_reclaim_add().
 */
typedef void (*gpumem_reclaim_fn)(int32_t device, size_t size, void* user_data);

/**
 * @brief Fills pool parameters with the defaults of ::GPUMEM_POOL_PARAMS_INIT.
 * @param[out] params The parameters to fill.
 * @param[in] struct_size `sizeof(gpumem_pool_params_t)` as the caller knows it.
 * @retval GPUMEM_SUCCESS
 * @retval GPUMEM_ERROR_INVALID_ARGUMENT @p params is NULL or @p struct_size is too small.
 * @par Thread safety
 * Thread-safe: any thread, concurrently, including on the same handle.
 * @since 0.1.0
 */
GPUMEM_NODISCARD GPUMEM_API gpumem_status_t gpumem_pool_params_init(gpumem_pool_params_t* params, size_t struct_size);

/**
 * @brief Creates a pool on an upstream allocator. Its device is the upstream's.
 * @param[in] params The upstream and the limit.
 * @param[out] out_pool Receives the pool; NULL on failure.
 * @retval GPUMEM_SUCCESS
 * @retval GPUMEM_ERROR_INVALID_ARGUMENT A pointer is NULL, @c struct_size is too small, both
 *         limits are given, the fraction is outside (0, 1] or the upstream is host memory, or
 *         `GPUMEM_GPU_MEMORY_LIMIT` cannot be read (the detail quotes it).
 * @retval GPUMEM_ERROR_INVALID_HANDLE The upstream is not a live allocator.
 * @retval GPUMEM_ERROR_NO_DRIVER A limit fraction, or a percentage in `GPUMEM_GPU_MEMORY_LIMIT`, needs
 *         the device's memory size.
 * @par Thread safety
 * Thread-safe: any thread, concurrently, including on the same handle.
 * @since 0.1.0
 */
GPUMEM_NODISCARD GPUMEM_API gpumem_status_t gpumem_pool_create(const gpumem_pool_params_t* params,
                                                               gpumem_allocator_t** out_pool);

/**
 * @brief The pool of a device, over its device allocator (CuPy's `MemoryPool` for that device):
 *        created on first use, lives as long as the process, and is the device's default allocator
 *        until another is set.
 * @param[in] device Device index.
 * @param[out] out_pool Receives the pool; NULL on failure.
 * @retval GPUMEM_SUCCESS
 * @retval GPUMEM_ERROR_INVALID_ARGUMENT @p out_pool is NULL, or `GPUMEM_GPU_MEMORY_LIMIT` cannot be read.
 * @retval GPUMEM_ERROR_NO_DRIVER
 * @retval GPUMEM_ERROR_NO_DEVICE
 * @retval GPUMEM_ERROR_INVALID_DEVICE
 * @par Thread safety
 * Thread-safe: any thread, concurrently, including on the same handle.
 * @since 0.1.0
 */
GPUMEM_NODISCARD GPUMEM_API gpumem_status_t gpumem_pool_get_device(int32_t device, gpumem_allocator_t** out_pool);

/**
 * @brief Returns cached memory to the upstream (CuPy's `free_all_blocks`): the free blocks that
 *        are whole upstream blocks, of one stream's arena or of all. Split blocks stay. Frees
 *        pending on other streams' work are settled first if that work is done; the host does not
 *        wait for work still running.
 * @param[in] pool The pool.
 * @param[in] stream The stream whose arena to release; ignored with ::GPUMEM_POOL_RELEASE_ALL_STREAMS.
 * @param[in] flags 0 or ::GPUMEM_POOL_RELEASE_ALL_STREAMS.
 * @retval GPUMEM_SUCCESS
 * @retval GPUMEM_ERROR_INVALID_ARGUMENT @p flags has an unknown bit.
 * @retval GPUMEM_ERROR_INVALID_HANDLE @p pool is not a live pool.
 * @retval GPUMEM_ERROR_DRIVER The upstream failed to free a block, which stays cached (a caller's
 *         upstream may fail with its own status instead), or an event of a pending free could not
 *         be queried (its memory stays pending); the other blocks are still returned.
 * @retval GPUMEM_ERROR_OUT_OF_MEMORY No host memory to list the blocks; nothing is returned.
 * @par Thread safety
 * Thread-safe: any thread, concurrently, including on the same handle.
 * @since 0.1.0
 */
GPUMEM_NODISCARD GPUMEM_API gpumem_status_t gpumem_pool_release(gpumem_allocator_t* pool, gpumem_stream_t stream,
                                                                uint32_t flags);

/**
 * @brief What a pool holds.
 * @param[in] pool The pool.
 * @param[in,out] out_info @c struct_size set by the caller; the rest is filled in
 *                (zeroed on failure as far as @c struct_size reaches, @c struct_size kept).
 *                One consistent picture, even while other threads allocate and free: used plus
 *                free plus pending never exceeds total (memory being taken from or returned to
 *                the upstream is counted in total only).
 * @retval GPUMEM_SUCCESS
 * @retval GPUMEM_ERROR_INVALID_ARGUMENT @p out_info is NULL or its @c struct_size is not valid.
 * @retval GPUMEM_ERROR_INVALID_HANDLE @p pool is not a live pool.
 * @par Thread safety
 * Thread-safe: any thread, concurrently, including on the same handle.
 * @since 0.1.0
 */
GPUMEM_NODISCARD GPUMEM_API gpumem_status_t gpumem_pool_get_info(gpumem_allocator_t* pool,
                                                                 gpumem_pool_info_t* out_info);

/**
 * @brief What a pool's growth has cost since it was made: memory taken from its upstream, memory
 *        moved by page reclaim, and the time spent in those calls. @since 0.4.0
 */
typedef struct gpumem_pool_growth_info_s {
  size_t struct_size;       /**< `sizeof(gpumem_pool_growth_info_t)`. */
  uint64_t mapped_bytes;    /**< Bytes taken from the upstream: blocks, or over ranges memory mapped anew. */
  uint64_t map_calls;       /**< Upstream allocations or maps behind them. */
  uint64_t moved_bytes;     /**< Over ranges: bytes page reclaim moved from free memory to where it was needed. */
  uint64_t move_calls;      /**< The moves behind them (each one or more whole units). */
  uint64_t returned_bytes;  /**< Bytes given back to the upstream (released, unmapped, out of memory). */
  uint64_t fences_recorded; /**< Events page reclaim recorded on arenas' streams. */
  uint64_t driver_ns;       /**< Nanoseconds spent in those upstream calls and in recording and polling the events. */
} gpumem_pool_growth_info_t;

/**
 * @brief What a pool's growth has cost since it was made (::gpumem_pool_growth_info_t): how much
 *        it mapped anew and moved, and the time those calls took, so a training loop can read
 *        the driver time of each step as the difference of two calls.
 * @param[in] pool The pool.
 * @param[in,out] out_info @c struct_size set by the caller; the rest is filled in (zeroed on
 *                failure as far as @c struct_size reaches, @c struct_size kept).
 * @retval GPUMEM_SUCCESS
 * @retval GPUMEM_ERROR_INVALID_ARGUMENT @p out_info is NULL or its @c struct_size is not valid.
 * @retval GPUMEM_ERROR_INVALID_HANDLE @p pool is not a live pool.
 * @par Thread safety
 * Thread-safe: any thread, concurrently, including on the same handle.
 * @since 0.4.0
 */
GPUMEM_NODISCARD GPUMEM_API gpumem_status_t gpumem_pool_get_growth_info(gpumem_allocator_t* pool,
                                                                        gpumem_pool_growth_info_t* out_info);

/**
 * @brief Lists every block a pool holds, as one consistent picture: each segment (upstream
 *        block) and the blocks it is split into, with state and stream.
 *
 * The picture is taken under the pool's locks, then @p fn is called for each block without them.
 * @param[in] pool The pool.
 * @param[in] fn Called once for each block; not NULL.
 * @param[in] user_data Passed to @p fn.
 * @retval GPUMEM_SUCCESS
 * @retval GPUMEM_ERROR_INVALID_ARGUMENT @p fn is NULL.
 * @retval GPUMEM_ERROR_INVALID_HANDLE @p pool is not a live pool.
 * @retval GPUMEM_ERROR_OUT_OF_MEMORY No host memory for the picture.
 * @par Thread safety
 * Thread-safe: any thread, concurrently, including on the same handle.
 * @since 0.3.0
 */
GPUMEM_NODISCARD GPUMEM_API gpumem_status_t gpumem_pool_snapshot(gpumem_allocator_t* pool, gpumem_block_fn fn,
                                                                 void* user_data);

/**
 * @brief Writes a pool's snapshot (gpumem_pool_snapshot()) as JSON to a file: its totals, then
 *        its segments with their blocks (docs/pool.md says the shape).
 * @param[in] pool The pool.
 * @param[in] path The file, created or replaced.
 * @retval GPUMEM_SUCCESS
 * @retval GPUMEM_ERROR_INVALID_ARGUMENT @p path is NULL.
 * @retval GPUMEM_ERROR_INVALID_HANDLE @p pool is not a live pool.
 * @retval GPUMEM_ERROR_IO The file cannot be written.
 * @retval GPUMEM_ERROR_OUT_OF_MEMORY
 * @par Thread safety
 * Thread-safe: any thread, concurrently, including on the same handle.
 * @since 0.3.0
 */
GPUMEM_NODISCARD GPUMEM_API gpumem_status_t gpumem_pool_snapshot_json(gpumem_allocator_t* pool, const char* path);

/**
 * @brief Sets a pool's limit in bytes, overriding `GPUMEM_GPU_MEMORY_LIMIT`. A limit below what
 *        the pool holds is allowed: allocations then reuse cached memory or fail.
 * @param[in] pool The pool.
 * @param[in] limit Bytes; 0 for no limit.
 * @retval GPUMEM_SUCCESS
 * @retval GPUMEM_ERROR_INVALID_HANDLE @p pool is not a live pool.
 * @par Thread safety
 * Thread-safe: any thread, concurrently, including on the same handle.
 * @since 0.1.0
 */
GPUMEM_NODISCARD GPUMEM_API gpumem_status_t gpumem_pool_set_limit(gpumem_allocator_t* pool, uint64_t limit);

/**
 * @brief Sets a pool's soft limit in bytes: before the pool grows past it, it gives back what it
 *        caches (its free whole blocks, or over ranges its free units, on every stream), so that
 *        what it holds follows what is in use; it never refuses an allocation for it.
 * @param[in] pool The pool.
 * @param[in] soft_limit Bytes; 0 for none (the default).
 * @retval GPUMEM_SUCCESS
 * @retval GPUMEM_ERROR_INVALID_ARGUMENT @p soft_limit is above the pool's (nonzero) limit.
 * @retval GPUMEM_ERROR_INVALID_HANDLE @p pool is not a live pool.
 * @par Thread safety
 * Thread-safe: any thread, concurrently, including on the same handle.
 * @since 0.4.0
 */
GPUMEM_NODISCARD GPUMEM_API gpumem_status_t gpumem_pool_set_soft_limit(gpumem_allocator_t* pool, uint64_t soft_limit);

/**
 * @brief Sets a pool's limit as a fraction of its device's memory.
 * @param[in] pool A pool over device or managed memory.
 * @param[in] fraction In (0, 1].
 * @retval GPUMEM_SUCCESS
 * @retval GPUMEM_ERROR_INVALID_ARGUMENT @p fraction is outside (0, 1], or the pool holds host memory.
 * @retval GPUMEM_ERROR_INVALID_HANDLE @p pool is not a live pool.
 * @retval GPUMEM_ERROR_NO_DRIVER
 * @par Thread safety
 * Thread-safe: any thread, concurrently, including on the same handle.
 * @since 0.1.0
 */
GPUMEM_NODISCARD GPUMEM_API gpumem_status_t gpumem_pool_set_limit_fraction(gpumem_allocator_t* pool, double fraction);

/**
 * @brief Whether a pool lends one stream's free memory to an allocation on another stream whose
 *        own arena has none that fits, rather than growing. @since 0.3.0
 */
enum gpumem_stream_reuse {
  GPUMEM_STREAM_REUSE_NEVER = 0,    /**< Never: each stream keeps its memory (CuPy's pools). */
  GPUMEM_STREAM_REUSE_FENCE = 1,    /**< The allocating stream waits on an event recorded on the
                                         lending stream; the host does not wait. The default. */
  GPUMEM_STREAM_REUSE_HOST_WAIT = 2 /**< The host waits for that event before the memory is handed out. */
};

/**
 * @brief Sets whether a pool lends free memory across streams (::gpumem_stream_reuse).
 *
 * A pool over memory that no stream's work touches (plain host memory, or a caller's functions)
 * never lends it: it has no events to order streams by, and the setting is kept for nothing.
 * The per-thread default stream neither lends nor borrows: it names another stream on each thread.
 * @param[in] pool The pool.
 * @param[in] reuse One of ::gpumem_stream_reuse.
 * @retval GPUMEM_SUCCESS
 * @retval GPUMEM_ERROR_INVALID_ARGUMENT @p reuse is not one of ::gpumem_stream_reuse.
 * @retval GPUMEM_ERROR_INVALID_HANDLE @p pool is not a live pool.
 * @par Thread safety
 * Thread-safe: any thread, concurrently, including on the same handle.
 * @since 0.3.0
 */
GPUMEM_NODISCARD GPUMEM_API gpumem_status_t gpumem_pool_set_stream_reuse(gpumem_allocator_t* pool, int32_t reuse);

/**
 * @brief Sets whether a pool over address ranges reclaims pages: before it maps new memory, it
 *        moves the whole map units that lie inside free memory of any stream's arena, once the GPU
 *        is done with them, to where the memory is needed.
 *
 * On by default. The GPU is known to be done with freed memory by events the pool records on the
 * arena's stream and polls; it never waits for them, so memory still in use by queued work stays
 * where it is and growth maps new memory instead. A pool over an upstream without ranges (any but
 * a VM allocator or a caller's functions with @c reserve) keeps the setting for nothing.
 * @param[in] pool The pool.
 * @param[in] enable 1 to reclaim (the default), 0 not to.
 * @retval GPUMEM_SUCCESS
 * @retval GPUMEM_ERROR_INVALID_ARGUMENT @p enable is neither 0 nor 1.
 * @retval GPUMEM_ERROR_INVALID_HANDLE @p pool is not a live pool.
 * @par Thread safety
 * Thread-safe: any thread, concurrently, including on the same handle.
 * @since 0.4.0
 */
GPUMEM_NODISCARD GPUMEM_API gpumem_status_t gpumem_pool_set_page_reclaim(gpumem_allocator_t* pool, int32_t enable);

/**
 * @brief Sets how the device pools (gpumem_pool_get_device(), and so `gpumem_alloc(NULL, ...)` and
 *        the drop-ins) are built, in the syntax of the `GPUMEM_POOL_CONF` environment variable,
 *        whose keys it overrides one by one.
 *
 * @p config is comma-separated `key:value` pairs (see docs/pool.md, "The device pools"):
 * `backend` (`vm`: over virtual memory, `classic`: over gpumem_allocator_create_device(), `auto`:
 * `vm` where the device supports it, the default), `map_unit` and `range_size` (sizes such as
 * `2MiB`, for the VM backend; by default the device's granularity and its memory), and
 * `page_reclaim` (`true`, the default, or `false`), and `soft_limit` (a size: before the pool grows
 * past it, it gives back its cache, as gpumem_pool_set_soft_limit(); none by default). It applies to device pools made
 * from now on, so it must come before the first allocation through a device pool.
 * @param[in] config The keys to set; NULL or "" sets none (the environment's stand).
 * @retval GPUMEM_SUCCESS
 * @retval GPUMEM_ERROR_INVALID_ARGUMENT @p config has an unknown key or a value that key does not take.
 * @retval GPUMEM_ERROR_BUSY A device pool is made already.
 * @par Thread safety
 * Thread-safe: any thread, concurrently, including on the same handle.
 * @since 0.4.0
 */
GPUMEM_NODISCARD GPUMEM_API gpumem_status_t gpumem_pool_set_device_config(const char* config);

/**
 * @brief Marks a live allocation of a pool as used on another stream too (PyTorch's
 *        `record_stream`): when it is freed, the pool hands it out again only once the work queued
 *        on that stream until the free has ended, checked by an event, with no host wait.
 *
 * A free on a stream other than the allocation's is fenced the same way without this call. On a
 * pool over memory no stream's work touches (plain host memory, a caller's functions), only
 * @p ptr is checked.
 * @param[in] pool The pool that handed out @p ptr, or a tenant of a pool (tenant.h, since 0.4.0).
 * @param[in] ptr A live allocation of @p pool.
 * @param[in] stream The other stream; not ::GPUMEM_STREAM_PER_THREAD, which names another stream on
 *            each thread.
 * @retval GPUMEM_SUCCESS
 * @retval GPUMEM_ERROR_INVALID_ARGUMENT @p stream is ::GPUMEM_STREAM_PER_THREAD.
 * @retval GPUMEM_ERROR_NOT_OWNED @p ptr is not a live allocation of @p pool.
 * @retval GPUMEM_ERROR_INVALID_HANDLE @p pool is not a live pool or tenant of one.
 * @par Thread safety
 * Thread-safe: any thread, concurrently, including on the same handle.
 * @since 0.3.0
 */
GPUMEM_NODISCARD GPUMEM_API gpumem_status_t gpumem_pool_record_stream(gpumem_allocator_t* pool, void* ptr,
                                                                      gpumem_stream_t stream);

/**
 * @brief Registers a reclaim callback, run by every pool that runs out of memory.
 * @param[in] reclaim The callback; not NULL.
 * @param[in] user_data Passed to it.
 * @param[out] out_id Receives an id for gpumem_reclaim_remove(); 0 on failure.
 * @retval GPUMEM_SUCCESS
 * @retval GPUMEM_ERROR_INVALID_ARGUMENT @p reclaim or @p out_id is NULL.
 * @par Thread safety
 * Thread-safe: any thread, concurrently, including on the same handle.
 * @since 0.1.0
 */
GPUMEM_NODISCARD GPUMEM_API gpumem_status_t gpumem_reclaim_add(gpumem_reclaim_fn reclaim, void* user_data,
                                                               uint64_t* out_id);

/**
 * @brief Removes a reclaim callback. Returns once no call of it is running on another thread,
 *        after which it never runs again: its @c user_data may then be released. Called from
 *        inside the callback itself, it waits for the other threads' calls only.
 * @param[in] id What gpumem_reclaim_add() gave.
 * @retval GPUMEM_SUCCESS
 * @retval GPUMEM_ERROR_INVALID_HANDLE No callback has that id (removed already, or never added).
 * @par Thread safety
 * Thread-safe: any thread, concurrently, including on the same handle.
 * @since 0.1.0
 */
GPUMEM_NODISCARD GPUMEM_API gpumem_status_t gpumem_reclaim_remove(uint64_t id);

#ifdef __cplusplus
}
#endif

#endif /* GPUMEM_POOL_H */
