// VM allocators at the C boundary.
#include "alloc/vm.hpp"
#include "capi/guard.hpp"

using gpumem::fail;
using gpumem::require_out;
using gpumem::alloc::Allocator;
using gpumem::alloc::VmAllocator;
using gpumem::capi::guard;

namespace {

VmAllocator* vm_from(gpumem_allocator_t* handle) {
  Allocator* a = Allocator::from(handle);
  auto* allocator = dynamic_cast<VmAllocator*>(a);
  if (!allocator)
    fail(GPUMEM_ERROR_INVALID_HANDLE,
         "%p is a %s allocator, not a VM allocator (from gpumem_allocator_create_vm); for a pool over one, pass its "
         "upstream",
         static_cast<void*>(handle), a->kind());
  return allocator;
}

}  // namespace

extern "C" {

GPUMEM_API gpumem_status_t gpumem_vm_params_init(gpumem_vm_params_t* params, size_t struct_size) {
  return guard([&] { gpumem::capi::init_struct(params, "params", struct_size); });
}

GPUMEM_API gpumem_status_t gpumem_allocator_create_vm(const gpumem_vm_params_t* params,
                                                      gpumem_allocator_t** out_allocator) {
  return guard([&] {
    require_out(out_allocator, "out_allocator");
    *out_allocator = nullptr;
    *out_allocator = gpumem::alloc::make_vm(gpumem::capi::in_struct(params, "params"));
  });
}

GPUMEM_API gpumem_status_t gpumem_vm_get_info(gpumem_allocator_t* allocator, gpumem_vm_info_t* out_info) {
  return guard([&] {
    gpumem::capi::fill_struct(out_info, "out_info", [&](gpumem_vm_info_t& out) {
      const gpumem_vm_info_t info = vm_from(allocator)->info();
      out.map_unit = info.map_unit;
      out.range_size = info.range_size;
      out.reserved_bytes = info.reserved_bytes;
      out.mapped_bytes = info.mapped_bytes;
    });
  });
}

}  // extern "C"
