/**
 * @file trace.h
 * @brief Recording what an allocator does: every allocation, free, failed allocation, and a
 *        pool's upstream reservations and releases, with time, thread, stream, size and address,
 *        to a compact file (docs/trace-format.md) that can be read and replayed on any machine.
 *
 * Recording costs a clock read and an uncontended lock per call; calls on a traced allocator
 * from several threads take turns on that lock. A recording may also keep, for each allocation,
 * where it came from: the native call stack, the caller's own frames (a Python stack, say), or
 * both (gpumem_trace_start_with_params()); a recording without them costs nothing more.
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
 * @param[in] flags 0; frames are recorded by gpumem_trace_start_with_params().
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

/** @brief The most frames of each kind that a record carries (gpumem_trace_params_t::max_frames). @since 0.4.0 */
#define GPUMEM_TRACE_MAX_FRAMES 64

/** @brief What a recording keeps beside the events (gpumem_trace_params_t::flags). @since 0.4.0 */
enum gpumem_trace_flags {
  GPUMEM_TRACE_NATIVE_FRAMES = 0x1 /**< Each allocation's native call stack: the return addresses of its callers
                                        (libgpumem's own left out), each with its module and exported symbol. */
};

/**
 * @brief Gives the caller's own frames for an allocation being recorded: a language's stack that
 *        native frames do not show (Python's, as `file:line function`). Runs on the allocating
 *        thread before the record is written, outside the recorder's lock and the traced
 *        allocator's (an allocator built on the traced one, such as a pool over it, may hold its
 *        own); it must return normally. Allocations it makes from the traced allocator are
 *        recorded without caller frames.
 *
 * It runs on whichever thread allocates, native threads too: one that takes a lock (a language
 * runtime's, such as Python's GIL) makes every traced allocation take it, so a thread that holds
 * that lock must not wait for a thread that allocates from the traced allocator, or both wait for
 * ever. It may stop its own recording with gpumem_trace_stop(): the allocation it was called for
 * is then not recorded, and gpumem_trace_stop() waits for the calls on other threads, not for
 * this one.
 * @param[out] buffer Where to write the frames: text, one frame a line (a newline between
 *             them), innermost first, no NUL needed (one ends the text). Lines past
 *             gpumem_trace_params_t::max_frames are dropped, and each is cut to 4096 bytes.
 * @param[in] capacity Bytes of @p buffer: 512 for each of gpumem_trace_params_t::max_frames.
 * @param[in] user_data gpumem_trace_params_t::frames_user_data.
 * @return The bytes written, at most @p capacity; 0 for none.
 * @since 0.4.0
 */
typedef size_t (*gpumem_trace_frames_fn)(char* buffer, size_t capacity, void* user_data);

/**
 * @brief How to record: what to keep beside the events. Initialize with
 *        ::GPUMEM_TRACE_PARAMS_INIT or gpumem_trace_params_init().
 * @since 0.4.0
 */
typedef struct gpumem_trace_params_s {
  size_t struct_size;            /**< `sizeof(gpumem_trace_params_t)`. */
  uint32_t flags;                /**< ::gpumem_trace_flags; 0 for the events alone. */
  uint32_t max_frames;           /**< The most native frames, and the most caller frames, each record keeps:
                                      1 to ::GPUMEM_TRACE_MAX_FRAMES. */
  gpumem_trace_frames_fn frames; /**< Gives each allocation's caller frames; NULL for none. */
  void* frames_user_data;        /**< Passed to @c frames. */
} gpumem_trace_params_t;

/** @brief Initializer for ::gpumem_trace_params_t: the events alone; 16 frames once asked for. */
#define GPUMEM_TRACE_PARAMS_INIT \
  { sizeof(gpumem_trace_params_t), 0, 16, NULL, NULL }

