// CUDA arrays, owned through gpumem_array_t handles (core/handle.hpp).
#pragma once

#include "core/handle.hpp"
#include "driver/driver.hpp"
#include "gpumem/array.h"

struct gpumem_array_s : gpumem::Handle<0x676d617272617921> {  // "gmarray!"
  CUarray handle;
  CUcontext context;
  gpumem_array_desc_t desc;  // as the driver reported it after creation; arrays never change shape
};

namespace gpumem::memory {

gpumem_array_t* array_create(const gpumem_array_desc_t& desc);
// Throws GPUMEM_ERROR_INVALID_HANDLE unless the array is live.
void array_destroy(gpumem_array_t* array);
void array_get_desc(const gpumem_array_t* array, gpumem_array_desc_t& out);

// What a copy needs of a live array; throws as array_get_desc().
struct ArrayRef {
  CUarray handle;
  CUcontext context;
  gpumem_array_desc_t desc;
  size_t element_bytes;  // format size x channels
};
ArrayRef array_lookup(const gpumem_array_t* array);

}  // namespace gpumem::memory
