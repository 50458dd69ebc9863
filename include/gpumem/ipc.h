/**
 * @file ipc.h
 * @brief Sharing device memory between processes: any live allocation of a gpumem allocator is
 *        exported as a handle, opened in another process and closed there.
 *
 * A handle is two things: ::gpumem_ipc_handle_t, plain bytes that any channel carries (a pipe, a
 * socket, a file, a pickle), and file descriptors, which only a Unix-domain socket carries
 * (`SCM_RIGHTS`, also between containers that share the socket). gpumem_ipc_send() and
 * gpumem_ipc_receive() move both over such a socket; a program with a channel of its own takes
 * the descriptors from gpumem_ipc_export_fds() and gives them to gpumem_ipc_open().
 *
 * Memory of every device allocator is shared: `cuMemAlloc` memory through the driver's IPC
 * handle (`cuIpcGetMemHandle`), memory mapped through virtual memory management (the VM allocator
 * and the device pools over it) through a descriptor for each physical allocation
 * (`cuMemExportToShareableHandle`). An allocation of a pool is shared as the segment that holds
 * it and its offset, so an importer opens each segment (or, over VM, each unit of a range) once,
 * however many of its allocations it opens.
 *
 * The rules (docs/ipc.md is the guide):
 * - A handle is for the processes it is sent to. Each may open it any number of times (each open
 *   is counted and closed once); once every process that opened it has closed it, the handle is
 *   spent. Send a new export to each receiver.
 * - Memory the exporter frees while a handle of it is open elsewhere, or sent and not opened yet,
 *   stays valid: the exporter's allocator keeps it out of reuse until every importer has closed
 *   it or exited. gpumem_ipc_collect() returns such memory once that is so, and every export and
 *   later free checks too. A process that dies lets go of what it opened; a handle that is sent
 *   and never opened keeps its memory until the exporter exits.
 * - Ordering is the caller's, as with the driver's IPC: the importer's work on the memory must
 *   come after the exporter's writes (an IPC event, or a synchronize before sending).
 *   gpumem_ipc_close() synchronizes the importer's device before the memory goes.
 * - Memory the exporter's process loses by exiting stays valid in an importer that opened it over
 *   VM (the importer holds the physical memory); `cuMemAlloc` memory follows the driver's rule.
 */
#ifndef GPUMEM_IPC_H
#define GPUMEM_IPC_H

#include "allocator.h"

