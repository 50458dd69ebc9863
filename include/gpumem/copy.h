/**
 * @file copy.h
 * @brief Memset, and copies in 1D, 2D and 3D between any two kinds of memory and CUDA arrays,
 *        synchronous or on a stream.
 *
 * The kind of each address (device, pinned or plain host, managed) is found from unified
 * addressing, so one call serves every direction, and between devices (peer access is enabled on
 * first need). A count or extent of zero succeeds and does nothing. The synchronous calls return
 * when the work is done; the `_async` calls queue it on a stream and return.
 *
 * Paths taken (docs/copy.md gives the figures): 2D and 3D copies between device memory of one
 * device run a copy kernel of gpumem's; 1D, 2D and 3D copies of 1 MiB or more between device
 * memory and plain (pageable) host memory are staged through gpumem's own page-locked buffers,
 * pipelined; everything else goes to the driver.
 */
#ifndef GPUMEM_COPY_H
#define GPUMEM_COPY_H

#include "array.h"
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
GPUMEM_NODISCARD GPUMEM_API gpumem_status_t gpumem_memset(void* dst, uint32_t value, uint32_t element_size,
                                                          size_t count);

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
GPUMEM_NODISCARD GPUMEM_API gpumem_status_t gpumem_memset_async(void* dst, uint32_t value, uint32_t element_size,
                                                                size_t count, gpumem_stream_t stream);

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
GPUMEM_NODISCARD GPUMEM_API gpumem_status_t gpumem_copy(void* dst, const void* src, size_t size);

/**
 * @brief Queues a copy as gpumem_copy() does, on a stream (`cuMemcpyAsync`).
 *
 * A copy with plain (pageable) host memory goes through page-locked staging buffers (gpumem's from
 * 1 MiB, the driver's below), so the call returns only once the host side has been read or
 * written; use pinned memory for copies that overlap with other work.
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
GPUMEM_NODISCARD GPUMEM_API gpumem_status_t gpumem_copy_async(void* dst, const void* src, size_t size,
                                                              gpumem_stream_t stream);

/**
 * @brief A 2D copy: @c height rows of @c width bytes.
 *
 * Each side is memory (a pointer, with the distance between its rows in @c pitch) or a CUDA array
 * (then the pointer is NULL and @c pitch is ignored). The region starts @c x bytes into row @c y
 * of its side; for an array, @c x and @c width are whole elements (format size × channels) and a
 * 1D array has one row. Initialize with ::GPUMEM_COPY2D_INIT or gpumem_copy2d_init().
 * @since 0.2.0
 */
typedef struct gpumem_copy2d_s {
  size_t struct_size;              /**< Size of this struct as the caller knows it. */
  void* dst;                       /**< Destination memory, or NULL when @c dst_array is set. */
  gpumem_array_t* dst_array;       /**< Destination array, or NULL when @c dst is set. */
  size_t dst_x;                    /**< Bytes into each destination row. */
  size_t dst_y;                    /**< First destination row. */
  size_t dst_pitch;                /**< Bytes from one destination row to the next; 0 means @c width. */
  const void* src;                 /**< Source memory, or NULL when @c src_array is set. */
  const gpumem_array_t* src_array; /**< Source array, or NULL when @c src is set. */
  size_t src_x;                    /**< Bytes into each source row. */
  size_t src_y;                    /**< First source row. */
  size_t src_pitch;                /**< Bytes from one source row to the next; 0 means @c width. */
  size_t width;                    /**< Bytes copied from each row. */
  size_t height;                   /**< Rows copied. */
} gpumem_copy2d_t;

/** @brief Initializer for a ::gpumem_copy2d_t: no sides, nothing to copy. */
#define GPUMEM_COPY2D_INIT \
  { sizeof(gpumem_copy2d_t), 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0 }

/**
 * @brief A 3D copy: @c depth slices of @c height rows of @c width bytes.
 *
 * As ::gpumem_copy2d_t, with a slice index @c z per side and, for memory, the rows per slice in
 * @c height (so that a slice is @c pitch × @c height bytes). A 2D array has one slice. Initialize
 * with ::GPUMEM_COPY3D_INIT or gpumem_copy3d_init().
 * @since 0.2.0
 */
