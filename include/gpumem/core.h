/**
 * @file core.h
 * @brief Versions, status codes, error details and the types every area shares.
 *
 * Every function that can fail returns a ::gpumem_status_t: ::GPUMEM_SUCCESS (0) or one of the
 * negative `GPUMEM_ERROR_*` codes. A failing call clears its outputs, changes no state, and leaves
 * a message for the calling thread in gpumem_last_error_detail().
 */
#ifndef GPUMEM_CORE_H
#define GPUMEM_CORE_H

#include <gpumem/gpumem_version.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/** @brief Marks a function exported by libgpumem. */
#if defined(GPUMEM_BUILDING_LIBRARY)
#define GPUMEM_API __attribute__((visibility("default")))
#else
#define GPUMEM_API
#endif

/**
 * @brief Marks a function whose result must not be ignored: every function that returns a
 * ::gpumem_status_t. `[[nodiscard]]` in C++17 and C23, `warn_unused_result` in C with clang (which
 * a `(void)` cast silences, as it does not with GCC in C), nothing elsewhere.
 * Define it before including gpumem's headers to choose otherwise.
 * @since 0.4.0
 */
#ifndef GPUMEM_NODISCARD
#if defined(__cplusplus) && __cplusplus >= 201703L
#define GPUMEM_NODISCARD [[nodiscard]]
#elif defined(__STDC_VERSION__) && __STDC_VERSION__ >= 202311L
#define GPUMEM_NODISCARD [[nodiscard]]
#elif defined(__clang__)
#define GPUMEM_NODISCARD __attribute__((warn_unused_result))
#else
#define GPUMEM_NODISCARD
#endif
#endif

/**
 * @brief Marks a declaration as deprecated; `msg` names what to use instead. Deprecated functions
 * stay exported until the next major version (docs/abi.md). `[[deprecated]]` in C++14 and C23,
 * the GNU attribute in C with GCC and clang, nothing elsewhere.
 * @since 0.4.0
 */
#ifndef GPUMEM_DEPRECATED
#if defined(__cplusplus) && __cplusplus >= 201402L
#define GPUMEM_DEPRECATED(msg) [[deprecated(msg)]]
#elif defined(__STDC_VERSION__) && __STDC_VERSION__ >= 202311L
#define GPUMEM_DEPRECATED(msg) [[deprecated(msg)]]
#elif defined(__GNUC__) || defined(__clang__)
#define GPUMEM_DEPRECATED(msg) __attribute__((deprecated(msg)))
#else
#define GPUMEM_DEPRECATED(msg)
#endif
#endif

