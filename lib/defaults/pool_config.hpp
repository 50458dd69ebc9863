// How the device pools are built: GPUMEM_POOL_CONF ("backend:vm,map_unit:2MiB"), in the style of
// PYTORCH_CUDA_ALLOC_CONF, and gpumem_pool_set_device_config(), which overrides it key by key for
// the device pools not made yet.
#pragma once

#include <cstdint>
#include <string>

namespace gpumem::alloc {

struct PoolConfig {
  enum class Backend { kAuto, kVm, kClassic };
  Backend backend = Backend::kAuto;  // auto: over virtual memory where the device supports it
  uint64_t map_unit = 0;             // 0: the device's granularity
  uint64_t range_size = 0;           // 0: the device's memory
  bool page_reclaim = true;
  uint64_t soft_limit = 0;  // 0: none (gpumem_pool_set_soft_limit)
};

// Reads "key:value,key:value" over base; throws INVALID_ARGUMENT naming source and the key.
PoolConfig parse_pool_config(const char* source, const char* text, PoolConfig base = {});
// The environment's, then what calls set (the call's keys win), for device's pool: from here on
// set_device_pool_config() is refused.
PoolConfig device_pool_config(int device);
// Parses and keeps text for device pools made from now on; refuses (BUSY) once one was asked for.
void set_device_pool_config(const char* text);

}  // namespace gpumem::alloc
