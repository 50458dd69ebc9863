// CUDA arrays at the C boundary.
#include "memory/array.hpp"

#include "capi/guard.hpp"

using gpumem::capi::guard;

extern "C" {

GPUMEM_API gpumem_status_t gpumem_array_desc_init(gpumem_array_desc_t* desc, size_t struct_size) {
  return guard([&] {
    gpumem::require_out(desc, "desc");
    if (struct_size < sizeof(gpumem_array_desc_t))
      gpumem::fail(GPUMEM_ERROR_INVALID_ARGUMENT, "struct_size is %zu; pass sizeof(gpumem_array_desc_t) (%zu)",
                   struct_size, sizeof(gpumem_array_desc_t));
    *desc = gpumem_array_desc_t GPUMEM_ARRAY_DESC_INIT;
  });
}

GPUMEM_API gpumem_status_t gpumem_array_create(const gpumem_array_desc_t* desc, gpumem_array_t** out_array) {
  return guard([&] {
    gpumem::require_out(out_array, "out_array");
    *out_array = nullptr;
    gpumem::require(desc != nullptr, "desc is NULL");
    if (desc->struct_size < sizeof(gpumem_array_desc_t))
      gpumem::fail(GPUMEM_ERROR_INVALID_ARGUMENT, "desc->struct_size is %zu; set it to sizeof (%zu)", desc->struct_size,
                   sizeof(gpumem_array_desc_t));
    *out_array = gpumem::memory::array_create(*desc);
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
