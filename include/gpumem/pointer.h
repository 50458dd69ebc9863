/**
 * @file pointer.h
 * @brief What any address is: its kind of memory, device, mapped addresses and allocation.
 */
#ifndef GPUMEM_POINTER_H
#define GPUMEM_POINTER_H

#include "core.h"

#ifdef __cplusplus
extern "C" {
#endif

/** @brief Kind of memory behind an address; the values of `cudaMemoryType`. @since 0.1.0 */
enum gpumem_memory_type {
  GPUMEM_MEMORY_UNREGISTERED = 0, /**< Plain host memory the driver does not know. */
  GPUMEM_MEMORY_HOST = 1,         /**< Page-locked host memory: pinned or registered. */
  GPUMEM_MEMORY_DEVICE = 2,       /**< Device memory. */
  GPUMEM_MEMORY_MANAGED = 3       /**< Managed (unified) memory. */
};

/**
 * @brief Everything the driver knows about an address.
 *
 * Set @c struct_size to `sizeof(gpumem_pointer_info_t)` before passing it to
 * gpumem_pointer_get_info().
 * @since 0.1.0
 */
typedef struct gpumem_pointer_info_s {
  size_t struct_size;  /**< Size of this struct as the caller knows it. */
  int32_t memory_type; /**< One of ::gpumem_memory_type. */
  int32_t device;      /**< Device of the allocation or registration; -1 for plain host memory. */
  bool is_managed;     /**< Managed memory. */
  bool is_pinned;      /**< Page-locked host memory (pinned or registered). */
  void* host_ptr;   /**< The address as the host reaches it (the address itself for plain host memory); NULL if the host
                       cannot. */
  void* device_ptr; /**< The address as the device reaches it; NULL if the device cannot. */
  void* base;       /**< Start of the allocation or registered range; NULL for plain host memory. */
  size_t size;      /**< Size of that allocation or range; 0 for plain host memory. */
} gpumem_pointer_info_t;

/**
 * @brief Describes any address: device, pinned, registered, mapped, managed or plain host
 *        memory, at its start or inside it (`cuPointerGetAttributes`).
 *
 * Plain host memory is not an error: it answers ::GPUMEM_MEMORY_UNREGISTERED, not pinned.
 * @param[in] ptr Any address, NULL included (which is plain host memory).
 * @param[in,out] out_info @c struct_size set by the caller; the rest is filled in
 *                (zeroed on failure as far as @c struct_size reaches, @c struct_size kept).
 * @retval GPUMEM_SUCCESS
 * @retval GPUMEM_ERROR_INVALID_ARGUMENT @p out_info is NULL or its @c struct_size is too small.
 * @retval GPUMEM_ERROR_NO_DRIVER
 * @retval GPUMEM_ERROR_NO_DEVICE
 * @retval GPUMEM_ERROR_DRIVER
 * @par Thread safety
 * Thread-safe: any thread, concurrently, including on the same handle.
 * @since 0.1.0
 */
GPUMEM_NODISCARD GPUMEM_API gpumem_status_t gpumem_pointer_get_info(const void* ptr, gpumem_pointer_info_t* out_info);

#ifdef __cplusplus
}
#endif

#endif /* GPUMEM_POINTER_H */