typedef struct gpumem_copy3d_s {
  size_t struct_size;              /**< Size of this struct as the caller knows it. */
  void* dst;                       /**< Destination memory, or NULL when @c dst_array is set. */
  gpumem_array_t* dst_array;       /**< Destination array, or NULL when @c dst is set. */
  size_t dst_x;                    /**< Bytes into each destination row. */
  size_t dst_y;                    /**< First destination row of each slice. */
  size_t dst_z;                    /**< First destination slice. */
  size_t dst_pitch;                /**< Bytes from one destination row to the next; 0 means @c width. */
  size_t dst_height;               /**< Rows in a destination slice; 0 means @c height. */
  const void* src;                 /**< Source memory, or NULL when @c src_array is set. */
  const gpumem_array_t* src_array; /**< Source array, or NULL when @c src is set. */
  size_t src_x;                    /**< Bytes into each source row. */
  size_t src_y;                    /**< First source row of each slice. */
  size_t src_z;                    /**< First source slice. */
  size_t src_pitch;                /**< Bytes from one source row to the next; 0 means @c width. */
  size_t src_height;               /**< Rows in a source slice; 0 means @c height. */
  size_t width;                    /**< Bytes copied from each row. */
  size_t height;                   /**< Rows copied from each slice. */
  size_t depth;                    /**< Slices copied. */
} gpumem_copy3d_t;

/** @brief Initializer for a ::gpumem_copy3d_t: no sides, nothing to copy. */
#define GPUMEM_COPY3D_INIT \
  { sizeof(gpumem_copy3d_t), 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0 }

/**
 * @brief Fills a 2D copy description with the defaults of ::GPUMEM_COPY2D_INIT, for callers
 *        that cannot use the macro.
 * @param[out] copy The description to fill.
 * @param[in] struct_size `sizeof(gpumem_copy2d_t)` as the caller knows it.
 * @retval GPUMEM_SUCCESS
 * @retval GPUMEM_ERROR_INVALID_ARGUMENT @p copy is NULL or @p struct_size is too small.
 * @par Thread safety
 * Thread-safe: any thread, concurrently, including on the same handle.
 * @since 0.2.0
 */
GPUMEM_NODISCARD GPUMEM_API gpumem_status_t gpumem_copy2d_init(gpumem_copy2d_t* copy, size_t struct_size);

/**
 * @brief Fills a 3D copy description with the defaults of ::GPUMEM_COPY3D_INIT, for callers
 *        that cannot use the macro.
 * @param[out] copy The description to fill.
 * @param[in] struct_size `sizeof(gpumem_copy3d_t)` as the caller knows it.
 * @retval GPUMEM_SUCCESS
 * @retval GPUMEM_ERROR_INVALID_ARGUMENT @p copy is NULL or @p struct_size is too small.
 * @par Thread safety
 * Thread-safe: any thread, concurrently, including on the same handle.
 * @since 0.2.0
 */
GPUMEM_NODISCARD GPUMEM_API gpumem_status_t gpumem_copy3d_init(gpumem_copy3d_t* copy, size_t struct_size);

/**
 * @brief Copies a 2D region, synchronously.
 *
 * Either side may be device, managed, pinned or registered host, or plain host memory, or a CUDA
 * array, on any device. Nothing is written unless the whole copy is valid.
 * @param[in] copy The copy; a width or height of 0 succeeds and does nothing once the sides are
 *        well formed (checks 1 to 4 of docs/copy.md).
 * @retval GPUMEM_SUCCESS
 * @retval GPUMEM_ERROR_INVALID_ARGUMENT @p copy is NULL or its @c struct_size too small; a side has
 *         both or neither of a pointer and an array; a pitch is smaller than @c width; an array
 *         position or width is not whole elements; the two regions share bytes; a region's end
 *         overflows the address space; a region runs past the end of its array.
 * @retval GPUMEM_ERROR_INVALID_POINTER A region runs past the end of its device or managed
 *         allocation.
 * @retval GPUMEM_ERROR_INVALID_HANDLE An array is not live.
 * @retval GPUMEM_ERROR_STREAM_CAPTURE A capture in progress forbids synchronous work.
 * @retval GPUMEM_ERROR_NO_DRIVER
 * @retval GPUMEM_ERROR_NO_DEVICE
 * @retval GPUMEM_ERROR_DRIVER
 * @par Thread safety
 * Thread-safe: any thread, concurrently, including on the same handle.
 * @since 0.2.0
 */
GPUMEM_NODISCARD GPUMEM_API gpumem_status_t gpumem_copy2d(const gpumem_copy2d_t* copy);

/**
 * @brief Queues a 2D copy as gpumem_copy2d() does, on a stream.
 * @param[in] copy The copy; read before the call returns.
 * @param[in] stream The caller's stream, NULL, ::GPUMEM_STREAM_LEGACY or ::GPUMEM_STREAM_PER_THREAD.
 * @retval GPUMEM_SUCCESS
 * @retval GPUMEM_ERROR_INVALID_ARGUMENT As for gpumem_copy2d().
 * @retval GPUMEM_ERROR_INVALID_POINTER As for gpumem_copy2d().
 * @retval GPUMEM_ERROR_INVALID_HANDLE As for gpumem_copy2d().
 * @retval GPUMEM_ERROR_STREAM_CAPTURE The stream is being captured and the copy cannot be.
 * @retval GPUMEM_ERROR_NO_DRIVER
 * @retval GPUMEM_ERROR_NO_DEVICE
 * @retval GPUMEM_ERROR_DRIVER
 * @par Thread safety
 * Thread-safe: any thread, concurrently, including on the same handle.
 * @since 0.2.0
 */
