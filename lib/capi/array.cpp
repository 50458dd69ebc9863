// CUDA arrays at the C boundary.
#include "memory/array.hpp"

#include "capi/guard.hpp"

using gpumem::capi::guard;

extern "C" {

GPUMEM_API gpumem_status_t gpumem_array_desc_init(gpumem_array_desc_t* desc, size_t struct_size) {
  return guard([&] { gpumem::capi::init_struct(desc, "desc", struct_size); });
}

GPUMEM_API gpumem_status_t gpumem_array_create(const gpumem_array_desc_t* desc, gpumem_array_t** out_array) {
  return guard([&] {
    gpumem::require_out(out_array, "out_array");
    *out_array = nullptr;
    *out_array = gpumem::memory::array_create(gpumem::capi::in_struct(desc, "desc"));
  });
}

GPUMEM_API gpumem_status_t gpumem_array_destroy(gpumem_array_t* array) {
  return guard([&] {
    if (array) gpumem::memory::array_destroy(array);
  });
}

GPUMEM_API gpumem_status_t gpumem_array_get_desc(const gpumem_array_t* array, gpumem_array_desc_t* out_desc) {
  return guard([&] {
    gpumem::capi::fill_struct(out_desc, "out_desc",
                              [&](gpumem_array_desc_t& desc) { gpumem::memory::array_get_desc(array, desc); });
  });
}

}  // extern "C"