/**
 * @brief Fills @p params with the defaults of ::GPUMEM_TRACE_PARAMS_INIT.
 * @param[out] params The struct to fill.
 * @param[in] struct_size `sizeof(gpumem_trace_params_t)` as the caller knows it.
 * @retval GPUMEM_SUCCESS
 * @retval GPUMEM_ERROR_INVALID_ARGUMENT @p params is NULL or @p struct_size is too small.
 * @par Thread safety
 * Thread-safe: any thread, concurrently, including on the same handle.
 * @since 0.4.0
 */
GPUMEM_NODISCARD GPUMEM_API gpumem_status_t gpumem_trace_params_init(gpumem_trace_params_t* params, size_t struct_size);

/**
 * @brief Starts recording an allocator's events to a new file, as gpumem_trace_start() does, and
 *        with each allocation (and failed allocation) the frames @p params asks for.
 *
 * With frames the file is of format version 2 (docs/trace-format.md), which gpumem 0.4 and later
 * read; without, version 1, as gpumem_trace_start() writes. Native frames cost an unwind of the
 * caller's stack per allocation, and a symbol lookup the first time each return address is seen;
 * caller frames, a call of gpumem_trace_params_t::frames. Each distinct frame and each distinct
 * stack is written once.
 * @param[in] allocator The allocator to record; NULL for the current default.
 * @param[in] path The file to write.
 * @param[in] params What to keep beside the events.
 * @param[out] out_trace Receives the recording; NULL on failure.
 * @retval GPUMEM_SUCCESS
 * @retval GPUMEM_ERROR_INVALID_ARGUMENT @p path, @p params or @p out_trace is NULL, its
 *         @c struct_size is not valid, @c flags has an unknown bit, or @c max_frames is 0 or above
 *         ::GPUMEM_TRACE_MAX_FRAMES.
 * @retval GPUMEM_ERROR_INVALID_HANDLE @p allocator is not a live allocator.
 * @retval GPUMEM_ERROR_BUSY The allocator is being recorded already.
 * @retval GPUMEM_ERROR_IO The file cannot be created or written.
 * @retval GPUMEM_ERROR_OUT_OF_MEMORY
 * @par Thread safety
 * Thread-safe: any thread, concurrently, including on the same handle.
 * @since 0.4.0
 */
GPUMEM_NODISCARD GPUMEM_API gpumem_status_t gpumem_trace_start_with_params(gpumem_allocator_t* allocator,
                                                                           const char* path,
                                                                           const gpumem_trace_params_t* params,
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
  uint64_t stack;         /**< Its stack: records with the same nonzero number carry the same frames; 0 for none
                               (@since 0.4.0). */
  uint32_t frame_count;   /**< The frames it carries, for gpumem_trace_reader_get_frame() (@since 0.4.0). */
} gpumem_trace_record_t;

/** @brief Kinds of frame (gpumem_trace_frame_t::kind). @since 0.4.0 */
enum gpumem_trace_frame_kind {
  GPUMEM_TRACE_FRAME_NATIVE = 1, /**< A return address in the recording process, with its module and symbol. */
  GPUMEM_TRACE_FRAME_CALLER = 2  /**< A frame that gpumem_trace_params_t::frames gave, as its text. */
};

/**
 * @brief One frame of a record, from gpumem_trace_reader_get_frame(). Its strings belong to the
 *        reader and stay valid until it is closed.
 * @since 0.4.0
 */
