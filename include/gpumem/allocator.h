/**
 * @file allocator.h
 * @brief Allocators: one handle type for everything that allocates, the defaults, statistics
 *        and hooks.
 *
 * An allocator hands out memory with gpumem_alloc() and takes it back with gpumem_free(). The
 * raw allocators go to the driver (or, for host memory, to the C library) once per call; a pool
 * (pool.h) caches on top of any of them; a caller can supply an allocator as C functions.
 * Every allocator keeps statistics and runs hooks, whatever its kind.
 *
 * A NULL allocator means the current default: the calling thread's override if it set one
 * (gpumem_allocator_set_thread()), else the process default for the current device
 * (gpumem_allocator_set_default()), which is the device's pool (gpumem_pool_get_device()) until
 * another is set. The current device is that of the CUDA context current on the thread, else 0.
 */
#ifndef GPUMEM_ALLOCATOR_H
#define GPUMEM_ALLOCATOR_H

#include "core.h"
#include "memory.h"

#ifdef __cplusplus
extern "C" {
#endif

/** @brief Anything that allocates: a raw allocator, a pool, or one supplied by the caller. */
typedef struct gpumem_allocator_s gpumem_allocator_t;

/**
 * @brief Allocates with a caller-supplied allocator.
 * @param[in] context The caller's context, as given in ::gpumem_allocator_functions_t.
 * @param[in] size Bytes; never 0.
 * @param[in] device The allocator's device (-1 for host memory).
 * @param[in] stream The stream passed to gpumem_alloc().
 * @param[out] out_ptr Receives the memory.
 * @return ::GPUMEM_SUCCESS, ::GPUMEM_ERROR_OUT_OF_MEMORY (a pool above then releases cached
 *         memory and retries), or another status, which reaches the caller of gpumem_alloc().
 */
typedef gpumem_status_t (*gpumem_alloc_fn)(void* context, size_t size, int32_t device, gpumem_stream_t stream,
                                           void** out_ptr);

/**
 * @brief Frees memory of a caller-supplied allocator.
 * @param[in] context The caller's context.
 * @param[in] ptr What the matching #gpumem_alloc_fn returned.
 * @param[in] size The size it was asked for.
 * @param[in] device The allocator's device (-1 for host memory).
 * @param[in] stream The stream passed to gpumem_free().
 * @return ::GPUMEM_SUCCESS or the status to report.
 */
typedef gpumem_status_t (*gpumem_free_fn)(void* context, void* ptr, size_t size, int32_t device,
                                          gpumem_stream_t stream);

/** @brief Releases a caller-supplied allocator's context when the allocator is destroyed. */
typedef void (*gpumem_context_destroy_fn)(void* context);

/**
 * @brief Reserves a range of addresses with nothing mapped, for a caller-supplied allocator whose
 *        memory a pool maps on demand (see ::gpumem_allocator_functions_t).
 * @param[in] context The caller's context.
 * @param[in] size Bytes of addresses; a multiple of the allocator's @c map_unit.
 * @param[in] device The allocator's device (-1 for host memory).
 * @param[out] out_ptr Receives the range's start, aligned to @c map_unit. A range that is NULL,
 *                     misaligned, wraps or ends at 2^64 is refused (::GPUMEM_ERROR_INTERNAL for the
 *                     caller of gpumem_alloc()) and given back with @c unreserve; one that overlaps
 *                     a range still reserved is refused and not given back.
 * @return ::GPUMEM_SUCCESS, ::GPUMEM_ERROR_OUT_OF_MEMORY when no addresses are left, or another
 *         status, which reaches the caller of gpumem_alloc().
 * @since 0.4.0
 */
typedef gpumem_status_t (*gpumem_reserve_fn)(void* context, size_t size, int32_t device, void** out_ptr);

/**
 * @brief Maps memory into, or unmaps it from, part of a range that #gpumem_reserve_fn gave.
 * @param[in] context The caller's context.
 * @param[in] ptr Start of the part, a multiple of @c map_unit from the range's start.
 * @param[in] size Bytes; a multiple of @c map_unit, inside the range.
 * @param[in] device The allocator's device (-1 for host memory).
 * @return ::GPUMEM_SUCCESS; a map may return ::GPUMEM_ERROR_OUT_OF_MEMORY (a pool then returns
 *         cached memory and retries), having mapped nothing; another status reaches the caller.
 * @since 0.4.0
 */
typedef gpumem_status_t (*gpumem_map_fn)(void* context, void* ptr, size_t size, int32_t device);

/**
 * @brief An allocator given as C functions (CuPy's `CFunctionAllocator`, with a stream).
 * @since 0.1.0
 */
typedef struct gpumem_allocator_functions_s {
  size_t struct_size;                /**< `sizeof(gpumem_allocator_functions_t)`. */
  void* context;                     /**< Passed to every function; may be NULL. */
  int32_t device;                    /**< Device the memory is on, or -1 for host memory. */
  gpumem_alloc_fn alloc;             /**< Required. */
  gpumem_free_fn free;               /**< Required. */
  gpumem_context_destroy_fn destroy; /**< Optional; called once, from gpumem_allocator_destroy(). */
  /** Optional, with the four below: address ranges a pool maps memory into as it grows, so its
      segments grow in place (@since 0.4.0). All of @c reserve, @c unreserve, @c map and @c unmap,
      or none. */
  gpumem_reserve_fn reserve;
  gpumem_map_fn unreserve; /**< Releases a whole range from @c reserve, with nothing mapped in it. */
  gpumem_map_fn map;       /**< Maps memory into part of a range. */
  gpumem_map_fn unmap;     /**< Unmaps part of a range that @c map mapped, once work queued on it
                                before its free is done; a failure must leave all of it mapped. */
  uint64_t map_unit;       /**< Bytes mapped at a time: a power of two, at least 512; 0 with no ranges. */
  uint64_t range_size;     /**< Bytes of addresses a pool reserves at a time: a multiple of @c map_unit
                                (a request larger than one range fails). */
} gpumem_allocator_functions_t;

/** @brief Statistics of an allocator, from gpumem_allocator_get_stats(). @since 0.1.0 */
typedef struct gpumem_allocator_stats_s {
  size_t struct_size;            /**< `sizeof(gpumem_allocator_stats_t)`. */
  uint64_t bytes_in_use;         /**< Bytes of live allocations as handed out (a pool counts its rounded sizes). */
  uint64_t peak_bytes_in_use;    /**< Highest @c bytes_in_use since creation or gpumem_allocator_reset_peaks()
                                      (a pool used by more than one thread may over-state it by up to 16 MiB
                                      per stream; docs/pool.md). */
  uint64_t bytes_requested;      /**< Bytes of live allocations as asked for; @c bytes_in_use less this is rounding. */
  uint64_t bytes_reserved;       /**< Bytes held from the upstream (the driver, for a raw allocator). */
  uint64_t peak_bytes_reserved;  /**< Highest @c bytes_reserved since creation or the last reset. */
  uint64_t alloc_count;          /**< Successful gpumem_alloc() calls. */
  uint64_t free_count;           /**< Successful gpumem_free() calls. */
  uint64_t upstream_alloc_count; /**< Allocations made from the upstream. */
  uint64_t upstream_free_count;  /**< Allocations returned to the upstream. */
  uint64_t
      retry_count; /**< Retries of allocations: one after releasing cached memory, one after the reclaim callbacks. */
  uint64_t oom_count; /**< gpumem_alloc() calls that failed with ::GPUMEM_ERROR_OUT_OF_MEMORY. */
} gpumem_allocator_stats_t;

/** @brief Events a hook can observe; combine them in the mask of gpumem_allocator_add_hook(). @since 0.1.0 */
enum gpumem_hook_event {
  GPUMEM_HOOK_MALLOC_PRE = 0x1,          /**< gpumem_alloc() was called; @c ptr is NULL. */
  GPUMEM_HOOK_MALLOC_POST = 0x2,         /**< gpumem_alloc() is returning; @c status says how it went. */
  GPUMEM_HOOK_UPSTREAM_ALLOC_PRE = 0x4,  /**< A pool is about to allocate from its upstream. */
  GPUMEM_HOOK_UPSTREAM_ALLOC_POST = 0x8, /**< A pool's upstream allocation returned. */
  GPUMEM_HOOK_FREE_PRE = 0x10,           /**< gpumem_free() was called. */
  GPUMEM_HOOK_FREE_POST = 0x20,          /**< gpumem_free() is returning. */
  GPUMEM_HOOK_ALL = 0x3f                 /**< Every event. */
};

/** @brief What a hook is told. @since 0.1.0 */
typedef struct gpumem_hook_info_s {
  size_t struct_size;            /**< `sizeof(gpumem_hook_info_t)` of the library that calls. */
  uint32_t event;                /**< One ::gpumem_hook_event. */
  int32_t device;                /**< The allocator's device, or -1 for host memory. */
  gpumem_allocator_t* allocator; /**< The allocator the event is on. */
  size_t size;            /**< Bytes asked for, in the free events too (0 for a pointer the allocator does not own). */
  size_t mem_size;        /**< Bytes handed out or taken back, after rounding (0 before it is known). */
  void* ptr;              /**< The memory; NULL before it exists. */
  gpumem_stream_t stream; /**< The stream of the call. */
  gpumem_status_t status; /**< The outcome, in the post events; ::GPUMEM_SUCCESS in the pre events. */
} gpumem_hook_info_t;

/**
 * @brief A hook. Runs on the thread of the call it observes, with no gpumem lock held; it must
 *        return normally, and may call gpumem (on another allocator, or to remove a hook).
 */
typedef void (*gpumem_hook_fn)(const gpumem_hook_info_t* info, void* user_data);

/**
 * @brief Creates an allocator of device memory (`cuMemAlloc`, `cuMemFree`); the stream is ignored.
 * @param[in] device Device index.
 * @param[out] out_allocator Receives the allocator; NULL on failure.
 * @retval GPUMEM_SUCCESS
 * @retval GPUMEM_ERROR_INVALID_ARGUMENT @p out_allocator is NULL.
 * @retval GPUMEM_ERROR_NO_DRIVER
 * @retval GPUMEM_ERROR_NO_DEVICE
 * @retval GPUMEM_ERROR_INVALID_DEVICE
 * @par Thread safety
 * Thread-safe: any thread, concurrently, including on the same handle.
 * @since 0.1.0
 */
GPUMEM_NODISCARD GPUMEM_API gpumem_status_t gpumem_allocator_create_device(int32_t device,
                                                                           gpumem_allocator_t** out_allocator);

/**
 * @brief Creates an allocator of stream-ordered device memory (`cuMemAllocAsync` or
 *        `cuMemAllocFromPoolAsync`, and `cuMemFreeAsync`) on the stream of each call.
 * @param[in] device Device index.
 * @param[in] cuda_pool A CUDA memory pool of that device, or NULL for the device's current pool.
 * @param[out] out_allocator Receives the allocator; NULL on failure.
 * @retval GPUMEM_SUCCESS
 * @retval GPUMEM_ERROR_INVALID_ARGUMENT @p out_allocator is NULL.
 * @retval GPUMEM_ERROR_NOT_SUPPORTED The device has no memory pools.
 * @retval GPUMEM_ERROR_NO_DRIVER
 * @retval GPUMEM_ERROR_NO_DEVICE
 * @retval GPUMEM_ERROR_INVALID_DEVICE
 * @par Thread safety
 * Thread-safe: any thread, concurrently, including on the same handle.
 * @since 0.1.0
 */
GPUMEM_NODISCARD GPUMEM_API gpumem_status_t gpumem_allocator_create_device_async(int32_t device,
                                                                                 gpumem_cuda_pool_t cuda_pool,
                                                                                 gpumem_allocator_t** out_allocator);

/**
 * @brief Creates an allocator of managed memory (`cuMemAllocManaged`); the stream is ignored.
 * @param[in] device Device whose context owns the memory.
 * @param[in] flags As for gpumem_managed_alloc().
 * @param[out] out_allocator Receives the allocator; NULL on failure.
 * @retval GPUMEM_SUCCESS
 * @retval GPUMEM_ERROR_INVALID_ARGUMENT @p out_allocator is NULL or @p flags is not valid.
 * @retval GPUMEM_ERROR_NOT_SUPPORTED The device has no managed memory.
 * @retval GPUMEM_ERROR_NO_DRIVER
 * @retval GPUMEM_ERROR_NO_DEVICE
 * @retval GPUMEM_ERROR_INVALID_DEVICE
 * @par Thread safety
 * Thread-safe: any thread, concurrently, including on the same handle.
 * @since 0.1.0
 */
GPUMEM_NODISCARD GPUMEM_API gpumem_status_t gpumem_allocator_create_managed(int32_t device, uint32_t flags,
                                                                            gpumem_allocator_t** out_allocator);

/**
 * @brief Creates an allocator of pinned host memory (`cuMemHostAlloc`); the stream is ignored.
 *        A pool over it is the pinned-memory pool.
 * @param[in] flags As for gpumem_host_alloc().
 * @param[out] out_allocator Receives the allocator; NULL on failure.
 * @retval GPUMEM_SUCCESS
 * @retval GPUMEM_ERROR_INVALID_ARGUMENT @p out_allocator is NULL or @p flags has an unknown bit.
 * @par Thread safety
 * Thread-safe: any thread, concurrently, including on the same handle.
 * @since 0.1.0
 */
GPUMEM_NODISCARD GPUMEM_API gpumem_status_t gpumem_allocator_create_pinned(uint32_t flags,
                                                                           gpumem_allocator_t** out_allocator);

/**
 * @brief Creates an allocator of plain host memory, aligned (`aligned_alloc`); needs no GPU.
 * @param[in] alignment A power of two from 8 to 1 MiB, or 0 for 512.
 * @param[out] out_allocator Receives the allocator; NULL on failure.
 * @retval GPUMEM_SUCCESS
 * @retval GPUMEM_ERROR_INVALID_ARGUMENT @p out_allocator is NULL or @p alignment is not valid.
 * @par Thread safety
 * Thread-safe: any thread, concurrently, including on the same handle.
 * @since 0.1.0
 */
GPUMEM_NODISCARD GPUMEM_API gpumem_status_t gpumem_allocator_create_host(size_t alignment,
                                                                         gpumem_allocator_t** out_allocator);

/**
 * @brief Creates an allocator from the caller's functions.
 * @param[in] functions The functions and their context; copied.
 * @param[out] out_allocator Receives the allocator; NULL on failure (the context is then not destroyed).
 * @retval GPUMEM_SUCCESS
 * @retval GPUMEM_ERROR_INVALID_ARGUMENT A pointer is NULL, @c struct_size is too small,
 *         @c alloc or @c free is NULL, or @c device is below -1.
 * @par Thread safety
 * Thread-safe: any thread, concurrently, including on the same handle. The functions are called
 * from whichever thread allocates or frees, concurrently, and must be thread-safe themselves.
 * @since 0.1.0
 */
GPUMEM_NODISCARD GPUMEM_API gpumem_status_t
gpumem_allocator_create_functions(const gpumem_allocator_functions_t* functions, gpumem_allocator_t** out_allocator);

/**
 * @brief Destroys an allocator. Refused while it has live allocations or something relies on it
 *        (a pool built on it, or its place as a default); nothing is changed then.
 * @param[in] allocator The allocator, or NULL (nothing is done).
 * @retval GPUMEM_SUCCESS
 * @retval GPUMEM_ERROR_INVALID_HANDLE @p allocator is not a live allocator of gpumem's.
 * @retval GPUMEM_ERROR_BUSY It has live allocations (the detail gives their count and bytes; free
 *         them, or use gpumem_allocator_destroy_force()), it is the upstream of a pool, it is a
 *         default or a thread's override, or it is a device pool, which lives as long as the process.
 * @retval GPUMEM_ERROR_DRIVER A pool's upstream refused a cached block back; the pool stays, holding it.
 * @par Thread safety
 * Per handle: concurrent calls on different handles; one handle is serialized by the caller.
 * @since 0.1.0
 */
GPUMEM_NODISCARD GPUMEM_API gpumem_status_t gpumem_allocator_destroy(gpumem_allocator_t* allocator);

/**
 * @brief Destroys an allocator that still has live allocations: they are freed (a pool returns
 *        every allocation it holds to its upstream), and pointers into them become invalid.
 *        Still refused while something relies on the allocator.
 * @param[in] allocator The allocator, or NULL (nothing is done).
 * @retval GPUMEM_SUCCESS
 * @retval GPUMEM_ERROR_INVALID_HANDLE
 * @retval GPUMEM_ERROR_BUSY It is the upstream of a pool, a default, a thread's override, or a device pool.
 * @retval GPUMEM_ERROR_DRIVER Freeing a live allocation failed (a caller's allocator may fail with its
 *         own status); that allocation stays live and the allocator is not destroyed.
 * @par Thread safety
 * Per handle: concurrent calls on different handles; one handle is serialized by the caller.
 * @since 0.1.0
 */
GPUMEM_NODISCARD GPUMEM_API gpumem_status_t gpumem_allocator_destroy_force(gpumem_allocator_t* allocator);

/**
 * @brief The device an allocator's memory is on.
 * @param[in] allocator The allocator, or NULL for the calling thread's current default.
 * @param[out] out_device Receives the device index, or -1 for host memory.
 * @retval GPUMEM_SUCCESS
 * @retval GPUMEM_ERROR_INVALID_ARGUMENT @p out_device is NULL.
 * @retval GPUMEM_ERROR_INVALID_HANDLE
 * @retval GPUMEM_ERROR_NO_DRIVER With a NULL allocator, which resolves through the current device.
 * @retval GPUMEM_ERROR_NO_DEVICE
 * @par Thread safety
 * Thread-safe: any thread, concurrently, including on the same handle.
 * @since 0.1.0
 */
GPUMEM_NODISCARD GPUMEM_API gpumem_status_t gpumem_allocator_get_device(gpumem_allocator_t* allocator,
                                                                        int32_t* out_device);

/**
 * @brief Allocates @p size bytes.
 * @param[in] allocator The allocator, or NULL for the current default.
 * @param[in] size Bytes; not 0.
 * @param[in] stream The stream the memory will be used on: a pool keeps one arena per stream, a
 *            stream-ordered allocator allocates on it; others ignore it.
 * @param[out] out_ptr Receives the memory; NULL on failure.
 * @retval GPUMEM_SUCCESS
 * @retval GPUMEM_ERROR_INVALID_ARGUMENT @p out_ptr is NULL, @p size is 0, @p size overflows rounding, or
 *         the device pool, made on first use, meets an unreadable `GPUMEM_GPU_MEMORY_LIMIT`.
 * @retval GPUMEM_ERROR_OUT_OF_MEMORY After every retry; the detail gives the size asked, the bytes
 *         in use, the bytes the pool holds and its limit.
 * @retval GPUMEM_ERROR_INVALID_HANDLE
 * @retval GPUMEM_ERROR_NO_DRIVER
 * @retval GPUMEM_ERROR_NO_DEVICE
 * @retval GPUMEM_ERROR_DRIVER
 * @par Thread safety
 * Thread-safe: any thread, concurrently, including on the same handle.
 * @since 0.1.0
 */
GPUMEM_NODISCARD GPUMEM_API gpumem_status_t gpumem_alloc(gpumem_allocator_t* allocator, size_t size,
                                                         gpumem_stream_t stream, void** out_ptr);

/**
 * @brief Frees memory from gpumem_alloc() on the same allocator.
 *
 * A pool keeps the memory for the next allocation on the stream it was allocated on; memory used
 * on other streams must be synchronized with that stream before the free, as in CuPy.
 * @param[in] allocator The allocator that gave the memory, or NULL for the current default.
 * @param[in] ptr The memory, or NULL (nothing is done).
 * @param[in] stream The stream of the free (used by stream-ordered allocators).
 * @retval GPUMEM_SUCCESS
 * @retval GPUMEM_ERROR_NOT_OWNED @p ptr did not come from this allocator, or is freed already, or
 *         is held by a pool built on this allocator (free it through the pool); nothing is changed.
 * @retval GPUMEM_ERROR_INVALID_HANDLE
 * @retval GPUMEM_ERROR_NO_DRIVER With a NULL allocator, which resolves through the current device.
 * @retval GPUMEM_ERROR_NO_DEVICE
 * @retval GPUMEM_ERROR_DRIVER
 * @par Thread safety
 * Thread-safe: any thread, concurrently, including on the same handle.
 * @since 0.1.0
 */
GPUMEM_NODISCARD GPUMEM_API gpumem_status_t gpumem_free(gpumem_allocator_t* allocator, void* ptr,
                                                        gpumem_stream_t stream);

/**
 * @brief Sets the process-wide default allocator of a device: what a NULL allocator means on
 *        threads without an override, when that device is current.
 *
 * A thread's override, if it has one, keeps precedence on that thread: setting the process
 * default is always allowed and takes effect there once the override is removed. The replaced
 * default may be destroyed once no call through a NULL allocator that may have resolved to it is
 * still running on another thread; gpumem does not track those calls.
 * @param[in] device Device index.
 * @param[in] allocator The new default, or NULL for the device's pool (gpumem_pool_get_device()).
 *            The default it replaces may be destroyed at once: gpumem_allocator_destroy() waits
 *            for the calls that resolved a NULL allocator to it and are still running.
 * @retval GPUMEM_SUCCESS
 * @retval GPUMEM_ERROR_INVALID_ARGUMENT @p device is negative.
 * @retval GPUMEM_ERROR_INVALID_HANDLE
 * @retval GPUMEM_ERROR_NO_DRIVER
 * @retval GPUMEM_ERROR_NO_DEVICE
 * @retval GPUMEM_ERROR_INVALID_DEVICE
 * @par Thread safety
 * Thread-safe: any thread, concurrently, including on the same handle.
 * @since 0.1.0
 */
GPUMEM_NODISCARD GPUMEM_API gpumem_status_t gpumem_allocator_set_default(int32_t device, gpumem_allocator_t* allocator);

/**
 * @brief The process-wide default allocator of a device.
 * @param[in] device Device index.
 * @param[out] out_allocator Receives it (the device's pool unless another was set); NULL on failure.
 * @retval GPUMEM_SUCCESS
 * @retval GPUMEM_ERROR_INVALID_ARGUMENT
 * @retval GPUMEM_ERROR_NO_DRIVER
 * @retval GPUMEM_ERROR_NO_DEVICE
 * @retval GPUMEM_ERROR_INVALID_DEVICE
 * @par Thread safety
 * Thread-safe: any thread, concurrently, including on the same handle.
 * @since 0.1.0
 */
GPUMEM_NODISCARD GPUMEM_API gpumem_status_t gpumem_allocator_get_default(int32_t device,
                                                                         gpumem_allocator_t** out_allocator);

/**
 * @brief Sets the calling thread's override: what a NULL allocator means on this thread, for
 *        every device (CuPy's `using_allocator`). Restore the previous one when done.
 * @param[in] allocator The override, or NULL to remove it.
 * @param[out] out_previous Receives the override it replaces (NULL if none); may be NULL.
 * @retval GPUMEM_SUCCESS
 * @retval GPUMEM_ERROR_INVALID_HANDLE
 * @par Thread safety
 * Thread-safe: any thread, concurrently, including on the same handle (each thread has its own).
 * @since 0.1.0
 */
GPUMEM_NODISCARD GPUMEM_API gpumem_status_t gpumem_allocator_set_thread(gpumem_allocator_t* allocator,
                                                                        gpumem_allocator_t** out_previous);

/**
 * @brief The calling thread's override.
 * @param[out] out_allocator Receives it, or NULL if the thread has none.
 * @retval GPUMEM_SUCCESS
 * @retval GPUMEM_ERROR_INVALID_ARGUMENT @p out_allocator is NULL.
 * @par Thread safety
 * Thread-safe: any thread, concurrently, including on the same handle (each thread has its own).
 * @since 0.1.0
 */
GPUMEM_NODISCARD GPUMEM_API gpumem_status_t gpumem_allocator_get_thread(gpumem_allocator_t** out_allocator);

/**
 * @brief An allocator's statistics.
 * @param[in] allocator The allocator, or NULL for the current default.
 * @param[in,out] out_stats @c struct_size set by the caller; the rest is filled in
 *                (zeroed on failure as far as @c struct_size reaches, @c struct_size kept).
 * @retval GPUMEM_SUCCESS
 * @retval GPUMEM_ERROR_INVALID_ARGUMENT @p out_stats is NULL or its @c struct_size is not valid.
 * @retval GPUMEM_ERROR_INVALID_HANDLE
 * @retval GPUMEM_ERROR_NO_DRIVER With a NULL allocator, which resolves through the current device.
 * @retval GPUMEM_ERROR_NO_DEVICE
 * @par Thread safety
 * Thread-safe: any thread, concurrently, including on the same handle.
 * @since 0.1.0
 */
GPUMEM_NODISCARD GPUMEM_API gpumem_status_t gpumem_allocator_get_stats(gpumem_allocator_t* allocator,
                                                                       gpumem_allocator_stats_t* out_stats);

/**
 * @brief Sets the peaks of an allocator's statistics to the current values.
 * @param[in] allocator The allocator, or NULL for the current default.
 * @retval GPUMEM_SUCCESS
 * @retval GPUMEM_ERROR_INVALID_HANDLE
 * @retval GPUMEM_ERROR_NO_DRIVER With a NULL allocator, which resolves through the current device.
 * @retval GPUMEM_ERROR_NO_DEVICE
 * @par Thread safety
 * Thread-safe: any thread, concurrently, including on the same handle.
 * @since 0.1.0
 */
GPUMEM_NODISCARD GPUMEM_API gpumem_status_t gpumem_allocator_reset_peaks(gpumem_allocator_t* allocator);

/**
 * @brief Adds a hook to an allocator (CuPy's memory hooks); any number may be added.
 * @param[in] allocator The allocator.
 * @param[in] events A mask of ::gpumem_hook_event; not 0.
 * @param[in] hook The function; not NULL.
 * @param[in] user_data Passed to the hook.
 * @param[out] out_hook_id Receives an id for gpumem_allocator_remove_hook(); 0 on failure.
 * @retval GPUMEM_SUCCESS
 * @retval GPUMEM_ERROR_INVALID_ARGUMENT @p hook or @p out_hook_id is NULL, or @p events is 0 or has unknown bits.
 * @retval GPUMEM_ERROR_INVALID_HANDLE
 * @par Thread safety
 * Thread-safe: any thread, concurrently, including on the same handle. Hook ids are never given
 * twice in a process, by any allocator.
 * @since 0.1.0
 */
GPUMEM_NODISCARD GPUMEM_API gpumem_status_t gpumem_allocator_add_hook(gpumem_allocator_t* allocator, uint32_t events,
                                                                      gpumem_hook_fn hook, void* user_data,
                                                                      uint64_t* out_hook_id);

/**
 * @brief Removes a hook. Returns once no call of the hook is running on another thread, after
 *        which it never runs again: its @c user_data may then be released. Called from inside
 *        the hook itself, it waits for the other threads' calls only; the call it is made from
 *        finishes after it returns. Two hooks that remove each other from inside themselves, on
 *        two threads at once, wait for each other for ever.
 * @param[in] allocator The allocator it was added to.
 * @param[in] hook_id What gpumem_allocator_add_hook() gave.
 * @retval GPUMEM_SUCCESS
 * @retval GPUMEM_ERROR_INVALID_HANDLE No hook with that id is on this allocator (removed already,
 *         never added, or added to another allocator), or @p allocator is not a live allocator.
 * @par Thread safety
 * Thread-safe: any thread, concurrently, including on the same handle.
 * @since 0.1.0
 */
GPUMEM_NODISCARD GPUMEM_API gpumem_status_t gpumem_allocator_remove_hook(gpumem_allocator_t* allocator,
                                                                         uint64_t hook_id);

#ifdef __cplusplus
}
#endif

#endif /* GPUMEM_ALLOCATOR_H */
