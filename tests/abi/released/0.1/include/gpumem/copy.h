/**
 * @file copy.h
 * @brief Memset and 1D copies between any two kinds of memory, synchronous or on a stream.
 *
 * The kind of each address (device, pinned or plain host, managed) is found from unified
 * addressing, so one call serves every direction. A count of zero succeeds and does nothing.
 * The synchronous calls return when the work is done; the `_async` calls queue it on a stream
 * and return.
 */
#ifndef GPUMEM_COPY_H
#define GPUMEM_COPY_H

#include "core.h"

#ifdef __cplusplus
extern "C" {
#endif

/**
 * @brief Sets @p count elements of 1, 2 or 4 bytes each to @p value, synchronously
 *        (`cuMemsetD8/D16/D32`).
 * @param[in] dst Device, managed, or mapped page-locked host memory; aligned to @p element_size.
 * @param[in] value The element value; must fit in @p element_size bytes.
 * @param[in] element_size 1, 2 or 4.
 * @param[in] count Number of elements.
 * @retval GPUMEM_SUCCESS
 * @retval GPUMEM_ERROR_INVALID_ARGUMENT @p dst is NULL or misaligned, @p element_size is not 1, 2 or 4,
 *         @p value does not fit, or the byte count overflows.
 * @retval GPUMEM_ERROR_INVALID_POINTER @p dst is plain host memory, which the device cannot write, or the
 *         range runs past the end of its allocation.
 * @retval GPUMEM_ERROR_STREAM_CAPTURE The legacy stream is blocked by a capture in progress.
 * @retval GPUMEM_ERROR_NO_DRIVER
 * @retval GPUMEM_ERROR_NO_DEVICE
 * @retval GPUMEM_ERROR_DRIVER
 * @par Thread safety
 * Thread-safe: any thread, concurrently, including on the same handle.
 * @since 0.1.0
 */
GPUMEM_API gpumem_status_t gpumem_memset(void* dst, uint32_t value, uint32_t element_size, size_t count);

/**
 * @brief Queues a memset as gpumem_memset() does, on a stream (`cuMemsetD8Async` and siblings).
 * @param[in] dst As for gpumem_memset().
 * @param[in] value As for gpumem_memset().
 * @param[in] element_size 1, 2 or 4.
 * @param[in] count Number of elements.
 * @param[in] stream The caller's stream, NULL, ::GPUMEM_STREAM_LEGACY or ::GPUMEM_STREAM_PER_THREAD.
 * @retval GPUMEM_SUCCESS
 * @retval GPUMEM_ERROR_INVALID_ARGUMENT As for gpumem_memset().
 * @retval GPUMEM_ERROR_INVALID_POINTER As for gpumem_memset().
 * @retval GPUMEM_ERROR_STREAM_CAPTURE
 * @retval GPUMEM_ERROR_NO_DRIVER
 * @retval GPUMEM_ERROR_NO_DEVICE
 * @retval GPUMEM_ERROR_DRIVER
 * @par Thread safety
 * Thread-safe: any thread, concurrently, including on the same handle.
 * @since 0.1.0
 */
GPUMEM_API gpumem_status_t gpumem_memset_async(void* dst, uint32_t value, uint32_t element_size, size_t count,
                                               gpumem_stream_t stream);

/**
 * @brief Copies @p size bytes from @p src to @p dst, synchronously (`cuMemcpy`).
 *
 * Either side may be device, managed, pinned or registered host, or plain host memory.
 * The ranges must not overlap. An address the driver does not know is taken for plain host
 * memory, so a freed device address is not caught: the host would write there.
 * @param[out] dst Destination.
 * @param[in] src Source.
 * @param[in] size Bytes.
 * @retval GPUMEM_SUCCESS
 * @retval GPUMEM_ERROR_INVALID_ARGUMENT @p dst or @p src is NULL, a range wraps around, or the ranges overlap.
 * @retval GPUMEM_ERROR_INVALID_POINTER A range runs past the end of its device allocation.
 * @retval GPUMEM_ERROR_STREAM_CAPTURE The legacy stream is blocked by a capture in progress.
 * @retval GPUMEM_ERROR_NO_DRIVER
 * @retval GPUMEM_ERROR_NO_DEVICE
 * @retval GPUMEM_ERROR_DRIVER
 * @par Thread safety
 * Thread-safe: any thread, concurrently, including on the same handle.
 * @since 0.1.0
 */
GPUMEM_API gpumem_status_t gpumem_copy(void* dst, const void* src, size_t size);

/**
 * @brief Queues a copy as gpumem_copy() does, on a stream (`cuMemcpyAsync`).
 *
 * Plain (pageable) host memory is staged by the driver, so the call may return only once the
 * host side has been read or written; use pinned memory for copies that overlap.
 * @param[out] dst Destination.
 * @param[in] src Source.
 * @param[in] size Bytes.
 * @param[in] stream The caller's stream, NULL, ::GPUMEM_STREAM_LEGACY or ::GPUMEM_STREAM_PER_THREAD.
 * @retval GPUMEM_SUCCESS
 * @retval GPUMEM_ERROR_INVALID_ARGUMENT As for gpumem_copy().
 * @retval GPUMEM_ERROR_INVALID_POINTER As for gpumem_copy().
 * @retval GPUMEM_ERROR_STREAM_CAPTURE
 * @retval GPUMEM_ERROR_NO_DRIVER
 * @retval GPUMEM_ERROR_NO_DEVICE
 * @retval GPUMEM_ERROR_DRIVER
 * @par Thread safety
 * Thread-safe: any thread, concurrently, including on the same handle.
 * @since 0.1.0
 */
GPUMEM_API gpumem_status_t gpumem_copy_async(void* dst, const void* src, size_t size, gpumem_stream_t stream);

#ifdef __cplusplus
}
#endif

#endif /* GPUMEM_COPY_H */
