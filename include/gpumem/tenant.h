/**
 * @file tenant.h
 * @brief Tenants: views of a shared allocator (a device's pool, typically) that are allocators of
 *        their own, each with its budgets, statistics, hooks and traces, so that libraries in one
 *        process draw on one pool and what one frees serves another at once.
 *
 * A tenant hands out its upstream's memory and counts what it holds. Its hard budget
 * (@c limit) refuses an allocation that would take it past the budget, with
 * ::GPUMEM_ERROR_OUT_OF_MEMORY and a detail naming the tenant and its budget; its soft budget
 * (@c soft_limit) never refuses: crossing it makes the upstream pool give back the memory it caches
 * (gpumem_pool_release() on every stream), so that the process's memory follows what is in use.
 * A tenant's statistics (gpumem_allocator_get_stats()) count its own allocations only; the pool's
 * count everyone's, so the tenants' bytes in use add up to at most the pool's at any moment. Memory
 * is freed through the tenant that allocated it; its upstream refuses it (it would not know the
 * tenant), and another tenant too. The drop-ins for PyTorch and Numba make one tenant each on the
 * device pool, CuPy's with `install(shared=True)`.
 */
#ifndef GPUMEM_TENANT_H
#define GPUMEM_TENANT_H

#include "allocator.h"

#ifdef __cplusplus
extern "C" {
#endif

/** @brief Bytes of a tenant's name, with its terminating NUL. */
#define GPUMEM_TENANT_NAME_SIZE 32

/**
 * @brief How to make a tenant. Initialize with ::GPUMEM_TENANT_PARAMS_INIT or
 *        gpumem_tenant_params_init().
 * @since 0.4.0
 */
typedef struct gpumem_tenant_params_s {
  size_t struct_size;           /**< `sizeof(gpumem_tenant_params_t)`. */
  gpumem_allocator_t* upstream; /**< The allocator shared; NULL: the pool of @c device
                                     (gpumem_pool_get_device()). Kept busy while the tenant lives. */
  int32_t device;               /**< The device whose pool is shared when @c upstream is NULL. */
  uint64_t limit;               /**< Hard budget: the most bytes in use (as the upstream accounts
                                     them) the tenant may hold; 0 for none. */
  uint64_t soft_limit;          /**< Soft budget: past it the upstream pool gives back its cache;
                                     never refuses; 0 for none. */
  const char* name;             /**< For details and gpumem_tenant_get_info(); copied, cut to
                                     ::GPUMEM_TENANT_NAME_SIZE - 1 bytes; NULL: "tenant". */
} gpumem_tenant_params_t;

/** @brief Initializer for ::gpumem_tenant_params_t: device 0's pool, no budgets, "tenant". */
#define GPUMEM_TENANT_PARAMS_INIT \
  { sizeof(gpumem_tenant_params_t), NULL, 0, 0, 0, NULL }

/** @brief A tenant's budgets and figures, from gpumem_tenant_get_info(). @since 0.4.0 */
typedef struct gpumem_tenant_info_s {
  size_t struct_size;                 /**< `sizeof(gpumem_tenant_info_t)`. */
  char name[GPUMEM_TENANT_NAME_SIZE]; /**< Its name. */
  uint64_t limit;                     /**< Hard budget; 0 for none. */
  uint64_t soft_limit;                /**< Soft budget; 0 for none. */
  uint64_t bytes_in_use;              /**< Bytes of its live allocations, as the upstream accounts them. */
  uint64_t peak_bytes_in_use;         /**< The most since it was made or its peaks were reset. */
  uint64_t refused;                   /**< Allocations its hard budget refused. */
  uint64_t soft_crossings;            /**< Times it crossed its soft budget, each giving back cache. */
} gpumem_tenant_info_t;

/**
 * @brief Fills @p params with the defaults of ::GPUMEM_TENANT_PARAMS_INIT.
 * @param[out] params The struct to fill.
 * @param[in] struct_size `sizeof(gpumem_tenant_params_t)` as the caller knows it.
 * @retval GPUMEM_SUCCESS
 * @retval GPUMEM_ERROR_INVALID_ARGUMENT @p params is NULL or @p struct_size is too small.
 * @par Thread safety
 * Thread-safe: any thread, concurrently, including on the same handle.
 * @since 0.4.0
 */
GPUMEM_NODISCARD GPUMEM_API gpumem_status_t gpumem_tenant_params_init(gpumem_tenant_params_t* params,
                                                                      size_t struct_size);

/**
 * @brief Makes a tenant of an allocator: an allocator of its own that hands out the upstream's
 *        memory within its budgets. Destroy it with gpumem_allocator_destroy() (::GPUMEM_ERROR_BUSY
 *        while it has live allocations).
 * @param[in] params The upstream (or device), budgets and name.
 * @param[out] out_tenant Receives the tenant; NULL on failure.
 * @retval GPUMEM_SUCCESS
 * @retval GPUMEM_ERROR_INVALID_ARGUMENT A pointer is NULL, @c struct_size is not valid, or
 *         @c soft_limit is above a nonzero @c limit.
 * @retval GPUMEM_ERROR_INVALID_HANDLE @c upstream is not a live allocator.
 * @retval GPUMEM_ERROR_NO_DRIVER, GPUMEM_ERROR_NO_DEVICE, GPUMEM_ERROR_INVALID_DEVICE With no
 *         upstream: the device's pool cannot be made.
 * @par Thread safety
 * Thread-safe: any thread, concurrently, including on the same handle.
 * @since 0.4.0
 */
GPUMEM_NODISCARD GPUMEM_API gpumem_status_t gpumem_tenant_create(const gpumem_tenant_params_t* params,
                                                                 gpumem_allocator_t** out_tenant);

/**
 * @brief Sets a tenant's budgets. A hard budget below what it holds refuses its next allocations
 *        until it frees enough; nothing it holds is taken away.
 * @param[in] tenant A tenant from gpumem_tenant_create().
 * @param[in] limit Hard budget in bytes; 0 for none.
 * @param[in] soft_limit Soft budget in bytes; 0 for none.
 * @retval GPUMEM_SUCCESS
 * @retval GPUMEM_ERROR_INVALID_ARGUMENT @p soft_limit is above a nonzero @p limit.
 * @retval GPUMEM_ERROR_INVALID_HANDLE @p tenant is not a live tenant.
 * @par Thread safety
 * Thread-safe: any thread, concurrently, including on the same handle.
 * @since 0.4.0
 */
GPUMEM_NODISCARD GPUMEM_API gpumem_status_t gpumem_tenant_set_limits(gpumem_allocator_t* tenant, uint64_t limit,
                                                                     uint64_t soft_limit);

/**
 * @brief A tenant's name, budgets and figures.
 * @param[in] tenant A tenant from gpumem_tenant_create().
 * @param[in,out] out_info @c struct_size set by the caller; the rest is filled in (zeroed on
 *                failure as far as @c struct_size reaches, @c struct_size kept).
 * @retval GPUMEM_SUCCESS
 * @retval GPUMEM_ERROR_INVALID_ARGUMENT @p out_info is NULL or its @c struct_size is not valid.
 * @retval GPUMEM_ERROR_INVALID_HANDLE @p tenant is not a live tenant.
 * @par Thread safety
 * Thread-safe: any thread, concurrently, including on the same handle.
 * @since 0.4.0
 */
GPUMEM_NODISCARD GPUMEM_API gpumem_status_t gpumem_tenant_get_info(gpumem_allocator_t* tenant,
                                                                   gpumem_tenant_info_t* out_info);

#ifdef __cplusplus
}
#endif

#endif /* GPUMEM_TENANT_H */