typedef struct gpumem_trace_frame_s {
  size_t struct_size;     /**< `sizeof(gpumem_trace_frame_t)`. */
  uint32_t kind;          /**< One ::gpumem_trace_frame_kind. */
  uint64_t address;       /**< Native: the return address, in the recording process. 0 for a caller frame. */
  uint64_t module_offset; /**< Native: @c address minus its module's load address, as `addr2line -e MODULE` takes it. */
  uint64_t symbol_offset; /**< Native: @c address minus @c symbol's, where there is a symbol. */
  const char* module;     /**< Native: the path of the module, as the recording process loaded it; "" if unknown. */
  const char* symbol;     /**< Native: the function's name, demangled, where its module exports it; else "". */
  const char* text;       /**< The frame on one line: `symbol+0x1a (module+0x1234)` for a native one (the
                               module's file name), the caller's text for a caller frame. */
} gpumem_trace_frame_t;

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
 * @brief The next record of a trace. Its frames, if it has any, come from
 *        gpumem_trace_reader_get_frame() until the next call.
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
 * @brief A frame of the record that gpumem_trace_reader_next() returned last: native frames
 *        first, innermost first, then caller frames, innermost first.
 * @param[in] reader The reader.
 * @param[in] index The frame, from 0 to the record's @c frame_count - 1.
 * @param[out] out_frame Receives the frame; set its @c struct_size first. Cleared on failure.
 * @retval GPUMEM_SUCCESS
 * @retval GPUMEM_ERROR_INVALID_ARGUMENT @p out_frame is NULL or its @c struct_size is wrong, or
 *         @p index is not below the last record's @c frame_count (the detail gives it; 0 before
 *         the first record and after the last).
 * @retval GPUMEM_ERROR_INVALID_HANDLE @p reader is NULL or closed.
 * @par Thread safety
 * Per handle: concurrent calls on different handles; one handle is serialized by the caller.
 * @since 0.4.0
 */
GPUMEM_NODISCARD GPUMEM_API gpumem_status_t gpumem_trace_reader_get_frame(gpumem_trace_reader_t* reader, uint32_t index,
                                                                          gpumem_trace_frame_t* out_frame);

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

/**
 * @brief What a trace says the traced allocator did, in the figures of
 *        `torch.cuda.memory_stats()`: each current (at the end of the trace), at its peak, and
 *        added and taken away over the trace. Allocations are large from 1 MiB handed out, small
 *        below (PyTorch's two pools). From gpumem_trace_summarize().
 * @since 0.4.0
 */
typedef struct gpumem_trace_summary_s {
  size_t struct_size;                   /**< `sizeof(gpumem_trace_summary_t)`. */
  uint64_t records;                     /**< Records in the trace. */
  uint64_t peak_record;                 /**< The record (from 1) where @c allocated_bytes first reached its peak; 0
                                             with no allocation. */
  uint64_t peak_record_alloc_count;     /**< Allocations live at @c peak_record. */
  uint64_t allocated_bytes;             /**< Bytes handed out to live allocations (after rounding). */
  uint64_t allocated_bytes_peak;        /**< Their most. */
  uint64_t allocated_bytes_total;       /**< Bytes handed out over the trace. */
  uint64_t freed_bytes_total;           /**< Bytes freed over the trace. */
  uint64_t large_allocated_bytes;       /**< @c allocated_bytes of large allocations. */
  uint64_t large_allocated_bytes_peak;  /**< Their most. */
  uint64_t large_allocated_bytes_total; /**< Handed out to large allocations over the trace. */
  uint64_t large_freed_bytes_total;     /**< Freed of large allocations over the trace. */
  uint64_t small_allocated_bytes;       /**< @c allocated_bytes of small allocations. */
  uint64_t small_allocated_bytes_peak;  /**< Their most. */
  uint64_t small_allocated_bytes_total; /**< Handed out to small allocations over the trace. */
  uint64_t small_freed_bytes_total;     /**< Freed of small allocations over the trace. */
  uint64_t requested_bytes;             /**< Bytes asked for by live allocations (before rounding). */
  uint64_t requested_bytes_peak;        /**< Their most. */
  uint64_t alloc_count;                 /**< Live allocations. */
  uint64_t alloc_count_peak;            /**< Their most. */
  uint64_t alloc_count_total;           /**< Allocations over the trace. */
  uint64_t free_count_total;            /**< Frees of them over the trace. */
  uint64_t large_alloc_count;           /**< Live large allocations. */
  uint64_t large_alloc_count_peak;      /**< Their most. */
  uint64_t large_alloc_count_total;     /**< Large allocations over the trace. */
  uint64_t large_free_count_total;      /**< Frees of them. */
  uint64_t small_alloc_count;           /**< Live small allocations. */
  uint64_t small_alloc_count_peak;      /**< Their most. */
  uint64_t small_alloc_count_total;     /**< Small allocations over the trace. */
  uint64_t small_free_count_total;      /**< Frees of them. */
  uint64_t reserved_bytes;              /**< A pool's: bytes held from its upstream. */
  uint64_t reserved_bytes_peak;         /**< Their most. */
  uint64_t reserved_bytes_total;        /**< Taken from the upstream over the trace. */
  uint64_t released_bytes_total;        /**< Given back to it over the trace. */
  uint64_t segment_count;               /**< A pool's: blocks held from its upstream. */
  uint64_t segment_count_peak;          /**< Their most. */
  uint64_t segment_count_total;         /**< Taken over the trace. */
  uint64_t segment_release_count_total; /**< Given back over the trace. */
  uint64_t upstream_record_count;       /**< Upstream records: 0 for an allocator that is not a pool, which has no
                                             reserved figures. */
  uint64_t failed_count;                /**< Failed allocations: out of memory, or refused. */
  uint64_t oom_count;                   /**< Those that failed with ::GPUMEM_ERROR_OUT_OF_MEMORY. */
  uint64_t first_failed_size;           /**< Bytes asked for by the first failed allocation; 0 for none. */
  uint64_t unknown_free_count;          /**< Frees of addresses the trace did not allocate (before the recording). */
  uint32_t version;                     /**< The file format's version. */
  int32_t device;                       /**< The traced allocator's device; -1 for host memory. */
  char kind[32];                        /**< The traced allocator's kind, NUL-terminated. */
} gpumem_trace_summary_t;

