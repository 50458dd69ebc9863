// The structs that cross the ABI, in one table: each one's name, the release that first had it
// and its size there, its size now, and the defaults that the fields beyond a caller's shorter
// struct take.
//
// A struct only grows at its end, so a caller built against any release since the first passes a
// struct_size from first_size up to this library's sizeof (or beyond, from a newer header). The
// sizes are LP64's, as docs/abi.md lists them. A struct that grows fails its row's size check
// until the row has its new size, a static_assert below ties first_size to the offset of the
// first field added later, and docs/abi.md has the new size.
#pragma once

#include <climits>
#include <cstddef>

#include "gpumem/experimental.h"
#include "gpumem/gpumem.h"

namespace gpumem::capi {

// Specialized for each struct by the table; a struct missing from it does not compile here.
template <class T>
struct AbiStruct;

// The defaults of a struct without an INIT macro.
template <class T>
T zeroed() {
  T t{};
  t.struct_size = sizeof(T);
  return t;
}

// A row of the table. DEFAULTS is an expression of type T: the struct's INIT macro where it has
// one, else zeroed<T>().
#define GPUMEM_ABI_STRUCT(T, SINCE, FIRST_SIZE, SIZE, DEFAULTS)                           \
  template <>                                                                             \
  struct AbiStruct<T> {                                                                   \
    static constexpr const char* name = #T;                                               \
    static constexpr const char* since = SINCE;                                           \
    static constexpr size_t first_size = FIRST_SIZE;                                      \
    static T defaults() { return DEFAULTS; }                                              \
  };                                                                                      \
  static_assert(sizeof(T) == (SIZE), #T " changed size: update its row and docs/abi.md"); \
  static_assert(sizeof(size_t) < (FIRST_SIZE) && (FIRST_SIZE) <= (SIZE), #T ": a struct only grows")

GPUMEM_ABI_STRUCT(gpumem_allocator_functions_t, "0.1", 48, 96, zeroed<gpumem_allocator_functions_t>());
GPUMEM_ABI_STRUCT(gpumem_allocator_stats_t, "0.1", 96, 96, zeroed<gpumem_allocator_stats_t>());
GPUMEM_ABI_STRUCT(gpumem_hook_info_t, "0.1", 64, 64, zeroed<gpumem_hook_info_t>());
GPUMEM_ABI_STRUCT(gpumem_array_desc_t, "0.1", 48, 48, gpumem_array_desc_t GPUMEM_ARRAY_DESC_INIT);
GPUMEM_ABI_STRUCT(gpumem_device_info_t, "0.1", 288, 288, zeroed<gpumem_device_info_t>());
GPUMEM_ABI_STRUCT(gpumem_managed_range_info_t, "0.1", 32, 32, zeroed<gpumem_managed_range_info_t>());
GPUMEM_ABI_STRUCT(gpumem_pin_stats_t, "0.1", 88, 88, zeroed<gpumem_pin_stats_t>());
GPUMEM_ABI_STRUCT(gpumem_pointer_info_t, "0.1", 56, 56, zeroed<gpumem_pointer_info_t>());
GPUMEM_ABI_STRUCT(gpumem_pool_params_t, "0.1", 32, 32, gpumem_pool_params_t GPUMEM_POOL_PARAMS_INIT);
GPUMEM_ABI_STRUCT(gpumem_pool_info_t, "0.1", 56, 72, zeroed<gpumem_pool_info_t>());
GPUMEM_ABI_STRUCT(gpumem_copy2d_t, "0.2", 104, 104, gpumem_copy2d_t GPUMEM_COPY2D_INIT);
GPUMEM_ABI_STRUCT(gpumem_copy3d_t, "0.2", 144, 144, gpumem_copy3d_t GPUMEM_COPY3D_INIT);
GPUMEM_ABI_STRUCT(gpumem_cuda_pool_params_t, "0.2", 48, 48, gpumem_cuda_pool_params_t GPUMEM_CUDA_POOL_PARAMS_INIT);
GPUMEM_ABI_STRUCT(gpumem_cuda_pool_info_t, "0.2", 48, 48, zeroed<gpumem_cuda_pool_info_t>());
GPUMEM_ABI_STRUCT(gpumem_block_info_t, "0.3", 64, 64, zeroed<gpumem_block_info_t>());
GPUMEM_ABI_STRUCT(gpumem_trace_header_t, "0.3", 56, 56, zeroed<gpumem_trace_header_t>());
GPUMEM_ABI_STRUCT(gpumem_trace_record_t, "0.3", 64, 80, zeroed<gpumem_trace_record_t>());
// The experimental tier's (gpumem/experimental.h): outside the promise, but read the same way.
GPUMEM_ABI_STRUCT(gpumem_out_of_memory_info_t, "0.4", 96, 96, zeroed<gpumem_out_of_memory_info_t>());
GPUMEM_ABI_STRUCT(gpumem_cupy_target_t, "0.4", 24, 24, zeroed<gpumem_cupy_target_t>());
GPUMEM_ABI_STRUCT(gpumem_pool_growth_info_t, "0.4", 64, 64, zeroed<gpumem_pool_growth_info_t>());
GPUMEM_ABI_STRUCT(gpumem_vm_params_t, "0.4", 32, 32, gpumem_vm_params_t GPUMEM_VM_PARAMS_INIT);
GPUMEM_ABI_STRUCT(gpumem_vm_info_t, "0.4", 40, 40, zeroed<gpumem_vm_info_t>());
GPUMEM_ABI_STRUCT(gpumem_ipc_info_t, "0.4", 64, 64, zeroed<gpumem_ipc_info_t>());
GPUMEM_ABI_STRUCT(gpumem_tenant_params_t, "0.4", 48, 48, gpumem_tenant_params_t GPUMEM_TENANT_PARAMS_INIT);
GPUMEM_ABI_STRUCT(gpumem_tenant_info_t, "0.4", 88, 88, zeroed<gpumem_tenant_info_t>());
GPUMEM_ABI_STRUCT(gpumem_trace_params_t, "0.4", 32, 32, gpumem_trace_params_t GPUMEM_TRACE_PARAMS_INIT);
GPUMEM_ABI_STRUCT(gpumem_trace_frame_t, "0.4", 64, 64, zeroed<gpumem_trace_frame_t>());
GPUMEM_ABI_STRUCT(gpumem_trace_summary_t, "0.4", 384, 384, zeroed<gpumem_trace_summary_t>());

#undef GPUMEM_ABI_STRUCT

// The sizes above are LP64's; a port to another data model records its own.
static_assert(sizeof(void*) == 8 && sizeof(size_t) == 8 && CHAR_BIT == 8, "the struct table holds LP64 sizes");

// Where each struct that grew since its first release ended then: the first field added later.
static_assert(offsetof(gpumem_allocator_functions_t, reserve) == AbiStruct<gpumem_allocator_functions_t>::first_size);
static_assert(offsetof(gpumem_pool_info_t, pending_bytes) == AbiStruct<gpumem_pool_info_t>::first_size);
static_assert(offsetof(gpumem_pool_info_t, address_bytes) == 64, "gpumem_pool_info_t's size in 0.2 and 0.3");
static_assert(offsetof(gpumem_trace_record_t, stack) == AbiStruct<gpumem_trace_record_t>::first_size);

}  // namespace gpumem::capi
