/**
 * @file device.h
 * @brief The CUDA driver and the devices: versions, counts, capabilities, free memory.
 *
 * gpumem loads the CUDA driver (`libcuda.so.1`, or the file named by the environment variable
 * `GPUMEM_CUDA_DRIVER`) on first use and works in each device's primary context, so its memory
 * is shared with programs that use the CUDA runtime. Without a driver these calls return
 * ::GPUMEM_ERROR_NO_DRIVER; with a driver but no device, ::GPUMEM_ERROR_NO_DEVICE.
 */
#ifndef GPUMEM_DEVICE_H
#define GPUMEM_DEVICE_H

#include "core.h"

#ifdef __cplusplus
extern "C" {
#endif

/**
 * @brief What a device is and which memory features it has.
 *
 * Set @c struct_size to `sizeof(gpumem_device_info_t)` before passing it to
 * gpumem_device_get_info().
 * @since 0.1.0
 */
typedef struct gpumem_device_info_s {
  size_t struct_size;               /**< Size of this struct as the caller knows it. */
  char name[256];                   /**< Product name, NUL-terminated. */
  size_t total_memory;              /**< Device memory in bytes. */
  int32_t compute_capability_major; /**< Compute capability, major part (9 for an H200). */
  int32_t compute_capability_minor; /**< Compute capability, minor part. */
  bool unified_addressing;          /**< Shares one address space with the host. */
  bool managed_memory;              /**< Can allocate managed memory. */
  bool concurrent_managed_access;   /**< Host and device can touch managed memory at once. */
  bool memory_pools;                /**< Supports stream-ordered allocation (memory pools). */
  bool pageable_memory_access;      /**< Can read and write plain host memory directly. */
  bool host_register;               /**< Can page-lock an existing host range (host register). */
  bool can_map_host_memory;         /**< Can map page-locked host memory into its address space. */
} gpumem_device_info_t;

/**
 * @brief The CUDA version the loaded driver supports, as `cuDriverGetVersion` gives it
 *        (13000 for CUDA 13.0).
 * @param[out] out_version Receives the version; set to 0 on failure.
 * @retval GPUMEM_SUCCESS
 * @retval GPUMEM_ERROR_INVALID_ARGUMENT @p out_version is NULL.
 * @retval GPUMEM_ERROR_NO_DRIVER No usable driver; the detail says why.
 * @par Thread safety
 * Thread-safe: any thread, concurrently, including on the same handle.
 * @since 0.1.0
 */
GPUMEM_NODISCARD GPUMEM_API gpumem_status_t gpumem_driver_get_version(int32_t* out_version);

/**
 * @brief How many CUDA devices there are.
 * @param[out] out_count Receives the count; set to 0 on failure.
 * @retval GPUMEM_SUCCESS
 * @retval GPUMEM_ERROR_INVALID_ARGUMENT @p out_count is NULL.
 * @retval GPUMEM_ERROR_NO_DRIVER No usable driver; the detail says why.
 * @retval GPUMEM_ERROR_NO_DEVICE The driver reports no device.
 * @retval GPUMEM_ERROR_DRIVER The driver failed otherwise.
 * @par Thread safety
 * Thread-safe: any thread, concurrently, including on the same handle.
 * @since 0.1.0
 */
GPUMEM_NODISCARD GPUMEM_API gpumem_status_t gpumem_device_get_count(int32_t* out_count);

/**
 * @brief Name, memory and capabilities of a device.
 * @param[in] device Device index, from 0 to the count less one.
 * @param[in,out] out_info @c struct_size set by the caller; the rest is filled in
 *                (zeroed on failure as far as @c struct_size reaches, @c struct_size kept).
 * @retval GPUMEM_SUCCESS
 * @retval GPUMEM_ERROR_INVALID_ARGUMENT @p out_info is NULL or its @c struct_size too small.
 * @retval GPUMEM_ERROR_NO_DRIVER
 * @retval GPUMEM_ERROR_NO_DEVICE
 * @retval GPUMEM_ERROR_INVALID_DEVICE @p device is out of range.
 * @retval GPUMEM_ERROR_DRIVER
 * @par Thread safety
 * Thread-safe: any thread, concurrently, including on the same handle.
 * @since 0.1.0
 */
GPUMEM_NODISCARD GPUMEM_API gpumem_status_t gpumem_device_get_info(int32_t device, gpumem_device_info_t* out_info);

/**
 * @brief Free and total memory of a device now, as `cuMemGetInfo` reports them.
 * @param[in] device Device index.
 * @param[out] out_free Receives the free bytes; may be NULL if @p out_total is not.
 * @param[out] out_total Receives the total bytes; may be NULL if @p out_free is not.
 * @retval GPUMEM_SUCCESS
 * @retval GPUMEM_ERROR_INVALID_ARGUMENT Both outputs are NULL.
 * @retval GPUMEM_ERROR_NO_DRIVER
 * @retval GPUMEM_ERROR_NO_DEVICE
 * @retval GPUMEM_ERROR_INVALID_DEVICE @p device is out of range.
 * @retval GPUMEM_ERROR_DRIVER
 * @par Thread safety
 * Thread-safe: any thread, concurrently, including on the same handle.
 * @since 0.1.0
 */
GPUMEM_NODISCARD GPUMEM_API gpumem_status_t gpumem_device_query_memory(int32_t device, size_t* out_free,
                                                                       size_t* out_total);

/**
 * @brief Orders @p stream after the work queued on @p producer so far, without waiting on the
 *        host: an event recorded on @p producer that @p stream waits for (`cuStreamWaitEvent`).
 *
 * What a producer of shared memory does before a consumer on another stream reads it (the DLPack
 * protocol's `stream` argument, CuPy's and PyTorch's `wait_stream`). The same stream twice does
 * nothing. A default stream (NULL or `CU_STREAM_LEGACY`, the per-thread stream) stands for the
 * calling thread's current device when the other stream names none.
 * @param[in] stream The stream that waits.
 * @param[in] producer The stream whose work so far it waits for.
 * @retval GPUMEM_SUCCESS
 * @retval GPUMEM_ERROR_NO_DRIVER
 * @retval GPUMEM_ERROR_NO_DEVICE
 * @retval GPUMEM_ERROR_INVALID_ARGUMENT A stream is not a stream (`CUDA_ERROR_INVALID_HANDLE`).
 * @retval GPUMEM_ERROR_DRIVER
 * @par Thread safety
 * Thread-safe: any thread, concurrently, including on the same handle.
 * @since 0.4.0
 */
GPUMEM_NODISCARD GPUMEM_API gpumem_status_t gpumem_stream_wait(gpumem_stream_t stream, gpumem_stream_t producer);

#ifdef __cplusplus
}
#endif

#endif /* GPUMEM_DEVICE_H */
