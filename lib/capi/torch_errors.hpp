// PyTorch's own exceptions, thrown for gpumem_torch_alloc_raising() so that a failure reaches
// Python as torch.OutOfMemoryError or RuntimeError rather than as a NULL PyTorch does not check.
#pragma once

#include <cstdint>

namespace gpumem::capi {

// Throws c10::OutOfMemoryError for GPUMEM_ERROR_OUT_OF_MEMORY, else c10::Error, with `detail` as
// the message; returns (throws nothing) where this process has no libc10 with the symbols needed.
void throw_as_torch(int32_t status, const char* detail);

}  // namespace gpumem::capi
