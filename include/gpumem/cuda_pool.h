/**
 * @file cuda_pool.h
 * @brief Allocators over CUDA's stream-ordered memory pools (`CUmemoryPool`), and peer access
 *        to an allocator's memory.
 *
 * A CUDA-pool allocator allocates with `cuMemAllocFromPoolAsync` and frees with
 * `cuMemFreeAsync`, both on the stream of the call, from one CUDA memory pool: the device's
 * current or default pool, a pool the caller made, or a pool gpumem makes with the properties
 * given and destroys with the allocator (CuPy's `MemoryAsyncPool`, RMM's
 * `cuda_async_memory_resource`). The driver caches freed memory in the pool; the allocator adds
 * gpumem's statistics, hooks and ownership checks, and the calls here reach the pool's own
 * settings and counters. A gpumem pool (pool.h) may be built over it like over any allocator.
 *
 * gpumem_allocator_set_peer_access() is not tied to CUDA pools: it opens the memory of any
 * allocator that can share it to another device.
 */
#ifndef GPUMEM_CUDA_POOL_H
#define GPUMEM_CUDA_POOL_H

#include "allocator.h"

#ifdef __cplusplus
extern "C" {
#endif

/** @brief Where a CUDA-pool allocator's pool comes from (::gpumem_cuda_pool_params_t.source). @since 0.3.0 */
enum gpumem_cuda_pool_source {
  /** The device's current pool (`cuDeviceGetMemPool`) when the allocator is made; the default. */
  GPUMEM_CUDA_POOL_CURRENT = 0,
  /** The device's default pool (`cuDeviceGetDefaultMemPool`), which `cudaMallocAsync` uses unless changed. */
  GPUMEM_CUDA_POOL_DEFAULT = 1,
  /** The caller's pool, in @c pool; gpumem never destroys it. */
  GPUMEM_CUDA_POOL_EXTERNAL = 2,
  /** A new pool (`cuMemPoolCreate`) with @c max_size, owned by the allocator and destroyed with it. */
  GPUMEM_CUDA_POOL_NEW = 3
};

/**
 * @brief ::gpumem_cuda_pool_params_t.release_threshold that leaves a pool's threshold as it is;
 *        a pool gpumem creates then keeps all its memory (`UINT64_MAX`).
 */
#define GPUMEM_CUDA_POOL_KEEP_THRESHOLD (UINT64_MAX - 1)

/**
 * @brief How to build a CUDA-pool allocator. Initialize with ::GPUMEM_CUDA_POOL_PARAMS_INIT or
 *        gpumem_cuda_pool_params_init().
 *
 * The release threshold is how many bytes the pool keeps reserved, freed or not, when a stream,
 * event or context is synchronized; above it the driver returns memory to the system there. A
 * threshold of 0 (the driver's default for every pool) makes the next allocation after a
 * synchronize map memory again, which cost from 84 us to 2.2 ms per reuse on an H200; a pool
 * gpumem creates therefore keeps everything unless told otherwise. A pool that exists already
 * (::GPUMEM_CUDA_POOL_CURRENT, ::GPUMEM_CUDA_POOL_DEFAULT, ::GPUMEM_CUDA_POOL_EXTERNAL) is shared
 * with whoever else uses it, so its threshold is changed only when @c release_threshold is not
 * ::GPUMEM_CUDA_POOL_KEEP_THRESHOLD.
 * @since 0.3.0
 */
typedef struct gpumem_cuda_pool_params_s {
  size_t struct_size;         /**< `sizeof(gpumem_cuda_pool_params_t)`. */
  int32_t device;             /**< The device whose memory the pool holds. */
  uint32_t source;            /**< One of ::gpumem_cuda_pool_source. */
  gpumem_cuda_pool_t pool;    /**< The caller's pool with ::GPUMEM_CUDA_POOL_EXTERNAL; NULL with the others. */
  uint64_t max_size;          /**< With ::GPUMEM_CUDA_POOL_NEW only: the most bytes the pool may reserve
                                   (`CUmemPoolProps.maxSize`, CUDA 12.2 drivers and newer); 0 for
                                   `GPUMEM_GPU_MEMORY_LIMIT` where it is set (as for a gpumem pool
                                   of the device, read when the allocator is made), else the driver's
                                   own bound. */
  uint64_t release_threshold; /**< Bytes to keep reserved at a synchronize, set on the pool at creation;
                                   ::GPUMEM_CUDA_POOL_KEEP_THRESHOLD (the default) to leave it as it is,
                                   which for a new pool means keeping everything. */
  uint32_t flags;             /**< Reserved; 0. */
} gpumem_cuda_pool_params_t;

/** @brief Initializer for ::gpumem_cuda_pool_params_t: device 0's current pool, its threshold kept. */
#define GPUMEM_CUDA_POOL_PARAMS_INIT \
  { sizeof(gpumem_cuda_pool_params_t), 0, GPUMEM_CUDA_POOL_CURRENT, NULL, 0, GPUMEM_CUDA_POOL_KEEP_THRESHOLD, 0 }

/**
 * @brief What a CUDA pool holds, read from its attributes by gpumem_cuda_pool_get_info().
 *
 * The numbers are the pool's, not the allocator's: a pool shared with other code (the device's
 * current or default pool) counts their memory too.
 * @since 0.3.0
 */
typedef struct gpumem_cuda_pool_info_s {
  size_t struct_size; /**< `sizeof(gpumem_cuda_pool_info_t)`. */
  /** Bytes the pool holds from the driver, in use or cached (`CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT`). */
  uint64_t reserved;
  /** Highest @c reserved since the pool was made or gpumem_cuda_pool_reset_peaks(). */
  uint64_t reserved_high;
  /** Bytes of allocations not freed, as far as the driver has seen the frees (`CU_MEMPOOL_ATTR_USED_MEM_CURRENT`). */
  uint64_t used;
  /** Highest @c used since the pool was made or gpumem_cuda_pool_reset_peaks(). */
  uint64_t used_high;
  /** The pool's release threshold in bytes (`CU_MEMPOOL_ATTR_RELEASE_THRESHOLD`). */
  uint64_t release_threshold;
} gpumem_cuda_pool_info_t;

/**
 * @brief Fills CUDA-pool parameters with the defaults of ::GPUMEM_CUDA_POOL_PARAMS_INIT.
 * @param[out] params The parameters to fill.
 * @param[in] struct_size `sizeof(gpumem_cuda_pool_params_t)` as the caller knows it.
 * @retval GPUMEM_SUCCESS
 * @retval GPUMEM_ERROR_INVALID_ARGUMENT @p params is NULL or @p struct_size is too small.
 * @par Thread safety
 * Thread-safe: any thread, concurrently, including on the same handle.
 * @since 0.3.0
 */
GPUMEM_NODISCARD GPUMEM_API gpumem_status_t gpumem_cuda_pool_params_init(gpumem_cuda_pool_params_t* params,
                                                                         size_t struct_size);

/**
 * @brief Creates an allocator over a CUDA memory pool: `cuMemAllocFromPoolAsync` and
 *        `cuMemFreeAsync` on the stream of each gpumem_alloc() and gpumem_free().
 *
 * The allocator's device is @c params->device. A failure creates nothing: a new pool is destroyed
 * again, and an existing pool's threshold is left as it was.
 * @param[in] params The device, the source of the pool and its settings.
 * @param[out] out_allocator Receives the allocator; NULL on failure.
 * @retval GPUMEM_SUCCESS
 * @retval GPUMEM_ERROR_INVALID_ARGUMENT A pointer is NULL, @c struct_size is too small, @c source is
 *         unknown, @c pool is NULL with ::GPUMEM_CUDA_POOL_EXTERNAL or given with another source,
 *         @c max_size is given for a pool that exists already, @c flags is not 0, the external
 *         pool is not one that @c device can use, or `GPUMEM_GPU_MEMORY_LIMIT` cannot be read for a
 *         new pool.
 * @retval GPUMEM_ERROR_INVALID_DEVICE @c device is negative or not a present device.
 * @retval GPUMEM_ERROR_NOT_SUPPORTED The device has no memory pools, or @c max_size needs a newer driver.
 * @retval GPUMEM_ERROR_OUT_OF_MEMORY No memory to create the pool.
 * @retval GPUMEM_ERROR_NO_DRIVER
 * @retval GPUMEM_ERROR_NO_DEVICE
 * @retval GPUMEM_ERROR_DRIVER
 * @par Thread safety
 * Thread-safe: any thread, concurrently, including on the same handle.
 * @since 0.3.0
 */
GPUMEM_NODISCARD GPUMEM_API gpumem_status_t gpumem_allocator_create_cuda_pool(const gpumem_cuda_pool_params_t* params,
                                                                              gpumem_allocator_t** out_allocator);

/**
 * @brief The CUDA memory pool behind a CUDA-pool allocator, for calls gpumem does not wrap
 *        (`cudaMallocFromPoolAsync`, `cuMemPoolExportToShareableHandle`, ...).
 * @param[in] allocator An allocator from gpumem_allocator_create_cuda_pool().
 * @param[out] out_pool Receives the pool; NULL on failure. It lives as long as the allocator
 *             (longer for a pool gpumem did not create).
 * @retval GPUMEM_SUCCESS
 * @retval GPUMEM_ERROR_INVALID_ARGUMENT @p out_pool is NULL.
 * @retval GPUMEM_ERROR_INVALID_HANDLE @p allocator is not a live CUDA-pool allocator (a gpumem pool
 *         over one is not: pass its upstream).
 * @par Thread safety
 * Thread-safe: any thread, concurrently, including on the same handle.
 * @since 0.3.0
 */
GPUMEM_NODISCARD GPUMEM_API gpumem_status_t gpumem_cuda_pool_get(gpumem_allocator_t* allocator,
                                                                 gpumem_cuda_pool_t* out_pool);

/**
 * @brief Returns a CUDA pool's unused memory to the system until it holds about @p keep_bytes
 *        (`cuMemPoolTrimTo`). Memory freed on a stream whose work the host has not yet seen
 *        complete (by a synchronize) may stay.
 * @param[in] allocator An allocator from gpumem_allocator_create_cuda_pool().
 * @param[in] keep_bytes Bytes the pool may keep reserved; 0 to release all it can.
 * @retval GPUMEM_SUCCESS
 * @retval GPUMEM_ERROR_INVALID_HANDLE @p allocator is not a live CUDA-pool allocator.
 * @retval GPUMEM_ERROR_NO_DRIVER The driver is shutting down.
 * @retval GPUMEM_ERROR_DRIVER
 * @par Thread safety
 * Thread-safe: any thread, concurrently, including on the same handle.
 * @since 0.3.0
 */
GPUMEM_NODISCARD GPUMEM_API gpumem_status_t gpumem_cuda_pool_trim(gpumem_allocator_t* allocator, uint64_t keep_bytes);

/**
 * @brief Sets a CUDA pool's release threshold: the bytes it keeps reserved at a synchronize.
 *        For a pool shared with other code, it changes the pool for them too.
 * @param[in] allocator An allocator from gpumem_allocator_create_cuda_pool().
 * @param[in] bytes The threshold; `UINT64_MAX` to keep everything, 0 to release all unused memory
 *            at each synchronize.
 * @retval GPUMEM_SUCCESS
 * @retval GPUMEM_ERROR_INVALID_HANDLE @p allocator is not a live CUDA-pool allocator.
 * @retval GPUMEM_ERROR_NO_DRIVER The driver is shutting down.
 * @retval GPUMEM_ERROR_DRIVER
 * @par Thread safety
 * Thread-safe: any thread, concurrently, including on the same handle.
 * @since 0.3.0
 */
GPUMEM_NODISCARD GPUMEM_API gpumem_status_t gpumem_cuda_pool_set_release_threshold(gpumem_allocator_t* allocator,
                                                                                   uint64_t bytes);

/**
 * @brief What a CUDA pool holds, from its attributes.
 * @param[in] allocator An allocator from gpumem_allocator_create_cuda_pool().
 * @param[in,out] out_info @c struct_size set by the caller; the rest is filled in
 *                (zeroed on failure as far as @c struct_size reaches, @c struct_size kept).
 * @retval GPUMEM_SUCCESS
 * @retval GPUMEM_ERROR_INVALID_ARGUMENT @p out_info is NULL or its @c struct_size is not valid.
 * @retval GPUMEM_ERROR_INVALID_HANDLE @p allocator is not a live CUDA-pool allocator.
 * @retval GPUMEM_ERROR_NO_DRIVER The driver is shutting down.
 * @retval GPUMEM_ERROR_DRIVER
 * @par Thread safety
 * Thread-safe: any thread, concurrently, including on the same handle.
 * @since 0.3.0
 */
GPUMEM_NODISCARD GPUMEM_API gpumem_status_t gpumem_cuda_pool_get_info(gpumem_allocator_t* allocator,
                                                                      gpumem_cuda_pool_info_t* out_info);

/**
 * @brief Restarts a CUDA pool's high watermarks (@c reserved_high and @c used_high of
 *        ::gpumem_cuda_pool_info_t) from now. The allocator's own statistics are reset by
 *        gpumem_allocator_reset_peaks().
 * @param[in] allocator An allocator from gpumem_allocator_create_cuda_pool().
 * @retval GPUMEM_SUCCESS
 * @retval GPUMEM_ERROR_INVALID_HANDLE @p allocator is not a live CUDA-pool allocator.
 * @retval GPUMEM_ERROR_NO_DRIVER The driver is shutting down.
 * @retval GPUMEM_ERROR_DRIVER
 * @par Thread safety
 * Thread-safe: any thread, concurrently, including on the same handle.
 * @since 0.3.0
 */
GPUMEM_NODISCARD GPUMEM_API gpumem_status_t gpumem_cuda_pool_reset_peaks(gpumem_allocator_t* allocator);

/** @name Peer access (any allocator) */
/** @{ */

/** @brief What another device may do with an allocator's memory (gpumem_allocator_set_peer_access()). @since 0.3.0 */
enum gpumem_peer_access {
  GPUMEM_PEER_ACCESS_NONE = 0,      /**< None: its kernels fault on the memory; gpumem's copies still work. */
  GPUMEM_PEER_ACCESS_READ_WRITE = 1 /**< Its kernels and copies read and write the memory directly. */
};

/**
 * @brief Lets another device's kernels reach an allocator's memory, or stops them.
 *
 * What is opened depends on the kind:
 * - a CUDA-pool allocator sets the access of the whole pool (`cuMemPoolSetAccess`), for the
 *   memory it holds and all it hands out later; ::GPUMEM_PEER_ACCESS_NONE takes it away again;
 * - a device allocator (gpumem_allocator_create_device()) enables peer access between the two
 *   devices' primary contexts, both ways, as peer copies do (`cuCtxEnablePeerAccess`). That
 *   covers every `cuMemAlloc` allocation of the contexts, not this allocator's alone, so it is
 *   never taken away: ::GPUMEM_PEER_ACCESS_NONE gives ::GPUMEM_ERROR_NOT_SUPPORTED;
 * - a managed allocator's memory is reachable from every device already: enabling succeeds and
 *   changes nothing, ::GPUMEM_PEER_ACCESS_NONE gives ::GPUMEM_ERROR_NOT_SUPPORTED;
 * - a VM allocator (gpumem_allocator_create_vm()) sets the access of everything it has mapped
 *   (`cuMemSetAccess`) and of all it maps later; ::GPUMEM_PEER_ACCESS_NONE takes it away again;
 * - a gpumem pool passes the call to its upstream;
 * - other kinds (host memory, pinned host memory, a caller's functions, a stream-ordered device
 *   allocator) give ::GPUMEM_ERROR_NOT_SUPPORTED.
 * @param[in] allocator The allocator.
 * @param[in] peer_device The device to open the memory to; not the allocator's own.
 * @param[in] access One of ::gpumem_peer_access.
 * @retval GPUMEM_SUCCESS
 * @retval GPUMEM_ERROR_INVALID_ARGUMENT @p access is unknown, or @p peer_device is the allocator's own device.
 * @retval GPUMEM_ERROR_INVALID_HANDLE @p allocator is not a live allocator.
 * @retval GPUMEM_ERROR_INVALID_DEVICE @p peer_device is negative, or (for the kinds that share
 *         memory) not a present device.
 * @retval GPUMEM_ERROR_NOT_SUPPORTED The kind cannot share its memory this way, cannot take
 *         access away, or the two devices have no peer path (`cuDeviceCanAccessPeer`).
 * @retval GPUMEM_ERROR_NO_DRIVER
 * @retval GPUMEM_ERROR_NO_DEVICE
 * @retval GPUMEM_ERROR_DRIVER
 * @par Thread safety
 * Thread-safe: any thread, concurrently, including on the same handle.
 * @since 0.3.0
 */
GPUMEM_NODISCARD GPUMEM_API gpumem_status_t gpumem_allocator_set_peer_access(gpumem_allocator_t* allocator,
                                                                             int32_t peer_device, uint32_t access);

/** @} */

#ifdef __cplusplus
}
#endif

#endif /* GPUMEM_CUDA_POOL_H */
