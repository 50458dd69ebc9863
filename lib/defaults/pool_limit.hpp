// What a pool may hold: its own limit, a fraction of its device's memory, or
// GPUMEM_GPU_MEMORY_LIMIT for a pool over device memory that names neither.
#pragma once

#include <cstdint>

namespace gpumem::alloc {

// fraction in (0, 1] of device's memory, in bytes; refuses host pools (device < 0) and a limit
// under a byte.
uint64_t limit_of_fraction(int device, double fraction);
// The limit of a new pool: `limit`, else `fraction` of the device's memory, else for a device
// pool the environment's (0: none). Refuses both given.
uint64_t pool_limit(uint64_t limit, double fraction, int device);

}  // namespace gpumem::alloc
