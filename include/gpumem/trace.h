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
GPUMEM_NODISCARD GPUMEM_API gpumem_status_t gpumem_trace_start(gpumem_allocator_t* allocator, const char* path,
                                                               uint32_t flags, gpumem_trace_t** out_trace);

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
GPUMEM_NODISCARD GPUMEM_API gpumem_status_t gpumem_trace_stop(gpumem_trace_t* trace);

/** @brief An open trace file being read, from gpumem_trace_reader_open(). @since 0.3.0 */
typedef struct gpumem_trace_reader_s gpumem_trace_reader_t;

/** @brief Kinds of trace record; their values are the file format's (docs/traces.md). @since 0.3.0 */
enum gpumem_trace_event {
  GPUMEM_TRACE_ALLOC = 1,          /**< An allocation: @c size asked, @c mem_size handed out, at @c address. */
  GPUMEM_TRACE_FREE = 2,           /**< The allocation at @c address was freed. */
  GPUMEM_TRACE_UPSTREAM_ALLOC = 3, /**< A pool took a block of @c size bytes at @c address from its upstream. */
  GPUMEM_TRACE_UPSTREAM_FREE = 4,  /**< A pool gave the block of @c size bytes at @c address back. */
  GPUMEM_TRACE_ALLOC_FAILED = 5    /**< An allocation of @c size bytes failed with @c status. */
};

/** @brief The header of a trace file. @since 0.3.0 */
typedef struct gpumem_trace_header_s {
  size_t struct_size;     /**< `sizeof(gpumem_trace_header_t)`. */
  uint32_t version;       /**< The file format's version. */
  int32_t device;         /**< The traced allocator's device; -1 for host memory. */
  uint64_t start_unix_ns; /**< Wall-clock time at the start of the recording, ns since 1970 (UTC). */
  char kind[32];          /**< The traced allocator's kind, NUL-terminated (cut to 31 bytes). */
} gpumem_trace_header_t;

/** @brief One record of a trace. @since 0.3.0 */
typedef struct gpumem_trace_record_s {
  size_t struct_size;     /**< `sizeof(gpumem_trace_record_t)`. */
  uint32_t event;         /**< One ::gpumem_trace_event. */
  uint32_t thread;        /**< The recording thread, numbered from 1. */
  uint64_t time_ns;       /**< Nanoseconds since the start of the recording. */
  uint64_t stream;        /**< The stream of the call, as its handle's value. */
  uint64_t address;       /**< The memory's address (0 for a failed allocation). */
  uint64_t size;          /**< Bytes asked for, or of the upstream block; 0 for a free. */
  uint64_t mem_size;      /**< Bytes handed out, for an allocation; else 0. */
  gpumem_status_t status; /**< The status of a failed allocation; else ::GPUMEM_SUCCESS. */
} gpumem_trace_record_t;

/**
 * @brief Opens a trace file for reading. Its header is read and checked; records are read as
 *        gpumem_trace_reader_next() reaches them, through a buffer of 64 KiB.
 * @param[in] path The file.
 * @param[out] out_reader Receives the reader; NULL on failure.
 * @retval GPUMEM_SUCCESS
 * @retval GPUMEM_ERROR_INVALID_ARGUMENT @p path or @p out_reader is NULL.
 * @retval GPUMEM_ERROR_IO The file cannot be read, is not a gpumem trace, or is of a format
 *         version this library does not read.
 * @retval GPUMEM_ERROR_OUT_OF_MEMORY
 * @par Thread safety
 * Thread-safe: any thread, concurrently, including on the same handle.
 * @since 0.3.0
 */
GPUMEM_NODISCARD GPUMEM_API gpumem_status_t gpumem_trace_reader_open(const char* path,
                                                                     gpumem_trace_reader_t** out_reader);

/**
 * @brief The header of an open trace.
 * @param[in] reader The reader.
 * @param[out] out_header Receives the header; set its @c struct_size first.
 * @retval GPUMEM_SUCCESS
 * @retval GPUMEM_ERROR_INVALID_ARGUMENT @p out_header is NULL or its @c struct_size is wrong.
 * @retval GPUMEM_ERROR_INVALID_HANDLE @p reader is NULL or closed.
 * @par Thread safety
 * Per handle: concurrent calls on different handles; one handle is serialized by the caller.
 * @since 0.3.0
 */
GPUMEM_NODISCARD GPUMEM_API gpumem_status_t gpumem_trace_reader_get_header(gpumem_trace_reader_t* reader,
                                                                           gpumem_trace_header_t* out_header);

/**
 * @brief The next record of a trace.
 * @param[in] reader The reader.
 * @param[out] out_record Receives the record; set its @c struct_size first. Cleared at the end.
 * @param[out] out_has_record Receives true with a record, false at the end of the file.
 * @retval GPUMEM_SUCCESS
 * @retval GPUMEM_ERROR_INVALID_ARGUMENT An output is NULL, or @p out_record's @c struct_size is wrong.
 * @retval GPUMEM_ERROR_INVALID_HANDLE @p reader is NULL or closed.
 * @retval GPUMEM_ERROR_IO The file is damaged here; the detail gives the byte offset. Later calls
 *         fail the same way.
 * @par Thread safety
 * Per handle: concurrent calls on different handles; one handle is serialized by the caller.
 * @since 0.3.0
 */
GPUMEM_NODISCARD GPUMEM_API gpumem_status_t gpumem_trace_reader_next(gpumem_trace_reader_t* reader,
                                                                     gpumem_trace_record_t* out_record,
                                                                     bool* out_has_record);

/**
 * @brief Closes a reader. NULL is accepted and does nothing.
 * @param[in] reader The reader.
 * @retval GPUMEM_SUCCESS
 * @retval GPUMEM_ERROR_INVALID_HANDLE @p reader is closed already.
 * @par Thread safety
 * Per handle: concurrent calls on different handles; one handle is serialized by the caller.
 * @since 0.3.0
 */
GPUMEM_NODISCARD GPUMEM_API gpumem_status_t gpumem_trace_reader_close(gpumem_trace_reader_t* reader);

#ifdef __cplusplus
}
#endif

#endif /* GPUMEM_TRACE_H */
