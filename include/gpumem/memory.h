/**
 * @file memory.h
 * @brief Raw memory of every kind: device (synchronous and stream-ordered), pinned host,
 *        registered host ranges and managed memory.
 *
 * These calls go straight to the driver, one allocation each. Each kind has its own free, which refuses memory of
 * another kind with
 * ::GPUMEM_ERROR_INVALID_POINTER. Rules shared by every call here:
 * - a size of zero is refused with ::GPUMEM_ERROR_INVALID_ARGUMENT (no allocation is made);
 * - freeing NULL succeeds and does nothing, as `free(NULL)` does;
 * - a free must be given the address the allocation returned, not one inside it;
 * - a free after the driver has shut down (at process exit) succeeds and does nothing.
 *
 * Host memory belongs to the CUDA context current on the calling thread if there is one (so it
 * follows `cudaSetDevice` in the runtime), else to device 0's primary context; with the
 * `PORTABLE` flag every device sees it as pinned.
 */
#ifndef GPUMEM_MEMORY_H
#define GPUMEM_MEMORY_H

#include "core.h"

#ifdef __cplusplus
extern "C" {
#endif

/** @brief A CUDA memory pool; the same representation as `CUmemoryPool` and `cudaMemPool_t`. */
typedef struct CUmemPoolHandle_st* gpumem_cuda_pool_t;

/** @brief Flags of gpumem_host_alloc(); the values of `CU_MEMHOSTALLOC_*`. @since 0.1.0 */
enum gpumem_host_alloc_flags {
  GPUMEM_HOST_ALLOC_PORTABLE = 0x1,     /**< Pinned for every device, not only the current one. */
  GPUMEM_HOST_ALLOC_DEVICEMAP = 0x2,    /**< Mapped into the device address space. */
  GPUMEM_HOST_ALLOC_WRITECOMBINED = 0x4 /**< Write-combined: fast to send, slow for the host to read. */
};

/** @brief Flags of gpumem_host_register(); the values of `CU_MEMHOSTREGISTER_*`. @since 0.1.0 */
enum gpumem_host_register_flags {
  GPUMEM_HOST_REGISTER_PORTABLE = 0x1,  /**< Pinned for every device, not only the current one. */
  GPUMEM_HOST_REGISTER_DEVICEMAP = 0x2, /**< Mapped into the device address space. */
  GPUMEM_HOST_REGISTER_IOMEMORY = 0x4,  /**< The range is I/O memory (such as a PCIe BAR). */
  GPUMEM_HOST_REGISTER_READ_ONLY = 0x8  /**< The device only reads the range. */
};

/** @brief Flags of gpumem_managed_alloc(); the values of `CU_MEM_ATTACH_*`. @since 0.1.0 */
enum gpumem_managed_flags {
  GPUMEM_MANAGED_ATTACH_GLOBAL = 0x1, /**< Any stream on any device may touch it (the default, also for 0). */
  GPUMEM_MANAGED_ATTACH_HOST = 0x2    /**< Attached to the host: not accessible from devices until attached to a stream
                                         (`cuStreamAttachMemAsync`). */
};

/** @brief Where managed memory lives or is wanted: a device index, or one of these. @since 0.1.0 */
enum gpumem_location {
  GPUMEM_LOCATION_HOST = -1, /**< Host memory, as `CU_DEVICE_CPU`. */
  GPUMEM_LOCATION_NONE = -2  /**< No location set, as `CU_DEVICE_INVALID`. */
};

/** @brief Advice for gpumem_managed_advise(); the values of `CU_MEM_ADVISE_*`. @since 0.1.0 */
enum gpumem_advice {
  GPUMEM_ADVICE_SET_READ_MOSTLY = 1,          /**< Mostly read: devices may keep read-only copies. */
  GPUMEM_ADVICE_UNSET_READ_MOSTLY = 2,        /**< Undo ::GPUMEM_ADVICE_SET_READ_MOSTLY. */
  GPUMEM_ADVICE_SET_PREFERRED_LOCATION = 3,   /**< Prefer to keep the pages at the given location. */
  GPUMEM_ADVICE_UNSET_PREFERRED_LOCATION = 4, /**< Undo ::GPUMEM_ADVICE_SET_PREFERRED_LOCATION. */
  GPUMEM_ADVICE_SET_ACCESSED_BY = 5,          /**< Keep the pages mapped for the given device. */
  GPUMEM_ADVICE_UNSET_ACCESSED_BY = 6         /**< Undo ::GPUMEM_ADVICE_SET_ACCESSED_BY. */
};

/**
 * @brief The advice and prefetch state of a managed range.
 *
 * Set @c struct_size to `sizeof(gpumem_managed_range_info_t)` before passing it to
 * gpumem_managed_get_range_info().
 * @since 0.1.0
 */
typedef struct gpumem_managed_range_info_s {
  size_t struct_size;         /**< Size of this struct as the caller knows it. */
  bool read_mostly;           /**< The whole range has read-mostly advice. */
  int32_t preferred_location; /**< Device index, ::GPUMEM_LOCATION_HOST, or ::GPUMEM_LOCATION_NONE if unset or mixed. */
  int32_t last_prefetch_location; /**< Device index, ::GPUMEM_LOCATION_HOST, or ::GPUMEM_LOCATION_NONE if never
                                     prefetched or mixed. */
  uint64_t accessed_by;           /**< Bit d set: device d (d < 64) has accessed-by advice for the whole range. */
} gpumem_managed_range_info_t;

/**
 * @brief Allocates device memory, synchronously (`cuMemAlloc`).
 * @param[in] device Device index.
 * @param[in] size Bytes; not 0.
 * @param[out] out_ptr Receives the device address; NULL on failure.
 * @retval GPUMEM_SUCCESS
 * @retval GPUMEM_ERROR_INVALID_ARGUMENT @p out_ptr is NULL or @p size is 0.
 * @retval GPUMEM_ERROR_OUT_OF_MEMORY The device has not @p size bytes free; the detail gives the free memory.
 * @retval GPUMEM_ERROR_NO_DRIVER
 * @retval GPUMEM_ERROR_NO_DEVICE
 * @retval GPUMEM_ERROR_INVALID_DEVICE
 * @retval GPUMEM_ERROR_DRIVER
 * @retval GPUMEM_ERROR_STREAM_CAPTURE A stream is being captured into a CUDA graph; nothing was done
 *         and the capture is still valid (docs/copy.md, "Stream capture").
 * @par Thread safety
 * Thread-safe: any thread, concurrently, including on the same handle.
 * @since 0.1.0
 */
GPUMEM_NODISCARD GPUMEM_API gpumem_status_t gpumem_device_alloc(int32_t device, size_t size, void** out_ptr);

/**
 * @brief Frees memory from gpumem_device_alloc(), synchronously (`cuMemFree`).
 * @param[in] ptr The address the allocation returned, or NULL (nothing is done).
 * @retval GPUMEM_SUCCESS
 * @retval GPUMEM_ERROR_INVALID_POINTER @p ptr is not the start of a device allocation
 *         (another kind of memory, an address inside an allocation, or already freed).
 * @retval GPUMEM_ERROR_NO_DRIVER
 * @retval GPUMEM_ERROR_NO_DEVICE
 * @retval GPUMEM_ERROR_STREAM_CAPTURE A capture in progress forbids the synchronous free.
 * @retval GPUMEM_ERROR_DRIVER
 * @par Thread safety
 * Thread-safe: any thread, concurrently, including on the same handle.
 * @since 0.1.0
 */
GPUMEM_NODISCARD GPUMEM_API gpumem_status_t gpumem_device_free(void* ptr);

/**
 * @brief Allocates device memory ordered on a stream, from the device's current memory pool
 *        (`cuMemAllocAsync`).
 *
 * The memory may be used by work on @p stream once the call returns, and by other streams after
 * they synchronize with it.
 * @param[in] device Device index; must be the stream's device.
 * @param[in] size Bytes; not 0.
 * @param[in] stream The caller's stream, NULL, ::GPUMEM_STREAM_LEGACY or ::GPUMEM_STREAM_PER_THREAD.
 * @param[out] out_ptr Receives the device address; NULL on failure.
 * @retval GPUMEM_SUCCESS
 * @retval GPUMEM_ERROR_INVALID_ARGUMENT @p out_ptr is NULL, @p size is 0, or @p stream is on another device.
 * @retval GPUMEM_ERROR_OUT_OF_MEMORY
 * @retval GPUMEM_ERROR_NOT_SUPPORTED The device has no memory pools.
 * @retval GPUMEM_ERROR_NO_DRIVER
 * @retval GPUMEM_ERROR_NO_DEVICE
 * @retval GPUMEM_ERROR_INVALID_DEVICE
 * @retval GPUMEM_ERROR_DRIVER
 * @retval GPUMEM_ERROR_STREAM_CAPTURE On the legacy stream while a stream is being captured into a CUDA
 *         graph; nothing was done and the capture is still valid (docs/copy.md, "Stream capture").
 * @par Thread safety
 * Thread-safe: any thread, concurrently, including on the same handle.
 * @since 0.1.0
 */
GPUMEM_NODISCARD GPUMEM_API gpumem_status_t gpumem_device_alloc_async(int32_t device, size_t size,
                                                                      gpumem_stream_t stream, void** out_ptr);

/**
 * @brief Allocates device memory ordered on a stream from a given CUDA memory pool
 *        (`cuMemAllocFromPoolAsync`).
 * @param[in] pool A CUDA memory pool (`CUmemoryPool` / `cudaMemPool_t`); not NULL.
 * @param[in] size Bytes; not 0.
 * @param[in] stream The caller's stream, NULL, ::GPUMEM_STREAM_LEGACY or ::GPUMEM_STREAM_PER_THREAD.
 * @param[out] out_ptr Receives the device address; NULL on failure.
 * @retval GPUMEM_SUCCESS
 * @retval GPUMEM_ERROR_INVALID_ARGUMENT @p pool or @p out_ptr is NULL, or @p size is 0.
 * @retval GPUMEM_ERROR_OUT_OF_MEMORY
 * @retval GPUMEM_ERROR_NO_DRIVER
 * @retval GPUMEM_ERROR_NO_DEVICE
 * @retval GPUMEM_ERROR_DRIVER
 * @retval GPUMEM_ERROR_STREAM_CAPTURE On the legacy stream while a stream is being captured into a CUDA
 *         graph; nothing was done and the capture is still valid (docs/copy.md, "Stream capture").
 * @par Thread safety
 * Thread-safe: any thread, concurrently, including on the same handle.
 * @since 0.1.0
 */
GPUMEM_NODISCARD GPUMEM_API gpumem_status_t gpumem_device_alloc_from_pool(gpumem_cuda_pool_t pool, size_t size,
                                                                          gpumem_stream_t stream, void** out_ptr);

/**
 * @brief Frees device memory ordered on a stream (`cuMemFreeAsync`): the memory is released
 *        once the work queued on @p stream before the call has finished.
 *
 * Takes memory from gpumem_device_alloc_async() or gpumem_device_alloc_from_pool(), and also
 * from gpumem_device_alloc().
 * @param[in] ptr The address the allocation returned, or NULL (nothing is done).
 * @param[in] stream The caller's stream, NULL, ::GPUMEM_STREAM_LEGACY or ::GPUMEM_STREAM_PER_THREAD.
 * @retval GPUMEM_SUCCESS
 * @retval GPUMEM_ERROR_INVALID_POINTER @p ptr is not the start of a device allocation.
 * @retval GPUMEM_ERROR_NO_DRIVER
 * @retval GPUMEM_ERROR_NO_DEVICE
 * @retval GPUMEM_ERROR_DRIVER
 * @retval GPUMEM_ERROR_STREAM_CAPTURE On the legacy stream while a stream is being captured into a CUDA
 *         graph; nothing was done and the capture is still valid (docs/copy.md, "Stream capture").
 * @par Thread safety
 * Thread-safe: any thread, concurrently, including on the same handle.
 * @since 0.1.0
 */
GPUMEM_NODISCARD GPUMEM_API gpumem_status_t gpumem_device_free_async(void* ptr, gpumem_stream_t stream);

/**
 * @brief Allocates page-locked (pinned) host memory (`cuMemHostAlloc`).
 * @param[in] size Bytes; not 0.
 * @param[in] flags 0 or a combination of ::gpumem_host_alloc_flags.
 * @param[out] out_ptr Receives the host address; NULL on failure.
 * @retval GPUMEM_SUCCESS
 * @retval GPUMEM_ERROR_INVALID_ARGUMENT @p out_ptr is NULL, @p size is 0, or @p flags has an unknown bit.
 * @retval GPUMEM_ERROR_OUT_OF_MEMORY
 * @retval GPUMEM_ERROR_NOT_SUPPORTED ::GPUMEM_HOST_ALLOC_DEVICEMAP on a device that cannot map host memory.
 * @retval GPUMEM_ERROR_NO_DRIVER
 * @retval GPUMEM_ERROR_NO_DEVICE
 * @retval GPUMEM_ERROR_DRIVER
 * @retval GPUMEM_ERROR_STREAM_CAPTURE A stream is being captured into a CUDA graph; nothing was done
 *         and the capture is still valid (docs/copy.md, "Stream capture").
 * @par Thread safety
 * Thread-safe: any thread, concurrently, including on the same handle.
 * @since 0.1.0
 */
GPUMEM_NODISCARD GPUMEM_API gpumem_status_t gpumem_host_alloc(size_t size, uint32_t flags, void** out_ptr);

/**
 * @brief Frees memory from gpumem_host_alloc() (`cuMemFreeHost`).
 * @param[in] ptr The address the allocation returned, or NULL (nothing is done).
 * @retval GPUMEM_SUCCESS
 * @retval GPUMEM_ERROR_INVALID_POINTER @p ptr is not the start of a pinned host allocation
 *         (registered or plain host memory, device memory, an interior address).
 * @retval GPUMEM_ERROR_NO_DRIVER
 * @retval GPUMEM_ERROR_NO_DEVICE
 * @retval GPUMEM_ERROR_STREAM_CAPTURE A capture in progress forbids the synchronous free.
 * @retval GPUMEM_ERROR_DRIVER
 * @par Thread safety
 * Thread-safe: any thread, concurrently, including on the same handle.
 * @since 0.1.0
 */
GPUMEM_NODISCARD GPUMEM_API gpumem_status_t gpumem_host_free(void* ptr);

/**
 * @brief Page-locks an existing host range so the devices can reach it directly
 *        (`cuMemHostRegister`).
 * @param[in] ptr Start of the range; not NULL.
 * @param[in] size Bytes; not 0.
 * @param[in] flags 0 or a combination of ::gpumem_host_register_flags.
 * @retval GPUMEM_SUCCESS
 * @retval GPUMEM_ERROR_INVALID_ARGUMENT @p ptr is NULL, @p size is 0, the range wraps around, or @p flags has an
 * unknown bit.
 * @retval GPUMEM_ERROR_ALREADY_REGISTERED The range begins or ends in page-locked memory (pinned or registered).
 * @retval GPUMEM_ERROR_INVALID_POINTER The range overlaps device or managed memory.
 * @retval GPUMEM_ERROR_NOT_SUPPORTED The device cannot register host memory, or not with these flags.
 * @retval GPUMEM_ERROR_OUT_OF_MEMORY
 * @retval GPUMEM_ERROR_NO_DRIVER
 * @retval GPUMEM_ERROR_NO_DEVICE
 * @retval GPUMEM_ERROR_DRIVER
 * @retval GPUMEM_ERROR_STREAM_CAPTURE A stream is being captured into a CUDA graph; nothing was done
 *         and the capture is still valid (docs/copy.md, "Stream capture").
 * @par Thread safety
 * Thread-safe: any thread, concurrently, including on the same handle.
 * @since 0.1.0
 */
GPUMEM_NODISCARD GPUMEM_API gpumem_status_t gpumem_host_register(void* ptr, size_t size, uint32_t flags);

/**
 * @brief Ends the page-locking of a range registered with gpumem_host_register()
 *        (`cuMemHostUnregister`).
 * @param[in] ptr The start of the registered range; not NULL.
 * @retval GPUMEM_SUCCESS
 * @retval GPUMEM_ERROR_INVALID_ARGUMENT @p ptr is NULL.
 * @retval GPUMEM_ERROR_INVALID_POINTER @p ptr is not the start of a registered range, or the pinning
 *         service registered it (gpumem_unpin() and gpumem_pin_forget() release those).
 * @retval GPUMEM_ERROR_NO_DRIVER
 * @retval GPUMEM_ERROR_NO_DEVICE
 * @retval GPUMEM_ERROR_DRIVER
 * @retval GPUMEM_ERROR_STREAM_CAPTURE A stream is being captured into a CUDA graph; nothing was done
 *         and the capture is still valid (docs/copy.md, "Stream capture").
 * @par Thread safety
 * Thread-safe: any thread, concurrently, including on the same handle.
 * @since 0.1.0
 */
GPUMEM_NODISCARD GPUMEM_API gpumem_status_t gpumem_host_unregister(void* ptr);

/**
 * @brief The device address of mapped page-locked host memory (`cuMemHostGetDevicePointer`).
 *
 * The memory must come from gpumem_host_alloc() with ::GPUMEM_HOST_ALLOC_DEVICEMAP or from
 * gpumem_host_register() with ::GPUMEM_HOST_REGISTER_DEVICEMAP (any pinned memory, on devices
 * with unified addressing). Interior addresses map to interior device addresses.
 * @param[in] ptr A host address inside such memory.
 * @param[out] out_device_ptr Receives the device address; NULL on failure.
 * @retval GPUMEM_SUCCESS
 * @retval GPUMEM_ERROR_INVALID_ARGUMENT @p ptr or @p out_device_ptr is NULL.
 * @retval GPUMEM_ERROR_INVALID_POINTER @p ptr is not mapped page-locked host memory.
 * @retval GPUMEM_ERROR_NO_DRIVER
 * @retval GPUMEM_ERROR_NO_DEVICE
 * @retval GPUMEM_ERROR_DRIVER
 * @par Thread safety
 * Thread-safe: any thread, concurrently, including on the same handle.
 * @since 0.1.0
 */
GPUMEM_NODISCARD GPUMEM_API gpumem_status_t gpumem_host_get_device_pointer(void* ptr, void** out_device_ptr);

/**
 * @brief Allocates managed (unified) memory, reachable from the host and every device
 *        (`cuMemAllocManaged`).
 * @param[in] device Device whose context owns the allocation.
 * @param[in] size Bytes; not 0.
 * @param[in] flags 0 (global), ::GPUMEM_MANAGED_ATTACH_GLOBAL or ::GPUMEM_MANAGED_ATTACH_HOST.
 * @param[out] out_ptr Receives the address; NULL on failure.
 * @retval GPUMEM_SUCCESS
 * @retval GPUMEM_ERROR_INVALID_ARGUMENT @p out_ptr is NULL, @p size is 0, or @p flags is not one of those.
 * @retval GPUMEM_ERROR_OUT_OF_MEMORY
 * @retval GPUMEM_ERROR_NOT_SUPPORTED The device has no managed memory.
 * @retval GPUMEM_ERROR_NO_DRIVER
 * @retval GPUMEM_ERROR_NO_DEVICE
 * @retval GPUMEM_ERROR_INVALID_DEVICE
 * @retval GPUMEM_ERROR_DRIVER
 * @retval GPUMEM_ERROR_STREAM_CAPTURE A stream is being captured into a CUDA graph; nothing was done
 *         and the capture is still valid (docs/copy.md, "Stream capture").
 * @par Thread safety
 * Thread-safe: any thread, concurrently, including on the same handle.
 * @since 0.1.0
 */
GPUMEM_NODISCARD GPUMEM_API gpumem_status_t gpumem_managed_alloc(int32_t device, size_t size, uint32_t flags,
                                                                 void** out_ptr);

/**
 * @brief Frees memory from gpumem_managed_alloc() (`cuMemFree`).
 * @param[in] ptr The address the allocation returned, or NULL (nothing is done).
 * @retval GPUMEM_SUCCESS
 * @retval GPUMEM_ERROR_INVALID_POINTER @p ptr is not the start of a managed allocation.
 * @retval GPUMEM_ERROR_NO_DRIVER
 * @retval GPUMEM_ERROR_NO_DEVICE
 * @retval GPUMEM_ERROR_STREAM_CAPTURE A capture in progress forbids the synchronous free.
 * @retval GPUMEM_ERROR_DRIVER
 * @par Thread safety
 * Thread-safe: any thread, concurrently, including on the same handle.
 * @since 0.1.0
 */
GPUMEM_NODISCARD GPUMEM_API gpumem_status_t gpumem_managed_free(void* ptr);

/**
 * @brief Migrates a managed range to a device or to the host, ordered on a stream
 *        (`cuMemPrefetchAsync`).
 * @param[in] ptr Start of the range, inside managed memory.
 * @param[in] size Bytes; not 0.
 * @param[in] location A device index or ::GPUMEM_LOCATION_HOST.
 * @param[in] stream The caller's stream, NULL, ::GPUMEM_STREAM_LEGACY or ::GPUMEM_STREAM_PER_THREAD.
 * @retval GPUMEM_SUCCESS
 * @retval GPUMEM_ERROR_INVALID_ARGUMENT @p ptr is NULL, @p size is 0, or @p location is neither a device nor the host.
 * @retval GPUMEM_ERROR_INVALID_POINTER The range is not managed memory.
 * @retval GPUMEM_ERROR_INVALID_DEVICE @p location names no present device.
 * @retval GPUMEM_ERROR_NOT_SUPPORTED The device or driver refuses prefetching (devices without concurrent
 *         managed access may), or the driver is older than CUDA 12.2.
 * @retval GPUMEM_ERROR_NO_DRIVER
 * @retval GPUMEM_ERROR_NO_DEVICE
 * @retval GPUMEM_ERROR_DRIVER
 * @retval GPUMEM_ERROR_STREAM_CAPTURE On the legacy stream while a stream is being captured into a CUDA
 *         graph; nothing was done and the capture is still valid (docs/copy.md, "Stream capture").
 * @par Thread safety
 * Thread-safe: any thread, concurrently, including on the same handle.
 * @since 0.1.0
 */
GPUMEM_NODISCARD GPUMEM_API gpumem_status_t gpumem_managed_prefetch(void* ptr, size_t size, int32_t location,
                                                                    gpumem_stream_t stream);

/**
 * @brief Gives the driver advice about how a managed range is used (`cuMemAdvise`).
 * @param[in] ptr Start of the range, inside managed memory.
 * @param[in] size Bytes; not 0.
 * @param[in] advice One of ::gpumem_advice.
 * @param[in] location A device index or ::GPUMEM_LOCATION_HOST; ignored for the read-mostly
 *            advice. ::GPUMEM_ADVICE_SET_ACCESSED_BY and its unset take a device, not the host.
 * @retval GPUMEM_SUCCESS
 * @retval GPUMEM_ERROR_INVALID_ARGUMENT @p ptr is NULL, @p size is 0, @p advice is unknown, or @p location does not fit
 * the advice.
 * @retval GPUMEM_ERROR_INVALID_POINTER The range is not managed memory.
 * @retval GPUMEM_ERROR_INVALID_DEVICE @p location names no present device.
 * @retval GPUMEM_ERROR_NOT_SUPPORTED The driver is older than CUDA 12.2.
 * @retval GPUMEM_ERROR_NO_DRIVER
 * @retval GPUMEM_ERROR_NO_DEVICE
 * @retval GPUMEM_ERROR_DRIVER
 * @retval GPUMEM_ERROR_STREAM_CAPTURE A stream is being captured into a CUDA graph; nothing was done
 *         and the capture is still valid (docs/copy.md, "Stream capture").
 * @par Thread safety
 * Thread-safe: any thread, concurrently, including on the same handle.
 * @since 0.1.0
 */
GPUMEM_NODISCARD GPUMEM_API gpumem_status_t gpumem_managed_advise(void* ptr, size_t size, int32_t advice,
                                                                  int32_t location);

/**
 * @brief The advice and prefetch state of a managed range (`cuMemRangeGetAttributes`).
 * @param[in] ptr Start of the range, inside managed memory.
 * @param[in] size Bytes; not 0.
 * @param[in,out] out_info @c struct_size set by the caller; the rest is filled in
 *                (zeroed on failure as far as @c struct_size reaches, @c struct_size kept).
 * @retval GPUMEM_SUCCESS
 * @retval GPUMEM_ERROR_INVALID_ARGUMENT @p ptr or @p out_info is NULL, @p size is 0, or @c struct_size is too small.
 * @retval GPUMEM_ERROR_INVALID_POINTER The range is not managed memory.
 * @retval GPUMEM_ERROR_NO_DRIVER
 * @retval GPUMEM_ERROR_NO_DEVICE
 * @retval GPUMEM_ERROR_DRIVER
 * @par Thread safety
 * Thread-safe: any thread, concurrently, including on the same handle.
 * @since 0.1.0
 */
GPUMEM_NODISCARD GPUMEM_API gpumem_status_t gpumem_managed_get_range_info(const void* ptr, size_t size,
                                                                          gpumem_managed_range_info_t* out_info);

#ifdef __cplusplus
}
#endif

#endif /* GPUMEM_MEMORY_H */
