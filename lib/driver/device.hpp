// Device properties and free memory.
#pragma once

#include <cstdint>

#include "gpumem/device.h"

namespace gpumem::driver {

int driver_version();
void device_info(int device, gpumem_device_info_t& out);
void device_memory(int device, size_t& free, size_t& total);
uint64_t device_total_memory(int device);

}  // namespace gpumem::driver
