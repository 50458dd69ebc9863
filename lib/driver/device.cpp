#include "driver/device.hpp"

#include "driver/driver.hpp"

namespace gpumem::driver {

CUdevice cu_device(int device) {
  CUdevice dev = 0;
  check(api().cuDeviceGet(&dev, device), "cuDeviceGet");
  return dev;
}

CUmemLocation device_location(int device) {
  CUmemLocation location{};
  location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  location.id = device;
  return location;
}

bool can_access_peer(int peer_device, int device) {
  int can = 0;
  check(api().cuDeviceCanAccessPeer(&can, cu_device(peer_device), cu_device(device)), "cuDeviceCanAccessPeer");
  return can != 0;
}

int driver_version() {
  int version = 0;
  check(api().cuDriverGetVersion(&version), "cuDriverGetVersion");
  return version;
}

void device_info(int device, gpumem_device_info_t& out) {
  require_device(device);
  const Api& a = api();
  CUdevice dev = 0;
  check(a.cuDeviceGet(&dev, device), "cuDeviceGet");
  check(a.cuDeviceGetName(out.name, sizeof out.name, dev), "cuDeviceGetName");
  out.name[sizeof out.name - 1] = '\0';
  check(a.cuDeviceTotalMem(&out.total_memory, dev), "cuDeviceTotalMem");
  const auto attribute = [&](CUdevice_attribute attr) {
    int value = 0;
    const CUresult r = a.cuDeviceGetAttribute(&value, attr, dev);
    if (r != CUDA_SUCCESS)
      throw_result(r, format("cuDeviceGetAttribute(attribute %d) of device %d", static_cast<int>(attr), device));
    return value;
  };
  out.compute_capability_major = attribute(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR);
  out.compute_capability_minor = attribute(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR);
  out.unified_addressing = attribute(CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING) != 0;
  out.managed_memory = attribute(CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY) != 0;
  out.concurrent_managed_access = attribute(CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS) != 0;
  out.memory_pools = attribute(CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED) != 0;
  out.pageable_memory_access = attribute(CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS) != 0;
  out.host_register = attribute(CU_DEVICE_ATTRIBUTE_HOST_REGISTER_SUPPORTED) != 0;
  out.can_map_host_memory = attribute(CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY) != 0;
}

uint64_t device_total_memory(int device) {
  require_device(device);
  size_t total = 0;
  check(api().cuDeviceTotalMem(&total, device), "cuDeviceTotalMem");
  return total;
}

void device_memory(int device, size_t& free, size_t& total) {
  ContextScope scope(primary_context(device));
  const CUresult r = api().cuMemGetInfo(&free, &total);
  if (r != CUDA_SUCCESS) throw_result(r, format("cuMemGetInfo on device %d", device));
}

}  // namespace gpumem::driver