/**
 * @brief Takes the text of a summary from gpumem_trace_summarize(), a piece at a time. Runs on
 *        the thread that called gpumem_trace_summarize(), before it returns; it must return
 *        normally.
 * @param[in] text The next piece: @p length bytes, not NUL-terminated. Valid during the call only.
 * @param[in] length Bytes of @p text, at least 1.
 * @param[in] user_data What gpumem_trace_summarize() was given.
 * @since 0.4.0
 */
typedef void (*gpumem_trace_text_fn)(const char* text, size_t length, void* user_data);

/**
 * @brief Reads a whole trace and sums it up: the figures, and the text that `gpumem summary`
 *        prints (the figures as `torch.cuda.memory_summary()` lays them out, then the @p top
 *        largest allocations live at the peak, each with its frames where the trace has them).
 *
 * The trace is read once, as it comes (a pipe will do); what it keeps is the live allocations.
 * Once the whole trace is read, @p out_summary is filled and then @p write_text is given the
 * text, in pieces, in order, however long it is: one call gives both, so a trace that can be read
 * only once (a pipe) needs no second reading. A trace that cannot be read whole is refused before
 * @p write_text is called at all.
 * @param[in] path The trace file.
 * @param[in] top How many of the largest allocations at the peak the text lists.
 * @param[in] write_text Takes the text; NULL for none.
 * @param[in] user_data Passed to @p write_text.
 * @param[out] out_summary Receives the figures (set its @c struct_size first); NULL for none.
 *             Cleared on failure.
 * @retval GPUMEM_SUCCESS
 * @retval GPUMEM_ERROR_INVALID_ARGUMENT @p path is NULL, or @p out_summary's @c struct_size is wrong.
 * @retval GPUMEM_ERROR_IO The file cannot be read, is not a gpumem trace, or is damaged: the detail
 *         says where, as gpumem_trace_reader_next() does.
 * @retval GPUMEM_ERROR_OUT_OF_MEMORY
 * @par Thread safety
 * Thread-safe: any thread, concurrently, including on the same handle.
 * @since 0.4.0
 */
GPUMEM_NODISCARD GPUMEM_API gpumem_status_t gpumem_trace_summarize(const char* path, uint32_t top,
                                                                   gpumem_trace_text_fn write_text, void* user_data,
                                                                   gpumem_trace_summary_t* out_summary);

#ifdef __cplusplus
}
#endif

#endif /* GPUMEM_TRACE_H */