GPUMEM_NODISCARD GPUMEM_API gpumem_status_t gpumem_copy2d_async(const gpumem_copy2d_t* copy, gpumem_stream_t stream);

/**
 * @brief Copies a 3D region, synchronously; as gpumem_copy2d(), in slices.
 * @param[in] copy The copy; a width, height or depth of 0 succeeds and does nothing once the sides
 *        are well formed (checks 1 to 4 of docs/copy.md).
 * @retval GPUMEM_SUCCESS
 * @retval GPUMEM_ERROR_INVALID_ARGUMENT As for gpumem_copy2d(), and a side's rows per slice is
 *         smaller than @c height.
 * @retval GPUMEM_ERROR_INVALID_POINTER As for gpumem_copy2d().
 * @retval GPUMEM_ERROR_INVALID_HANDLE As for gpumem_copy2d().
 * @retval GPUMEM_ERROR_STREAM_CAPTURE As for gpumem_copy2d().
 * @retval GPUMEM_ERROR_NO_DRIVER
 * @retval GPUMEM_ERROR_NO_DEVICE
 * @retval GPUMEM_ERROR_DRIVER
 * @par Thread safety
 * Thread-safe: any thread, concurrently, including on the same handle.
 * @since 0.2.0
 */
GPUMEM_NODISCARD GPUMEM_API gpumem_status_t gpumem_copy3d(const gpumem_copy3d_t* copy);

/**
 * @brief Queues a 3D copy as gpumem_copy3d() does, on a stream.
 * @param[in] copy The copy; read before the call returns.
 * @param[in] stream The caller's stream, NULL, ::GPUMEM_STREAM_LEGACY or ::GPUMEM_STREAM_PER_THREAD.
 * @retval GPUMEM_SUCCESS
 * @retval GPUMEM_ERROR_INVALID_ARGUMENT As for gpumem_copy3d().
 * @retval GPUMEM_ERROR_INVALID_POINTER As for gpumem_copy3d().
 * @retval GPUMEM_ERROR_INVALID_HANDLE As for gpumem_copy3d().
 * @retval GPUMEM_ERROR_STREAM_CAPTURE The stream is being captured and the copy cannot be.
 * @retval GPUMEM_ERROR_NO_DRIVER
 * @retval GPUMEM_ERROR_NO_DEVICE
 * @retval GPUMEM_ERROR_DRIVER
 * @par Thread safety
 * Thread-safe: any thread, concurrently, including on the same handle.
 * @since 0.2.0
 */
GPUMEM_NODISCARD GPUMEM_API gpumem_status_t gpumem_copy3d_async(const gpumem_copy3d_t* copy, gpumem_stream_t stream);

/**
 * @brief Bytes of page-locked staging memory gpumem holds for copies from and to plain host
 *        memory.
 *
 * Staging buffers are made on first need, reused, and never exceed
 * ::GPUMEM_COPY_STAGING_LIMIT bytes in all; when all are in use a copy goes to the driver.
 * @param[out] out_bytes Bytes held.
 * @retval GPUMEM_SUCCESS
 * @retval GPUMEM_ERROR_INVALID_ARGUMENT @p out_bytes is NULL.
 * @par Thread safety
 * Thread-safe: any thread, concurrently, including on the same handle.
 * @since 0.2.0
 */
GPUMEM_NODISCARD GPUMEM_API gpumem_status_t gpumem_copy_staging_get_held(size_t* out_bytes);

/**
 * @brief Frees the staging buffers that no copy is using; those in use are freed when their copy
 *        ends if this was called during it.
 *
 * Copies still queued on streams that read or write the buffers are waited for first.
 * @retval GPUMEM_SUCCESS
 * @retval GPUMEM_ERROR_STREAM_CAPTURE A stream is being captured into a CUDA graph; nothing was done
 *         and the capture is still valid (docs/copy.md, "Stream capture").
 * @par Thread safety
 * Thread-safe: any thread, concurrently, including on the same handle.
 * @since 0.2.0
 */
GPUMEM_NODISCARD GPUMEM_API gpumem_status_t gpumem_copy_staging_release(void);

/** @brief Most bytes of staging memory gpumem holds at once (two sets of 4 buffers of 4 MiB). */
#define GPUMEM_COPY_STAGING_LIMIT ((size_t)32 << 20)

#ifdef __cplusplus
}
#endif

#endif /* GPUMEM_COPY_H */