#ifdef __cplusplus
extern "C" {
#endif

/** @brief Bytes of an IPC handle. */
#define GPUMEM_IPC_HANDLE_SIZE 192

/**
 * @brief An exported allocation, as plain bytes: what an importer needs, besides the file
 *        descriptors the handle names, to open it. Checked when opened (a forged or damaged
 *        handle is refused).
 * @since 0.4.0
 */
typedef struct gpumem_ipc_handle_s {
  uint8_t bytes[GPUMEM_IPC_HANDLE_SIZE]; /**< Opaque. */
} gpumem_ipc_handle_t;

/** @brief What this process shares, from gpumem_ipc_get_info(). @since 0.4.0 */
typedef struct gpumem_ipc_info_s {
  size_t struct_size;     /**< `sizeof(gpumem_ipc_info_t)`. */
  uint64_t exported;      /**< Allocations of this process with a handle not yet spent. */
  uint64_t held;          /**< Of them, allocations freed here and kept for importers. */
  uint64_t held_bytes;    /**< Their bytes (as allocated). */
  uint64_t imports;       /**< Opens of other processes' memory not yet closed, each counted. */
  uint64_t open_segments; /**< Segments (or, over VM, units) those opens have mapped here. */
  uint64_t open_bytes;    /**< Their bytes. */
  uint64_t segment_opens; /**< Segments and units mapped here since the process started. */
} gpumem_ipc_info_t;

/**
 * @brief Exports a live allocation for other processes.
 * @param[in] allocator The allocator that handed out @p ptr; NULL for the current default.
 * @param[in] ptr The start of a live allocation of @p allocator on a device.
 * @param[out] out_handle Receives the handle; zeroed on failure.
 * @param[out] out_fd_count Receives how many file descriptors go with the handle (1, or 1 and one
 *             per physical allocation over VM); 0 on failure. May be NULL.
 * @retval GPUMEM_SUCCESS
 * @retval GPUMEM_ERROR_INVALID_ARGUMENT @p ptr or @p out_handle is NULL.
 * @retval GPUMEM_ERROR_INVALID_HANDLE @p allocator is not a live allocator.
 * @retval GPUMEM_ERROR_NOT_OWNED @p ptr is not the start of a live allocation of @p allocator.
 * @retval GPUMEM_ERROR_NOT_SUPPORTED The allocator's memory cannot be shared (host, managed and
 *         stream-ordered memory, and the caller's functions), or the device cannot export it.
 * @retval GPUMEM_ERROR_IO The handle's shared bookkeeping could not be made.
 * @retval GPUMEM_ERROR_DRIVER The driver refused (gpumem_last_cuda_result()).
 * @par Thread safety
 * Thread-safe: any thread, concurrently, including on the same handle.
 * @since 0.4.0
 */
GPUMEM_NODISCARD GPUMEM_API gpumem_status_t gpumem_ipc_export(gpumem_allocator_t* allocator, void* ptr,
                                                              gpumem_ipc_handle_t* out_handle, size_t* out_fd_count);

/**
 * @brief The file descriptors that go with a handle this process exported: new descriptors
 *        (close-on-exec), the caller's to send and then close.
 * @param[in] handle A handle from gpumem_ipc_export() in this process, not spent.
 * @param[out] out_fds Receives @p count descriptors; left as it was on failure.
 * @param[in] count The handle's count of descriptors, as gpumem_ipc_export() gave it.
 * @retval GPUMEM_SUCCESS
 * @retval GPUMEM_ERROR_INVALID_ARGUMENT A pointer is NULL, @p count is not the handle's, the handle
 *         is not one this process exported, or its memory is gone (spent, or freed and returned).
 * @retval GPUMEM_ERROR_IO A descriptor could not be made (the process's limit on open files).
 * @retval GPUMEM_ERROR_DRIVER The driver refused (gpumem_last_cuda_result()).
 * @par Thread safety
 * Thread-safe: any thread, concurrently, including on the same handle.
 * @since 0.4.0
 */
GPUMEM_NODISCARD GPUMEM_API gpumem_status_t gpumem_ipc_export_fds(const gpumem_ipc_handle_t* handle, int* out_fds,
                                                                  size_t count);

/**
 * @brief Opens another process's exported memory here, on the device that holds it (found by its
 *        UUID, whatever this process numbers it).
 * @param[in] handle A handle from gpumem_ipc_export() in another process (or this one).
 * @param[in] fds The handle's file descriptors, in the order gpumem_ipc_export_fds() gave them;
 *            still the caller's to close, whatever the outcome.
 * @param[in] fd_count How many; the handle's count.
 * @param[out] out_ptr Receives the device address of the memory; NULL on failure.
 * @param[out] out_size Receives its size in bytes, as allocated by the exporter; 0 on failure. May
 *             be NULL.
 * @retval GPUMEM_SUCCESS
 * @retval GPUMEM_ERROR_INVALID_ARGUMENT A pointer is NULL, the handle is not a gpumem handle (or is
 *         damaged), its descriptors are not the ones it needs, or it is spent or its memory gone.
 * @retval GPUMEM_ERROR_INVALID_DEVICE The memory's device is not one this process sees.
 * @retval GPUMEM_ERROR_OUT_OF_MEMORY No addresses (or host memory) left to map it.
 * @retval GPUMEM_ERROR_NO_DRIVER, GPUMEM_ERROR_NO_DEVICE No driver or no device.
 * @retval GPUMEM_ERROR_DRIVER The driver refused (gpumem_last_cuda_result()).
 * @par Thread safety
 * Thread-safe: any thread, concurrently, including on the same handle.
 * @since 0.4.0
 */
GPUMEM_NODISCARD GPUMEM_API gpumem_status_t gpumem_ipc_open(const gpumem_ipc_handle_t* handle, const int* fds,
                                                            size_t fd_count, void** out_ptr, size_t* out_size);

/**
 * @brief Closes one open of another process's memory. The last close of a segment synchronizes
 *        its device and unmaps it; the exporter may then reuse the memory.
 * @param[in] ptr An address gpumem_ipc_open() returned, open here.
 * @retval GPUMEM_SUCCESS
 * @retval GPUMEM_ERROR_INVALID_ARGUMENT @p ptr is NULL.
 * @retval GPUMEM_ERROR_NOT_OWNED @p ptr is not open here (never opened, or closed as often as opened).
 * @retval GPUMEM_ERROR_STREAM_CAPTURE The device is capturing a graph: the synchronize before an
 *         unmap is not allowed then.
 * @retval GPUMEM_ERROR_DRIVER The driver refused (gpumem_last_cuda_result()); the open stays open.
 * @par Thread safety
 * Thread-safe: any thread, concurrently, including on the same handle.
 * @since 0.4.0
 */
GPUMEM_NODISCARD GPUMEM_API gpumem_status_t gpumem_ipc_close(void* ptr);

/**
 * @brief Sends a handle this process exported, with its file descriptors, over a connected
 *        Unix-domain socket (`SCM_RIGHTS`).
 * @param[in] socket A connected `AF_UNIX` stream socket.
 * @param[in] handle A handle from gpumem_ipc_export() in this process, not spent.
 * @retval GPUMEM_SUCCESS
 * @retval GPUMEM_ERROR_INVALID_ARGUMENT @p handle is NULL or not sendable (see
 *         gpumem_ipc_export_fds()).
 * @retval GPUMEM_ERROR_IO The socket refused (closed, not a Unix-domain socket); part of the
 *         message may have gone.
 * @retval GPUMEM_ERROR_DRIVER The driver refused (gpumem_last_cuda_result()).
 * @par Thread safety
 * Thread-safe: any thread, concurrently, including on the same handle; two sends on one socket at
 * once interleave, so serialize those.
 * @since 0.4.0
 */
GPUMEM_NODISCARD GPUMEM_API gpumem_status_t gpumem_ipc_send(int socket, const gpumem_ipc_handle_t* handle);

/**
 * @brief Receives a handle that gpumem_ipc_send() sent over a Unix-domain socket and opens it, as
 *        gpumem_ipc_open() does; the descriptors received are closed.
 * @param[in] socket A connected `AF_UNIX` stream socket.
 * @param[out] out_ptr Receives the device address of the memory; NULL on failure.
 * @param[out] out_size Receives its size in bytes; 0 on failure. May be NULL.
 * @retval GPUMEM_SUCCESS
 * @retval GPUMEM_ERROR_IO The socket was closed or refused before a whole handle came.
 * @retval GPUMEM_ERROR_INVALID_ARGUMENT @p out_ptr is NULL, or what came is not a gpumem handle.
 * @retval GPUMEM_ERROR_INVALID_DEVICE, GPUMEM_ERROR_OUT_OF_MEMORY, GPUMEM_ERROR_NO_DRIVER,
 *         GPUMEM_ERROR_NO_DEVICE, GPUMEM_ERROR_DRIVER As gpumem_ipc_open().
 * @par Thread safety
 * Thread-safe: any thread, concurrently; two receives on one socket at once interleave, so
 * serialize those.
 * @since 0.4.0
 */
GPUMEM_NODISCARD GPUMEM_API gpumem_status_t gpumem_ipc_receive(int socket, void** out_ptr, size_t* out_size);

/**
 * @brief Frees what this process freed while other processes held it, wherever every importer has
 *        closed it or exited since (PyTorch's `torch.cuda.ipc_collect()`).
 * @param[out] out_freed Receives the bytes returned to their allocators; may be NULL.
 * @retval GPUMEM_SUCCESS
 * @retval GPUMEM_ERROR_DRIVER An allocator refused the memory back; it stays held, and the next
 *         collect tries again.
 * @par Thread safety
 * Thread-safe: any thread, concurrently, including on the same handle.
 * @since 0.4.0
 */
GPUMEM_NODISCARD GPUMEM_API gpumem_status_t gpumem_ipc_collect(uint64_t* out_freed);

/**
 * @brief What this process shares now: its exports and what they hold, and what it has opened.
 * @param[in,out] out_info @c struct_size set by the caller; the rest is filled in (zeroed on
 *                failure as far as @c struct_size reaches, @c struct_size kept).
 * @retval GPUMEM_SUCCESS
 * @retval GPUMEM_ERROR_INVALID_ARGUMENT @p out_info is NULL or its @c struct_size is not valid.
 * @par Thread safety
 * Thread-safe: any thread, concurrently, including on the same handle.
 * @since 0.4.0
 */
GPUMEM_NODISCARD GPUMEM_API gpumem_status_t gpumem_ipc_get_info(gpumem_ipc_info_t* out_info);

#ifdef __cplusplus
}
#endif

#endif /* GPUMEM_IPC_H */
