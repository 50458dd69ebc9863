// Sizes written as text, in environment variables and configuration strings.
#pragma once

#include <cstdint>

namespace gpumem {

// Parses "1073741824", "8GiB", "512MB", or "50%" of device_total(device) (refused when device_total
// is NULL); `variable` names where the text came from, for the error. Throws on text it cannot read.
uint64_t parse_size(const char* variable, const char* text, uint64_t (*device_total)(int device), int device);

// The limit from GPUMEM_GPU_MEMORY_LIMIT, 0 if unset; device_total is asked only for a percentage.
// Throws on a value it cannot read.
uint64_t limit_from_environment(uint64_t (*device_total)(int device), int device);

}  // namespace gpumem
