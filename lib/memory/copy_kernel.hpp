// gpumem's pitched copy kernels, embedded in the library and loaded on each device on first use.
#pragma once

#include "driver/driver.hpp"
#include "memory/copy_kernel.h"

namespace gpumem::memory {

// Queues rows on stream, with the device's primary context current. Returns false, having done
// nothing, where the kernels are unavailable: built without them, or the device cannot load them.
bool launch_copy_rows(int device, gpumem_copy_rows_t rows, CUstream stream);

}  // namespace gpumem::memory
