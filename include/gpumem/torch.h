/**
 * @file torch.h
 * @brief PyTorch's pluggable allocator: the two functions that
 *        `torch.cuda.memory.CUDAPluggableAllocator(path, "gpumem_torch_alloc", "gpumem_torch_free")`
 *        loads from libgpumem, so that PyTorch's CUDA memory comes from gpumem.
 *
 * Their signatures are the ones PyTorch calls: `void* alloc(ssize_t size, int device,
 * cudaStream_t stream)` and `void free(void* ptr, ssize_t size, int device, cudaStream_t stream)`.
 * `ptrdiff_t` stands for `ssize_t` (POSIX, not C99) and `int32_t` for `int`: on LP64 Linux, where
 * PyTorch's CUDA builds run, each pair is the same type; ::gpumem_stream_t has the representation
 * of `cudaStream_t`. From Python, `gpumem.torch.install()` makes the switch.
 *
 * Memory comes from, and goes back to, the default allocator of the device PyTorch names
 * (gpumem_allocator_get_default(): the device's pool, gpumem_pool_get_device(), unless another was
 * set); threads' overrides (gpumem_allocator_set_thread()) play no part, since PyTorch frees on
 * whichever thread drops a tensor. Nothing remembers which allocator gave a pointer, so do not
 * change the default allocator of a device (gpumem_allocator_set_default()) while PyTorch holds
 * memory from it: the frees of that memory would go to the new default, which refuses them
 * (::GPUMEM_ERROR_NOT_OWNED), and the memory would stay in use in the old one.
 *
 * From gpumem_torch_alloc(), PyTorch learns of a failure only as a NULL pointer, which it does not
 * check; gpumem_torch_alloc_raising() throws PyTorch's own exception instead. The reason stays
 * where gpumem keeps it, in gpumem_last_error_detail() and gpumem_last_cuda_result() of the thread
 * that called; gpumem prints nothing.
 */
#ifndef GPUMEM_TORCH_H
#define GPUMEM_TORCH_H

#include "allocator.h"

