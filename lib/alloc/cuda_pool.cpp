#include "alloc/cuda_pool.hpp"

#include <memory>

#include "alloc/cuda_stream_order.hpp"
#include "core/size_text.hpp"
#include "driver/device.hpp"

namespace gpumem::alloc {
namespace {

// CUmemPoolProps.maxSize is read by CUDA 12.2 drivers and newer; older ones take it for reserved
// bytes, which must be zero.
constexpr int kMaxSizeDriverVersion = 12020;

const char* source_name(uint32_t source) {
  switch (source) {
    case GPUMEM_CUDA_POOL_CURRENT:
      return "GPUMEM_CUDA_POOL_CURRENT";
    case GPUMEM_CUDA_POOL_DEFAULT:
      return "GPUMEM_CUDA_POOL_DEFAULT";
    case GPUMEM_CUDA_POOL_EXTERNAL:
      return "GPUMEM_CUDA_POOL_EXTERNAL";
    default:
      return "GPUMEM_CUDA_POOL_NEW";
  }
}

const char* access_name(CUmemAccess_flags flags) {
  switch (flags) {
    case CU_MEM_ACCESS_FLAGS_PROT_NONE:
      return "none";
    case CU_MEM_ACCESS_FLAGS_PROT_READ:
      return "read-only";
    case CU_MEM_ACCESS_FLAGS_PROT_READWRITE:
      return "read-write";
    default:
      return "unknown";
  }
}

// The caller's pool must be one the device reaches read-write: its own, or one opened to it.
void require_usable(CUmemoryPool pool, int device) {
  CUmemAccess_flags flags = CU_MEM_ACCESS_FLAGS_PROT_NONE;
  CUmemLocation location = driver::device_location(device);
  const CUresult r = driver::api().cuMemPoolGetAccess(&flags, pool, &location);
  if (r != CUDA_SUCCESS)
    driver::throw_result(
        r, format("cuMemPoolGetAccess on params->pool %p (is it a CUDA memory pool?)", static_cast<void*>(pool)));
  if (flags != CU_MEM_ACCESS_FLAGS_PROT_READWRITE)
    fail(GPUMEM_ERROR_INVALID_ARGUMENT,
         "params->pool %p is not a pool of device %d: the device's access to it is %s, not read-write",
         static_cast<void*>(pool), device, access_name(flags));
}

CUmemoryPool create_pool(int device, uint64_t max_size) {
  CUmemPoolProps props{};
  props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
  props.handleTypes = CU_MEM_HANDLE_TYPE_NONE;
  props.location = driver::device_location(device);
  props.maxSize = static_cast<size_t>(max_size);
  CUmemoryPool pool = nullptr;
  const CUresult r = driver::api().cuMemPoolCreate(&pool, &props);
  if (r == CUDA_ERROR_OUT_OF_MEMORY)
    throw Error(GPUMEM_ERROR_OUT_OF_MEMORY,
                format("out of memory creating a CUDA pool on device %d (cuMemPoolCreate)", device), r);
  if (r != CUDA_SUCCESS)
    driver::throw_result(
        r, format("cuMemPoolCreate on device %d with a maximum size of %s bytes", device, grouped(max_size).c_str()));
  return pool;
}

}  // namespace

CudaPoolAllocator::CudaPoolAllocator(int device, CUmemoryPool pool, bool owned, uint64_t max_size)
    : RawAllocator(device, "CUDA pool"), pool_(pool), owned_(owned), max_size_(max_size) {}

CudaPoolAllocator::~CudaPoolAllocator() {
  if (!owned_) return;
  // The driver releases the pool once its pending frees are done. A destructor has no way to
  // report a failure; the pool then goes with the process.
  try {
    driver::unless_shut_down([&] {
      driver::ContextScope scope(driver::primary_context(device()));
      driver::check(driver::api().cuMemPoolDestroy(pool_), "cuMemPoolDestroy");
    });
  } catch (...) {
  }
}

StreamOrder* CudaPoolAllocator::stream_order() { return cuda_stream_order(device()); }

CUcontext CudaPoolAllocator::context_for(gpumem_stream_t stream) {
  const CUcontext ctx = driver::stream_context(stream);
  return ctx ? ctx : driver::primary_context(device());
}

void* CudaPoolAllocator::raw_alloc(size_t size, gpumem_stream_t stream) {
  const driver::Api& a = driver::device_api();
  driver::ContextScope scope(context_for(stream));
  CUdeviceptr p = 0;
  const CUresult r = a.cuMemAllocFromPoolAsync(&p, size, pool_, stream);
  if (r == CUDA_ERROR_OUT_OF_MEMORY) {
    cuuint64_t reserved = 0, used = 0;
    std::string held;
    if (a.cuMemPoolGetAttribute(pool_, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &reserved) == CUDA_SUCCESS &&
        a.cuMemPoolGetAttribute(pool_, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &used) == CUDA_SUCCESS)
      held =
          format("; the pool reserves %s bytes, %s of them in use", grouped(reserved).c_str(), grouped(used).c_str());
    if (max_size_) held += format(", maximum size %s bytes", grouped(max_size_).c_str());
    size_t free = 0, total = 0;
    if (a.cuMemGetInfo(&free, &total) == CUDA_SUCCESS)
      held += format("; %s of %s bytes free on the device", grouped(free).c_str(), grouped(total).c_str());
    throw Error(GPUMEM_ERROR_OUT_OF_MEMORY,
                format("out of memory allocating %s from the CUDA pool %p of device %d (cuMemAllocFromPoolAsync%s)",
                       bytes(size).c_str(), static_cast<void*>(pool_), device(), held.c_str()),
                r);
  }
  if (r != CUDA_SUCCESS)
    driver::throw_result(r, format("cuMemAllocFromPoolAsync of %s bytes from the CUDA pool %p of device %d",
                                   grouped(size).c_str(), static_cast<void*>(pool_), device()));
  return reinterpret_cast<void*>(p);
}

void CudaPoolAllocator::raw_free(void* p, size_t, gpumem_stream_t stream) {
  driver::unless_shut_down([&] {
    const driver::Api& a = driver::api();
    driver::ContextScope scope(context_for(stream));
    const CUresult r = a.cuMemFreeAsync(reinterpret_cast<CUdeviceptr>(p), stream);
    if (r != CUDA_SUCCESS)
      driver::throw_result(r, format("cuMemFreeAsync(%p) into the CUDA pool %p", p, static_cast<void*>(pool_)));
  });
}

uint64_t CudaPoolAllocator::attribute(CUmemPool_attribute attr, const char* name) {
  cuuint64_t value = 0;
  const CUresult r = driver::api().cuMemPoolGetAttribute(pool_, attr, &value);
  if (r != CUDA_SUCCESS)
    driver::throw_result(r, format("cuMemPoolGetAttribute(%s) of the CUDA pool %p", name, static_cast<void*>(pool_)));
  return value;
}

void CudaPoolAllocator::set_attribute(CUmemPool_attribute attr, uint64_t value, const char* name) {
  cuuint64_t v = value;
  const CUresult r = driver::api().cuMemPoolSetAttribute(pool_, attr, &v);
  if (r != CUDA_SUCCESS)
    driver::throw_result(r, format("cuMemPoolSetAttribute(%s, %s) of the CUDA pool %p", name, grouped(value).c_str(),
                                   static_cast<void*>(pool_)));
}

void CudaPoolAllocator::trim(uint64_t keep_bytes) {
  driver::ContextScope scope(driver::primary_context(device()));
  const CUresult r = driver::api().cuMemPoolTrimTo(pool_, static_cast<size_t>(keep_bytes));
  if (r != CUDA_SUCCESS)
    driver::throw_result(
        r, format("cuMemPoolTrimTo(CUDA pool %p, %s bytes)", static_cast<void*>(pool_), grouped(keep_bytes).c_str()));
}

void CudaPoolAllocator::set_release_threshold(uint64_t bytes) {
  driver::ContextScope scope(driver::primary_context(device()));
  set_attribute(CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, bytes, "release threshold");
}

gpumem_cuda_pool_info_t CudaPoolAllocator::info() {
  driver::ContextScope scope(driver::primary_context(device()));
  gpumem_cuda_pool_info_t out{};
  out.reserved = attribute(CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, "reserved memory");
  out.reserved_high = attribute(CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH, "reserved memory high watermark");
  out.used = attribute(CU_MEMPOOL_ATTR_USED_MEM_CURRENT, "used memory");
  out.used_high = attribute(CU_MEMPOOL_ATTR_USED_MEM_HIGH, "used memory high watermark");
  out.release_threshold = attribute(CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, "release threshold");
  return out;
}

void CudaPoolAllocator::reset_pool_peaks() {
  driver::ContextScope scope(driver::primary_context(device()));
  // The driver takes only 0 for a watermark, which restarts it from the current value.
  set_attribute(CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH, 0, "reserved memory high watermark");
  set_attribute(CU_MEMPOOL_ATTR_USED_MEM_HIGH, 0, "used memory high watermark");
}

void CudaPoolAllocator::set_peer_access(int peer_device, bool enable) {
  if (peer_device == device())
    fail(GPUMEM_ERROR_INVALID_ARGUMENT,
         "device %d is this CUDA pool's own device, whose access is always read-write; pass another device",
         peer_device);
  driver::require_device(peer_device);
  const driver::Api& a = driver::api();
  if (!driver::can_access_peer(peer_device, device())) {
    if (!enable) return;  // it has no access to take away
    fail(GPUMEM_ERROR_NOT_SUPPORTED,
         "device %d cannot reach device %d's memory (cuDeviceCanAccessPeer: no peer path between them), so the "
         "CUDA pool %p cannot be opened to it",
         peer_device, device(), static_cast<void*>(pool_));
  }
  CUmemAccessDesc desc{};
  desc.location = driver::device_location(peer_device);
  desc.flags = enable ? CU_MEM_ACCESS_FLAGS_PROT_READWRITE : CU_MEM_ACCESS_FLAGS_PROT_NONE;
  driver::ContextScope scope(driver::primary_context(device()));
  const CUresult r = a.cuMemPoolSetAccess(pool_, &desc, 1);
  if (r != CUDA_SUCCESS)
    driver::throw_result(r, format("cuMemPoolSetAccess(CUDA pool %p of device %d, device %d, %s)",
                                   static_cast<void*>(pool_), device(), peer_device, access_name(desc.flags)));
}

Allocator* make_cuda_pool(const gpumem_cuda_pool_params_t& params) {
  const uint32_t source = params.source;
  if (params.flags != 0)
    fail(GPUMEM_ERROR_INVALID_ARGUMENT, "params->flags is 0x%x; no flag is defined yet: pass 0", params.flags);
  if (source > GPUMEM_CUDA_POOL_NEW)
    fail(GPUMEM_ERROR_INVALID_ARGUMENT,
         "params->source %u is not GPUMEM_CUDA_POOL_CURRENT (0), GPUMEM_CUDA_POOL_DEFAULT (1), "
         "GPUMEM_CUDA_POOL_EXTERNAL (2) or GPUMEM_CUDA_POOL_NEW (3)",
         source);
  if (source == GPUMEM_CUDA_POOL_EXTERNAL && !params.pool)
    fail(GPUMEM_ERROR_INVALID_ARGUMENT, "params->pool is NULL; GPUMEM_CUDA_POOL_EXTERNAL needs the caller's pool");
  if (source != GPUMEM_CUDA_POOL_EXTERNAL && params.pool)
    fail(GPUMEM_ERROR_INVALID_ARGUMENT,
         "params->pool is %p but params->source is %s, which does not use it; pass GPUMEM_CUDA_POOL_EXTERNAL to "
         "allocate from that pool",
         static_cast<void*>(params.pool), source_name(source));
  if (params.max_size && source != GPUMEM_CUDA_POOL_NEW)
    fail(GPUMEM_ERROR_INVALID_ARGUMENT,
         "params->max_size is %s bytes but params->source is %s: a pool that exists keeps the size it was made "
         "with; only GPUMEM_CUDA_POOL_NEW takes one",
         grouped(params.max_size).c_str(), source_name(source));
  if (params.device < 0)
    fail(GPUMEM_ERROR_INVALID_DEVICE, "params->device is %d; devices are numbered from 0", params.device);

  const int device = params.device;
  driver::require_device(device);
  const driver::Api& a = driver::device_api();
  const CUdevice dev = driver::cu_device(device);
  int pools = 0;
  driver::check(a.cuDeviceGetAttribute(&pools, CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED, dev),
                "cuDeviceGetAttribute(memory pools)");
  if (!pools) fail(GPUMEM_ERROR_NOT_SUPPORTED, "device %d has no memory pools (stream-ordered allocation)", device);
  if (params.max_size) {
    const int version = driver::driver_version();
    if (version < kMaxSizeDriverVersion)
      fail(GPUMEM_ERROR_NOT_SUPPORTED,
           "params->max_size (%s bytes) needs a CUDA 12.2 or newer driver; this one supports CUDA %d.%d",
           grouped(params.max_size).c_str(), version / 1000, version % 1000 / 10);
  }

  const bool owned = source == GPUMEM_CUDA_POOL_NEW;
  // A new pool that names no size is bounded as a gpumem pool of the device would be, by
  // GPUMEM_GPU_MEMORY_LIMIT, where the driver reads the bound.
  uint64_t max_size = params.max_size;
  if (owned && !max_size && driver::driver_version() >= kMaxSizeDriverVersion)
    max_size = limit_from_environment(driver::device_total_memory, device);

  driver::ContextScope scope(driver::primary_context(device));
  CUmemoryPool pool = nullptr;
  switch (source) {
    case GPUMEM_CUDA_POOL_CURRENT:
      driver::check(a.cuDeviceGetMemPool(&pool, dev), "cuDeviceGetMemPool");
      break;
    case GPUMEM_CUDA_POOL_DEFAULT:
      driver::check(a.cuDeviceGetDefaultMemPool(&pool, dev), "cuDeviceGetDefaultMemPool");
      break;
    case GPUMEM_CUDA_POOL_EXTERNAL:
      pool = params.pool;
      require_usable(pool, device);
      break;
    default:
      pool = create_pool(device, max_size);
      break;
  }
  std::unique_ptr<CudaPoolAllocator> allocator;
  try {
    allocator.reset(new CudaPoolAllocator(device, pool, owned, max_size));
  } catch (...) {
    if (owned) a.cuMemPoolDestroy(pool);
    throw;
  }
  // A pool of gpumem's own keeps everything by default; one shared with others is changed only
  // when asked. Last, so that a failure before leaves a shared pool as it was.
  uint64_t threshold = params.release_threshold;
  if (threshold == GPUMEM_CUDA_POOL_KEEP_THRESHOLD && owned) threshold = UINT64_MAX;
  if (threshold != GPUMEM_CUDA_POOL_KEEP_THRESHOLD) allocator->set_release_threshold(threshold);
  return allocator.release();
}

}  // namespace gpumem::alloc
