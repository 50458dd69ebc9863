/**
 * @file array.h
 * @brief CUDA arrays: the 1D, 2D and 3D formatted memory that textures and surfaces read.
 */
#ifndef GPUMEM_ARRAY_H
#define GPUMEM_ARRAY_H

#include "core.h"

#ifdef __cplusplus
extern "C" {
#endif

/** @brief A CUDA array owned by gpumem. */
typedef struct gpumem_array_s gpumem_array_t;

/** @brief Element type of one channel of an array. @since 0.1.0 */
enum gpumem_format {
  GPUMEM_FORMAT_U8 = 1,  /**< 8-bit unsigned integer. */
  GPUMEM_FORMAT_U16 = 2, /**< 16-bit unsigned integer. */
  GPUMEM_FORMAT_U32 = 3, /**< 32-bit unsigned integer. */
  GPUMEM_FORMAT_I8 = 4,  /**< 8-bit signed integer. */
  GPUMEM_FORMAT_I16 = 5, /**< 16-bit signed integer. */
  GPUMEM_FORMAT_I32 = 6, /**< 32-bit signed integer. */
  GPUMEM_FORMAT_F16 = 7, /**< 16-bit float (half). */
  GPUMEM_FORMAT_F32 = 8  /**< 32-bit float. */
};

/**
 * @brief Shape and element type of an array.
 *
 * The rank follows from the extents, as in CUDA: @c height 0 is 1D, @c depth 0 is 2D,
 * all three non-zero is 3D. Initialize with ::GPUMEM_ARRAY_DESC_INIT or gpumem_array_desc_init().
 * @since 0.1.0
 */
typedef struct gpumem_array_desc_s {
  size_t struct_size; /**< Size of this struct as the caller knows it. */
  int32_t device;     /**< Device the array lives on. */
  int32_t format;     /**< One of ::gpumem_format. */
  uint32_t channels;  /**< Channels per element: 1, 2 or 4. */
  size_t width;       /**< Elements in x; not 0. */
  size_t height;      /**< Elements in y; 0 for 1D. */
  size_t depth;       /**< Elements in z; 0 for 1D and 2D. */
} gpumem_array_desc_t;

/** @brief Initializer for a ::gpumem_array_desc_t: device 0, one `float` channel, no extents. */
#define GPUMEM_ARRAY_DESC_INIT \
  { sizeof(gpumem_array_desc_t), 0, GPUMEM_FORMAT_F32, 1, 0, 0, 0 }

/**
 * @brief Fills an array description with the defaults of ::GPUMEM_ARRAY_DESC_INIT, for callers
 *        that cannot use the macro.
 *
 * @c desc->struct_size is set to the size this library fills, which is smaller than
 * @p struct_size when the caller was written for a newer gpumem.
 * @param[out] desc The description to fill.
 * @param[in] struct_size `sizeof(gpumem_array_desc_t)` as the caller knows it.
 * @retval GPUMEM_SUCCESS
 * @retval GPUMEM_ERROR_INVALID_ARGUMENT @p desc is NULL or @p struct_size is too small.
 * @par Thread safety
 * Thread-safe: any thread, concurrently, including on the same handle.
 * @since 0.1.0
 */
GPUMEM_NODISCARD GPUMEM_API gpumem_status_t gpumem_array_desc_init(gpumem_array_desc_t* desc, size_t struct_size);

/**
 * @brief Creates a CUDA array (`cuArray3DCreate`).
 * @param[in] desc Shape and element type.
 * @param[out] out_array Receives the array; NULL on failure.
 * @retval GPUMEM_SUCCESS
 * @retval GPUMEM_ERROR_INVALID_ARGUMENT @p desc or @p out_array is NULL, @c struct_size is too
 *         small, the format or channel count is not supported, @c width is 0, @c depth is set
 *         without @c height, or an extent exceeds the device's limit for that rank.
 * @retval GPUMEM_ERROR_OUT_OF_MEMORY
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
GPUMEM_NODISCARD GPUMEM_API gpumem_status_t gpumem_array_create(const gpumem_array_desc_t* desc,
                                                                gpumem_array_t** out_array);

/**
 * @brief Destroys an array and frees its memory (`cuArrayDestroy`).
 * @param[in] array An array from gpumem_array_create(), or NULL (nothing is done).
 * @retval GPUMEM_SUCCESS
 * @retval GPUMEM_ERROR_INVALID_HANDLE @p array is not a live array of gpumem's.
 * @retval GPUMEM_ERROR_DRIVER
 * @retval GPUMEM_ERROR_STREAM_CAPTURE A stream is being captured into a CUDA graph; nothing was done
 *         and the capture is still valid (docs/copy.md, "Stream capture").
 * @par Thread safety
 * Per handle: concurrent calls on different handles; one handle is serialized by the caller.
 * @since 0.1.0
 */
GPUMEM_NODISCARD GPUMEM_API gpumem_status_t gpumem_array_destroy(gpumem_array_t* array);

/**
 * @brief The shape and element type of an array, as the driver reports them
 *        (`cuArray3DGetDescriptor`).
 * @param[in] array A live array.
 * @param[in,out] out_desc @c struct_size set by the caller; the rest is filled in
 *                (zeroed on failure as far as @c struct_size reaches, @c struct_size kept).
 * @retval GPUMEM_SUCCESS
 * @retval GPUMEM_ERROR_INVALID_ARGUMENT @p out_desc is NULL or its @c struct_size is too small.
 * @retval GPUMEM_ERROR_INVALID_HANDLE @p array is not a live array of gpumem's.
 * @retval GPUMEM_ERROR_DRIVER
 * @par Thread safety
 * Thread-safe: any thread, concurrently, including on the same handle.
 * @since 0.1.0
 */
GPUMEM_NODISCARD GPUMEM_API gpumem_status_t gpumem_array_get_desc(const gpumem_array_t* array,
                                                                  gpumem_array_desc_t* out_desc);

#ifdef __cplusplus
}
#endif

#endif /* GPUMEM_ARRAY_H */
