/**
 * @file trace.h
 * @brief Recording what an allocator does: every allocation, free, failed allocation, and a
 *        pool's upstream reservations and releases, with time, thread, stream, size and address,
 *        to a compact file (docs/trace-format.md) that can be read and replayed on any machine.
 *
 * Recording costs a clock read and an uncontended lock per call; calls on a traced allocator
 * from several threads take turns on that lock.
 */
#ifndef GPUMEM_TRACE_H
#define GPUMEM_TRACE_H

#include "allocator.h"

#ifdef __cplusplus
extern "C" {
#endif

/** @brief A recording in progress, from gpumem_trace_start(). @since 0.3.0 */
typedef struct gpumem_trace_s gpumem_trace_t;

/**
 * @brief Starts recording an allocator's events to a new file.
 *
 * The file is created (an existing one is replaced) and written as the events come, in blocks of
 * 64 KiB; gpumem_trace_stop() writes the rest. Destroying the allocator completes the file too.
 * On a pool, the records include the blocks it takes from and gives back to its upstream.
 * @param[in] allocator The allocator to record; NULL for the current default.
 * @param[in] path The file to write.
 * @param[in] flags 0; no flag is defined yet.
 * @param[out] out_trace Receives the recording; NULL on failure.
 * @retval GPUMEM_SUCCESS
 * @retval GPUMEM_ERROR_INVALID_ARGUMENT @p path or @p out_trace is NULL, or @p flags is not 0.
 * @retval GPUMEM_ERROR_INVALID_HANDLE @p allocator is not a live allocator.
 * @retval GPUMEM_ERROR_BUSY The allocator is being recorded already.
 * @retval GPUMEM_ERROR_IO The file cannot be created or written.
 * @retval GPUMEM_ERROR_OUT_OF_MEMORY
 * @par Thread safety
 * Thread-safe: any thread, concurrently, including on the same handle.
 * @since 0.3.0
 */
GPUMEM_API gpumem_status_t gpumem_trace_start(gpumem_allocator_t* allocator, const char* path, uint32_t flags,
                                              gpumem_trace_t** out_trace);

/**
 * @brief Stops a recording, writes what is left and closes its file. The handle is then gone.
 * @param[in] trace The recording.
 * @retval GPUMEM_SUCCESS
 * @retval GPUMEM_ERROR_INVALID_HANDLE @p trace is NULL or stopped already.
 * @retval GPUMEM_ERROR_IO Writing the file failed at some point; the detail says how. The file
 *         holds the records before the failure. The recording is stopped all the same.
 * @par Thread safety
 * Per handle: concurrent calls on different handles; one handle is serialized by the caller.
 * @since 0.3.0
 */
GPUMEM_API gpumem_status_t gpumem_trace_stop(gpumem_trace_t* trace);

#ifdef __cplusplus
}
#endif

#endif /* GPUMEM_TRACE_H */