#ifdef __cplusplus
extern "C" {
#endif

/** @brief Result of a fallible call: ::GPUMEM_SUCCESS or a negative `GPUMEM_ERROR_*` code. */
typedef int32_t gpumem_status_t;

/**
 * @brief Status codes. Their values are fixed: never renumbered, never reused.
 * @since 0.1.0
 */
enum gpumem_status {
  GPUMEM_SUCCESS = 0,                   /**< The call did what was asked. */
  GPUMEM_ERROR_INVALID_ARGUMENT = -1,   /**< An argument is NULL, zero, out of range or an unknown flag. */
  GPUMEM_ERROR_OUT_OF_MEMORY = -2,      /**< The device or the host has no memory for the request. */
  GPUMEM_ERROR_NO_DRIVER = -3,          /**< No usable CUDA driver could be loaded. */
  GPUMEM_ERROR_NO_DEVICE = -4,          /**< The driver is loaded but reports no CUDA device. */
  GPUMEM_ERROR_INVALID_DEVICE = -5,     /**< The device index is not that of a present device. */
  GPUMEM_ERROR_NOT_SUPPORTED = -6,      /**< The device or the driver lacks the capability. */
  GPUMEM_ERROR_INVALID_POINTER = -7,    /**< The pointer is not memory of the kind the call needs. */
  GPUMEM_ERROR_INVALID_HANDLE = -8,     /**< The handle is NULL, destroyed or not one of gpumem's. */
  GPUMEM_ERROR_ALREADY_REGISTERED = -9, /**< The host range is already registered with the driver. */
  GPUMEM_ERROR_STREAM_CAPTURE = -10,    /**< Not allowed while a stream is being captured into a graph. */
  GPUMEM_ERROR_DRIVER = -11,            /**< Another CUDA error; see gpumem_last_cuda_result(). */
  GPUMEM_ERROR_INTERNAL = -12,          /**< A defect in gpumem; the detail says where. */
  GPUMEM_ERROR_NOT_OWNED = -13,         /**< The allocator did not hand out this pointer, or it is freed already. */
  GPUMEM_ERROR_BUSY = -14,              /**< The handle is in use: live allocations, or another object relies on it. */
  GPUMEM_ERROR_IO = -15                 /**< A file could not be opened, read or written (@since 0.3.0). */
};

/**
 * @brief A CUDA stream; the same representation as `CUstream` and `cudaStream_t`.
 *
 * NULL is the legacy default stream; ::GPUMEM_STREAM_LEGACY and ::GPUMEM_STREAM_PER_THREAD name
 * the default streams explicitly, as `CU_STREAM_LEGACY` and `CU_STREAM_PER_THREAD` do.
 */
typedef struct CUstream_st* gpumem_stream_t;

/** @brief The legacy default stream, as `CU_STREAM_LEGACY`. */
#define GPUMEM_STREAM_LEGACY ((gpumem_stream_t)0x1)
/** @brief The calling thread's per-thread default stream, as `CU_STREAM_PER_THREAD`. */
#define GPUMEM_STREAM_PER_THREAD ((gpumem_stream_t)0x2)

/**
 * @brief The version of the library that is loaded, as ::GPUMEM_VERSION_NUMBER
 *        (major * 10000 + minor * 100 + patch).
 * @return The run-time version number.
 * @par Thread safety
 * Thread-safe: any thread, concurrently, including on the same handle.
 * @since 0.1.0
 */
GPUMEM_API uint32_t gpumem_version_number(void);

/**
 * @brief The version of the library that is loaded, as "MAJOR.MINOR.PATCH".
 * @return A static string; never NULL.
 * @par Thread safety
 * Thread-safe: any thread, concurrently, including on the same handle.
 * @since 0.1.0
 */
GPUMEM_API const char* gpumem_version_string(void);

/**
 * @brief The name of a status code, such as "GPUMEM_ERROR_OUT_OF_MEMORY".
 * @param[in] status Any value; unknown values give "GPUMEM_UNKNOWN_STATUS".
 * @return A static string; never NULL.
 * @par Thread safety
 * Thread-safe: any thread, concurrently, including on the same handle.
 * @since 0.1.0
 */
GPUMEM_API const char* gpumem_status_name(gpumem_status_t status);

/**
 * @brief A one-line message for a status code, such as "out of memory".
 * @param[in] status Any value; unknown values give "unknown status".
 * @return A static string; never NULL.
 * @par Thread safety
 * Thread-safe: any thread, concurrently, including on the same handle.
 * @since 0.1.0
 */
GPUMEM_API const char* gpumem_status_string(gpumem_status_t status);

/**
 * @brief What went wrong in the last failing call on this thread, with the numbers that matter.
 *
 * Successful calls leave it as it was. The text stays valid until the next failing call on the
 * same thread.
 * @return The detail text, or "" if no call on this thread has failed; never NULL.
 * @par Thread safety
 * Thread-safe: any thread, concurrently, including on the same handle (each thread has its own).
 * @since 0.1.0
 */
GPUMEM_API const char* gpumem_last_error_detail(void);

/**
 * @brief The `CUresult` behind the last failing call on this thread.
 *
 * Set by every failing call: the driver's code where the driver reported the failure,
 * 0 (`CUDA_SUCCESS`) where gpumem refused the call itself.
 * @return A `CUresult` value.
 * @par Thread safety
 * Thread-safe: any thread, concurrently, including on the same handle (each thread has its own).
 * @since 0.1.0
 */
GPUMEM_API int32_t gpumem_last_cuda_result(void);

#ifdef __cplusplus
}
#endif

#endif /* GPUMEM_CORE_H */