#ifdef __cplusplus
extern "C" {
#endif

/**
 * @brief PyTorch's allocation: @p size bytes from the default allocator of @p device, ordered on
 *        @p stream.
 *
 * A size of 0 (PyTorch's empty tensors) is served as a size of 1, the allocator's smallest block
 * (512 bytes from a pool): PyTorch takes NULL as a failure, and gpumem_alloc() refuses 0.
 * @param[in] size Bytes; 0 or more.
 * @param[in] device Device index (PyTorch's current device).
 * @param[in] stream The stream the memory is used on first (PyTorch's current stream).
 * @return The memory, or NULL on failure: @p size is negative (::GPUMEM_ERROR_INVALID_ARGUMENT),
 *         the device is not there (::GPUMEM_ERROR_NO_DRIVER, ::GPUMEM_ERROR_NO_DEVICE,
 *         ::GPUMEM_ERROR_INVALID_DEVICE, ::GPUMEM_ERROR_INVALID_ARGUMENT for a negative index),
 *         it is out of memory (::GPUMEM_ERROR_OUT_OF_MEMORY), or any failure of gpumem_alloc(). The
 *         status is not returned: gpumem_last_error_detail() says what happened.
 * @par Thread safety
 * Thread-safe: any thread, concurrently, including on the same handle.
 * @since 0.4.0
 */
GPUMEM_API void* gpumem_torch_alloc(ptrdiff_t size, int32_t device, gpumem_stream_t stream);

/**
 * @brief gpumem_torch_alloc() for PyTorch's pluggable allocator, which does not check for NULL: a
 *        failure is thrown as PyTorch's own C++ exception, so that Python sees
 *        `torch.OutOfMemoryError` (out of memory) or `RuntimeError` (any other failure) with
 *        gpumem's detail as its message, and the tensor is never made.
 *
 * `gpumem.torch.install()` loads this one. The exception is PyTorch's `c10::OutOfMemoryError` or
 * `c10::Error`, made from what `libc10.so` exports; where no such library is loaded in the
 * process, or it lacks those symbols, nothing is thrown and NULL is returned as by
 * gpumem_torch_alloc(). Only C++ that catches PyTorch's exceptions may call it (PyTorch does):
 * an exception through a C caller's frames ends the process, so C, ctypes and other foreign
 * callers use gpumem_torch_alloc().
 * @param[in] size Bytes; 0 or more.
 * @param[in] device Device index.
 * @param[in] stream The stream the memory is used on first.
 * @return The memory; on failure, see above. gpumem_last_error_detail() holds the detail either way.
 * @par Thread safety
 * Thread-safe: any thread, concurrently, including on the same handle.
 * @since 0.4.0
 */
GPUMEM_API void* gpumem_torch_alloc_raising(ptrdiff_t size, int32_t device, gpumem_stream_t stream);

/**
 * @brief PyTorch's free: gives memory from gpumem_torch_alloc() back to the default allocator of
 *        @p device, ordered on @p stream.
 *
 * A failure changes nothing and, as PyTorch expects no answer, is reported only through
 * gpumem_last_error_detail() of the calling thread: a pointer the default allocator did not hand
 * out, or freed already (::GPUMEM_ERROR_NOT_OWNED from a pool), a device that is not there, or
 * any failure of gpumem_free(). Call gpumem_free() on the allocator itself to see the status.
 * @param[in] ptr What gpumem_torch_alloc() returned for @p device, or NULL (nothing is done).
 * @param[in] size The size it was asked for; not needed, and not checked.
 * @param[in] device The device it was allocated for.
 * @param[in] stream The stream it was last used on (PyTorch passes the allocation's stream).
 * @par Thread safety
 * Thread-safe: any thread, concurrently, including on the same handle.
 * @since 0.4.0
 */
GPUMEM_API void gpumem_torch_free(void* ptr, ptrdiff_t size, int32_t device, gpumem_stream_t stream);

/**
 * @brief Chooses the allocator gpumem_torch_alloc() and gpumem_torch_free() use for a device, in
 *        place of its default: a tenant of the device pool (tenant.h), so that PyTorch has a budget
 *        and figures of its own on the pool the process shares. Kept busy (not destroyed) while set.
 * Set it before PyTorch allocates on the device, and leave it while PyTorch holds memory from it:
 * frees go to whichever allocator is set when they come.
 * @param[in] device Device index.
 * @param[in] allocator The allocator; NULL: the device's default again.
 * @retval GPUMEM_SUCCESS
 * @retval GPUMEM_ERROR_INVALID_ARGUMENT @p device is negative or beyond 63.
 * @retval GPUMEM_ERROR_INVALID_HANDLE @p allocator is not a live allocator.
 * @par Thread safety
 * Thread-safe: any thread, concurrently, including on the same handle.
 * @since 0.4.0
 */
GPUMEM_NODISCARD GPUMEM_API gpumem_status_t gpumem_torch_set_allocator(int32_t device, gpumem_allocator_t* allocator);

/**
 * @brief PyTorch's record-stream function (`Tensor.record_stream`): marks memory from
 *        gpumem_torch_alloc() as used on @p stream too, so that its free is fenced on that stream
 *        before the memory is handed out again (gpumem_pool_record_stream()).
 * `gpumem.torch.install()` hands it to PyTorch's pluggable allocator. A failure (memory not from
 * gpumem_torch_alloc(), an allocator that is not a pool or a tenant of one) changes nothing and is
 * reported only through gpumem_last_error_detail().
 * @param[in] ptr The start of memory from gpumem_torch_alloc().
 * @param[in] stream The other stream.
 * @par Thread safety
 * Thread-safe: any thread, concurrently, including on the same handle.
 * @since 0.4.0
 */
GPUMEM_API void gpumem_torch_record_stream(void* ptr, gpumem_stream_t stream);

#ifdef __cplusplus
}
#endif

#endif /* GPUMEM_TORCH_H */
