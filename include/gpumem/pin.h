/**
 * @file pin.h
 * @brief The pinning service: page-locks any host range for fast, asynchronous transfers, shared
 *        by every caller in the process.
 *
 * Pins are counted: any number of callers may pin the same, overlapping or adjacent ranges, and
 * memory stays page-locked while any pin covers it. The service registers with the driver only
 * the pages no registration covers yet, so the driver never sees overlapping registrations, and
 * registrations are portable: one pin serves every device. After the last unpin a registration
 * may stay cached (within a byte budget, least recently used first out), so pinning the same
 * memory again costs no driver call.
 *
 * `GPUMEM_PIN_CACHE` is read when the service is first used; while it cannot be read, every call
 * here returns ::GPUMEM_ERROR_INVALID_ARGUMENT saying so. The caller's part of the contract: unpin before freeing or
 * unmapping pinned memory, and call gpumem_pin_forget() for a range about to be freed or unmapped, so that no cached
 * registration outlives the memory; a cached registration keeps its pages locked until it is evicted, flushed or
 * forgotten.
 */
#ifndef GPUMEM_PIN_H
#define GPUMEM_PIN_H

#include "core.h"

#ifdef __cplusplus
extern "C" {
#endif

/** @brief How much of a range is pinned, from gpumem_pin_query(). @since 0.1.0 */
enum gpumem_pin_state {
  GPUMEM_PIN_NONE = 0,    /**< No byte of the range is pinned. */
  GPUMEM_PIN_PARTIAL = 1, /**< Some bytes are pinned, some are not. */
  GPUMEM_PIN_FULL = 2     /**< Every byte is pinned. */
};

/** @brief Statistics of the pinning service, from gpumem_pin_get_stats(). @since 0.1.0 */
typedef struct gpumem_pin_stats_s {
  size_t struct_size;        /**< `sizeof(gpumem_pin_stats_t)`. */
  uint64_t bytes_registered; /**< Bytes registered with the driver now, pinned or cached (whole pages). */
  uint64_t bytes_pinned;     /**< Of those, bytes of registrations that hold at least one pinned byte. */
  uint64_t bytes_cached;     /**< Of those, bytes of registrations no pin needs, kept for reuse. */
  uint64_t registrations;    /**< Driver registrations now. */
  uint64_t pins;             /**< Successful gpumem_pin() calls. */
  uint64_t unpins;           /**< Successful gpumem_unpin() calls. */
  uint64_t hits;             /**< Pins that needed no new registration. */
  uint64_t misses;           /**< Pins that registered pages with the driver. */
  uint64_t evictions;        /**< Cached registrations dropped to keep within the budget. */
  uint64_t cache_budget;     /**< The cache's budget in bytes. */
} gpumem_pin_stats_t;

/**
 * @brief Pins a host range: page-locks it (registering with the driver what is not registered
 *        yet) and counts one more pin over it.
 * @param[in] ptr Start of the range; any alignment.
 * @param[in] size Bytes; at least 1.
 * @param[in] flags 0 (reserved for later use).
 * @retval GPUMEM_SUCCESS
 * @retval GPUMEM_ERROR_INVALID_ARGUMENT @p ptr is NULL, @p size is 0, the range wraps around, @p flags
 *         is not 0, or the driver refused the range (memory that is not mapped); nothing is left registered.
 * @retval GPUMEM_ERROR_INVALID_POINTER Part of the range is device or managed memory, or page-locked
 *         memory the service did not register (a pinned allocation, or a range registered directly).
 * @retval GPUMEM_ERROR_OUT_OF_MEMORY The driver could not lock more memory; nothing is left registered.
 * @retval GPUMEM_ERROR_NOT_SUPPORTED
 * @retval GPUMEM_ERROR_NO_DRIVER
 * @retval GPUMEM_ERROR_NO_DEVICE
 * @retval GPUMEM_ERROR_DRIVER The driver failed otherwise; nothing is left registered.
 * @retval GPUMEM_ERROR_STREAM_CAPTURE A stream is being captured into a CUDA graph; nothing was done
 *         and the capture is still valid (docs/copy.md, "Stream capture").
 * @par Thread safety
 * Thread-safe: any thread, concurrently, including on the same handle.
 * @since 0.1.0
 */
GPUMEM_NODISCARD GPUMEM_API gpumem_status_t gpumem_pin(void* ptr, size_t size, uint32_t flags);

/**
 * @brief Removes one pin from a range. Pages no pin covers any more are unregistered, or kept in
 *        the cache while the budget allows.
 * @param[in] ptr Start of the range, as pinned (or any part of pinned ranges).
 * @param[in] size Bytes; at least 1.
 * @retval GPUMEM_SUCCESS
 * @retval GPUMEM_ERROR_INVALID_ARGUMENT @p ptr is NULL, @p size is 0, or the range wraps around.
 * @retval GPUMEM_ERROR_NOT_OWNED Part of the range is not pinned; nothing is changed.
 * @retval GPUMEM_ERROR_DRIVER
 * @par Thread safety
 * Thread-safe: any thread, concurrently, including on the same handle.
 * @since 0.1.0
 */
GPUMEM_NODISCARD GPUMEM_API gpumem_status_t gpumem_unpin(void* ptr, size_t size);

/**
 * @brief Says whether a host range is pinned through the service.
 * @param[in] ptr Start of the range.
 * @param[in] size Bytes; at least 1.
 * @param[out] out_state Receives one of ::gpumem_pin_state; ::GPUMEM_PIN_NONE on failure.
 * @retval GPUMEM_SUCCESS
 * @retval GPUMEM_ERROR_INVALID_ARGUMENT @p ptr or @p out_state is NULL, @p size is 0, or the range wraps around.
 * @par Thread safety
 * Thread-safe: any thread, concurrently, including on the same handle.
 * @since 0.1.0
 */
GPUMEM_NODISCARD GPUMEM_API gpumem_status_t gpumem_pin_query(const void* ptr, size_t size, int32_t* out_state);

/**
 * @brief Tells the service that a range is about to be freed or unmapped: cached registrations
 *        that touch it are unregistered now. Refused, changing nothing, while a pin still covers
 *        any of it.
 * @param[in] ptr Start of the range.
 * @param[in] size Bytes; at least 1.
 * @retval GPUMEM_SUCCESS
 * @retval GPUMEM_ERROR_INVALID_ARGUMENT @p ptr is NULL, @p size is 0, or the range wraps around.
 * @retval GPUMEM_ERROR_BUSY Part of the range is still pinned; the detail says where.
 * @retval GPUMEM_ERROR_DRIVER
 * @retval GPUMEM_ERROR_STREAM_CAPTURE A stream is being captured into a CUDA graph; nothing was done
 *         and the capture is still valid (docs/copy.md, "Stream capture").
 * @par Thread safety
 * Thread-safe: any thread, concurrently, including on the same handle.
 * @since 0.1.0
 */
GPUMEM_NODISCARD GPUMEM_API gpumem_status_t gpumem_pin_forget(void* ptr, size_t size);

/**
 * @brief Unregisters every cached registration (those no pin covers).
 * @retval GPUMEM_SUCCESS
 * @retval GPUMEM_ERROR_DRIVER
 * @retval GPUMEM_ERROR_STREAM_CAPTURE A stream is being captured into a CUDA graph; nothing was done
 *         and the capture is still valid (docs/copy.md, "Stream capture").
 * @par Thread safety
 * Thread-safe: any thread, concurrently, including on the same handle.
 * @since 0.1.0
 */
GPUMEM_NODISCARD GPUMEM_API gpumem_status_t gpumem_pin_cache_flush(void);

/**
 * @brief Sets the cache's budget: the most bytes kept registered under no pin. The default is
 *        `GPUMEM_PIN_CACHE` (bytes, or a size like `256MiB`) or else 1 GiB; 0 turns caching off.
 *        Registrations over the new budget are evicted, least recently used first.
 * @param[in] bytes The budget.
 * @retval GPUMEM_SUCCESS
 * @retval GPUMEM_ERROR_INVALID_ARGUMENT `GPUMEM_PIN_CACHE` cannot be read.
 * @retval GPUMEM_ERROR_DRIVER
 * @par Thread safety
 * Thread-safe: any thread, concurrently, including on the same handle.
 * @since 0.1.0
 */
GPUMEM_NODISCARD GPUMEM_API gpumem_status_t gpumem_pin_cache_set_budget(uint64_t bytes);

/**
 * @brief Statistics of the pinning service.
 * @param[in,out] out_stats @c struct_size set by the caller; the rest is filled in
 *                (zeroed on failure as far as @c struct_size reaches, @c struct_size kept).
 * @retval GPUMEM_SUCCESS
 * @retval GPUMEM_ERROR_INVALID_ARGUMENT @p out_stats is NULL or its @c struct_size is not valid.
 * @par Thread safety
 * Thread-safe: any thread, concurrently, including on the same handle.
 * @since 0.1.0
 */
GPUMEM_NODISCARD GPUMEM_API gpumem_status_t gpumem_pin_get_stats(gpumem_pin_stats_t* out_stats);

#ifdef __cplusplus
}
#endif

#endif /* GPUMEM_PIN_H */
