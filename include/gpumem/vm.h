/**
 * @file vm.h
 * @brief An allocator over CUDA's virtual memory management (`cuMemAddressReserve`,
 *        `cuMemCreate`, `cuMemMap`): device memory mapped into reserved addresses, so that a pool
 *        over it grows its segments in place and gives memory back by unmapping.
 *
 * Used by itself, the allocator reserves the addresses of each allocation, rounded up to the
 * device's granularity, and maps one physical allocation into them; a free unmaps the memory and
 * releases the addresses. Its real use is as the upstream of a pool (pool.h): the pool then
 * reserves one large range of addresses per stream and maps memory into it a unit at a time as it
 * grows (PyTorch's expandable segments), so freed memory merges into blocks of any size instead of
 * staying cut into the sizes it was first allocated at, and gpumem_pool_release() unmaps free
 * units wherever they lie.
 *
 * Peer access (gpumem_allocator_set_peer_access()) is set on the mappings themselves
 * (`cuMemSetAccess`): for all the memory mapped now and every unit mapped later, and it can be
 * taken away again. docs/vm.md is the guide.
 */
#ifndef GPUMEM_VM_H
#define GPUMEM_VM_H

#include "allocator.h"

#ifdef __cplusplus
extern "C" {
#endif

/**
 * @brief How to build a VM allocator. Initialize with ::GPUMEM_VM_PARAMS_INIT or
 *        gpumem_vm_params_init().
 * @since 0.4.0
 */
typedef struct gpumem_vm_params_s {
  size_t struct_size;  /**< `sizeof(gpumem_vm_params_t)`. */
  int32_t device;      /**< The device whose memory is mapped; the allocator's device. */
  uint64_t range_size; /**< Bytes of addresses a pool over the allocator reserves at a time (each
                            stream's arena one range); a multiple of the map unit. 0: the device's
                            total memory rounded up to the map unit. A pool's request larger than one
                            range fails with ::GPUMEM_ERROR_OUT_OF_MEMORY and a detail naming
                            @c range_size; allocations made directly are not bounded by it. */
  uint64_t map_unit;   /**< Bytes of each physical allocation (`cuMemCreate`) a pool over the
                            allocator maps, and so the grain of its mapping and unmapping: a pool
                            releases whole units only. 0: 32 MiB, or the device's minimum granularity
                            if that is larger, since each physical allocation costs a driver call of
                            about 40 us whatever its size up to about 32 MiB; else a power of two and
                            a multiple of that granularity (2 MiB on an H200), the granularity itself
                            for the finest release. Direct allocations do not use it. */
} gpumem_vm_params_t;

/** @brief Initializer for ::gpumem_vm_params_t: device 0, the default range size and map unit. */
#define GPUMEM_VM_PARAMS_INIT \
  { sizeof(gpumem_vm_params_t), 0, 0, 0 }

/** @brief What a VM allocator holds, from gpumem_vm_get_info(). @since 0.4.0 */
typedef struct gpumem_vm_info_s {
  size_t struct_size;      /**< `sizeof(gpumem_vm_info_t)`. */
  uint64_t map_unit;       /**< Bytes a pool maps at a time, as in effect (the default resolved). */
  uint64_t range_size;     /**< Bytes of addresses a pool reserves at a time, as in effect. */
  uint64_t reserved_bytes; /**< Addresses reserved now: direct allocations (rounded to the device's
                                granularity) and the ranges of pools over the allocator. */
  uint64_t mapped_bytes;   /**< Memory mapped now, direct allocations and pools' together. */
} gpumem_vm_info_t;

/**
 * @brief Fills VM-allocator parameters with the defaults of ::GPUMEM_VM_PARAMS_INIT.
 * @param[out] params The parameters to fill.
 * @param[in] struct_size `sizeof(gpumem_vm_params_t)` as the caller knows it.
 * @retval GPUMEM_SUCCESS
 * @retval GPUMEM_ERROR_INVALID_ARGUMENT @p params is NULL or @p struct_size is too small.
 * @par Thread safety
 * Thread-safe: any thread, concurrently, including on the same handle.
 * @since 0.4.0
 */
GPUMEM_NODISCARD GPUMEM_API gpumem_status_t gpumem_vm_params_init(gpumem_vm_params_t* params, size_t struct_size);

/**
 * @brief Creates an allocator of device memory mapped into reserved addresses (`cuMemAddressReserve`,
 *        `cuMemCreate`, `cuMemMap`, `cuMemSetAccess`); the stream of each call is ignored.
 *
 * gpumem_alloc() reserves the size rounded up to the device's granularity, aligned to it, and maps
 * one physical allocation of that size into it (one `cuMemCreate`, one `cuMemMap`), whatever the map
 * unit; gpumem_free() synchronizes the device's primary context (`cuMemUnmap`, unlike `cuMemFree`,
 * does not wait for work still using the memory), unmaps it with one `cuMemUnmap` and releases the
 * addresses. A pool over the allocator (gpumem_pool_create()) grows its segments in place instead,
 * a map unit at a time. A failure creates nothing.
 * @param[in] params The device, the range size and the map unit.
 * @param[out] out_allocator Receives the allocator; NULL on failure.
 * @retval GPUMEM_SUCCESS
 * @retval GPUMEM_ERROR_INVALID_ARGUMENT A pointer is NULL, @c struct_size is not valid, @c map_unit
 *         is not a power of two or not a multiple of the device's granularity, or @c range_size is
 *         not a multiple of the map unit.
 * @retval GPUMEM_ERROR_INVALID_DEVICE @c device is negative or not a present device.
 * @retval GPUMEM_ERROR_NOT_SUPPORTED The device does not support virtual memory management, or the
 *         driver lacks its entry points.
 * @retval GPUMEM_ERROR_NO_DRIVER
 * @retval GPUMEM_ERROR_NO_DEVICE
 * @retval GPUMEM_ERROR_DRIVER
 * @par Thread safety
 * Thread-safe: any thread, concurrently, including on the same handle.
 * @since 0.4.0
 */
GPUMEM_NODISCARD GPUMEM_API gpumem_status_t gpumem_allocator_create_vm(const gpumem_vm_params_t* params,
                                                                       gpumem_allocator_t** out_allocator);

/**
 * @brief What a VM allocator holds: its map unit and range size as in effect, and the addresses
 *        reserved and memory mapped now, for its direct allocations and the pools over it.
 * @param[in] allocator An allocator from gpumem_allocator_create_vm().
 * @param[in,out] out_info @c struct_size set by the caller; the rest is filled in
 *                (zeroed on failure as far as @c struct_size reaches, @c struct_size kept).
 * @retval GPUMEM_SUCCESS
 * @retval GPUMEM_ERROR_INVALID_ARGUMENT @p out_info is NULL or its @c struct_size is not valid.
 * @retval GPUMEM_ERROR_INVALID_HANDLE @p allocator is not a live VM allocator (a pool over one is
 *         not: pass its upstream).
 * @par Thread safety
 * Thread-safe: any thread, concurrently, including on the same handle.
 * @since 0.4.0
 */
GPUMEM_NODISCARD GPUMEM_API gpumem_status_t gpumem_vm_get_info(gpumem_allocator_t* allocator,
                                                               gpumem_vm_info_t* out_info);

#ifdef __cplusplus
}
#endif

#endif /* GPUMEM_VM_H */
