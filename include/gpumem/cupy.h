/**
 * @file cupy.h
 * @brief CuPy's C-function allocator: the two functions that
 *        `cupy.cuda.memory.CFunctionAllocatorMemory(size, target, malloc_func, free_func, device)`
 *        calls, so that CuPy's device memory comes from gpumem without a Python call in between.
 *
 * Their signatures are the ones CuPy calls: `void* malloc(void* param, size_t size, int device)` and
 * `void free(void* param, void* ptr, int device)`; `int32_t` stands for `int`, the same type on
 * the platforms CuPy runs on. CuPy hands both the same `param`: here a ::gpumem_cupy_target_t that
 * names the allocator and the stream, since CuPy's current stream is known only to Python. From
 * Python, `gpumem.cupy.install()` makes the switch and keeps one target per allocator and stream.
 *
 * A target whose allocator is NULL stands for the default allocator of the device CuPy names
 * (gpumem_allocator_get_default()), looked up at each call: as with torch.h, do not change that
 * default while CuPy holds memory from it, or the frees go to the new default, which refuses them
 * (::GPUMEM_ERROR_NOT_OWNED), and the memory stays in use in the old one.
 *
 * CuPy learns of a failure only as a NULL pointer; the reason stays in gpumem_last_error_detail()
 * and gpumem_last_cuda_result() of the calling thread, and gpumem prints nothing.
 */
#ifndef GPUMEM_CUPY_H
#define GPUMEM_CUPY_H

#include "allocator.h"

#ifdef __cplusplus
extern "C" {
#endif

/**
 * @brief Where CuPy's memory comes from and goes back to: one allocator, ordered on one stream.
 *
 * It must live, unchanged, as long as memory allocated through it: the free reads it again.
 * @since 0.4.0
 */
typedef struct gpumem_cupy_target_s {
  size_t struct_size;            /**< `sizeof(gpumem_cupy_target_t)`. */
  gpumem_allocator_t* allocator; /**< The allocator; NULL for the default allocator of CuPy's device. */
  gpumem_stream_t stream;        /**< The stream the memory is used on: CuPy's current stream. */
} gpumem_cupy_target_t;

/**
 * @brief CuPy's allocation: @p size bytes from @p target's allocator, ordered on its stream.
 *
 * @param[in] target A ::gpumem_cupy_target_t.
 * @param[in] size Bytes; more than 0 (CuPy makes empty arrays without asking).
 * @param[in] device CuPy's current device, whose default allocator serves a target without one;
 *            not read when the target names its allocator.
 * @return The memory, or NULL on failure: @p target is NULL or its `struct_size` wrong, or @p size
 *         is 0 (::GPUMEM_ERROR_INVALID_ARGUMENT); the allocator is out of memory
 *         (::GPUMEM_ERROR_OUT_OF_MEMORY), or any other failure of gpumem_alloc(); for a target
 *         without an allocator, also @p device negative (::GPUMEM_ERROR_INVALID_ARGUMENT) or not
 *         there (::GPUMEM_ERROR_NO_DRIVER, ::GPUMEM_ERROR_NO_DEVICE, ::GPUMEM_ERROR_INVALID_DEVICE).
 *         The status is not returned: gpumem_last_error_detail() says what happened.
 * @par Thread safety
 * Thread-safe: any thread, concurrently, including on the same handle.
 * @since 0.4.0
 */
GPUMEM_API void* gpumem_cupy_alloc(void* target, size_t size, int32_t device);

/**
 * @brief CuPy's free: gives memory from gpumem_cupy_alloc() back to @p target's allocator, ordered
 *        on its stream.
 *
 * A failure changes nothing and, as CuPy expects no answer, is reported only through
 * gpumem_last_error_detail() of the calling thread: a bad @p target, a pointer the allocator did
 * not hand out or freed already (::GPUMEM_ERROR_NOT_OWNED from a pool), or any failure of
 * gpumem_free().
 * @param[in] target The ::gpumem_cupy_target_t the memory was allocated through.
 * @param[in] ptr What gpumem_cupy_alloc() returned, or NULL (nothing is done).
 * @param[in] device The device given to gpumem_cupy_alloc(); read only for a target without an
 *            allocator.
 * @par Thread safety
 * Thread-safe: any thread, concurrently, including on the same handle.
 * @since 0.4.0
 */
GPUMEM_API void gpumem_cupy_free(void* target, void* ptr, int32_t device);

#ifdef __cplusplus
}
#endif

#endif /* GPUMEM_CUPY_H */
