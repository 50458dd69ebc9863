#include "alloc/vm.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <algorithm>
#include <iterator>
#include <memory>
#include <string>

#include "alloc/cuda_stream_order.hpp"

namespace gpumem::alloc {
namespace {

// Each physical allocation costs a driver call of about 40 us whatever its size up to about this
// (measured on an H200: 4 GiB maps in 85 ms in 2 MiB units, in 7 ms in 32 MiB units), so a pool
// maps this much at a time unless told otherwise, as PyTorch's expandable segments map 20 MiB.
constexpr size_t kDefaultMapUnit = size_t{32} << 20;

bool power_of_two(uint64_t n) { return n != 0 && (n & (n - 1)) == 0; }

void* pointer(uintptr_t p) { return reinterpret_cast<void*>(p); }

}  // namespace

VmAllocator::VmAllocator(int device, size_t unit, size_t granularity, size_t range_size)
    : RawAllocator(device, "vm"), unit_(unit), granularity_(granularity), range_size_(range_size) {
  prop_.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop_.location = driver::device_location(device);
  // Every physical allocation can be exported to another process (ipc.h) where the device can.
  int fd_handles = 0;
  if (driver::api().cuDeviceGetAttribute(&fd_handles, CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED,
                                         driver::cu_device(device)) == CUDA_SUCCESS &&
      fd_handles)
    prop_.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
}

SharedExtent VmAllocator::shared_extent(uintptr_t p) {
  if (prop_.requestedHandleTypes != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
    fail(GPUMEM_ERROR_NOT_SUPPORTED,
         "device %d cannot export its memory as a file descriptor "
         "(CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED is 0)",
         device());
  std::lock_guard<SpinLock> lock(mutex_);
  const auto* r = reservation_holding(p, 1);
  if (!r || !mapped_whole(p, p + 1))
    fail(GPUMEM_ERROR_NOT_OWNED, "%p is not memory the vm allocator of device %d has mapped", pointer(p), device());
  return {true, r->first, r->second.size, r->second.direct ? r->second.size : unit_};
}

VmAllocator::~VmAllocator() {
  close_all(take_shared_fds(0, UINTPTR_MAX));
  // What a pool left reserved goes with the allocator; a destructor has no way to report a
  // failure, so the rest then goes with the process.
  std::vector<std::pair<uintptr_t, Reservation>> left(reservations_.begin(), reservations_.end());
  for (const auto& [base, r] : left) {
    const size_t size = r.size;
    try {
      for (const Interval& span : mapped_within(base, base + size))
        unmap_memory(span.first, span.second - span.first, false, r.direct ? size : unit_);
      free_addresses(base, size);
    } catch (...) {
    }
  }
}

StreamOrder* VmAllocator::stream_order() { return cuda_stream_order(device()); }

// ---- Sharing with other processes ------------------------------------------------------------

namespace {
constexpr size_t kMaxSharedFds = 1024;  // kept at once: a process's descriptors are limited

int copy_fd(int fd) {
  const int copy = fcntl(fd, F_DUPFD_CLOEXEC, 0);
  if (copy < 0) fail(GPUMEM_ERROR_IO, "duplicating a descriptor of exported device memory: %s", strerror(errno));
  return copy;
}
}  // namespace

int VmAllocator::shared_fd(uintptr_t unit) {
  {
    std::lock_guard<SpinLock> lock(mutex_);
    if (const auto it = shared_fds_.find(unit); it != shared_fds_.end()) return copy_fd(it->second);
  }
  const driver::Api& a = driver::api();
  if (!a.cuMemExportToShareableHandle || !a.cuMemRetainAllocationHandle)
    fail(GPUMEM_ERROR_NOT_SUPPORTED,
         "the CUDA driver lacks cuMemExportToShareableHandle or cuMemRetainAllocationHandle");
  driver::ContextScope scope(driver::primary_context(device()));
  CUmemGenericAllocationHandle handle = 0;
  driver::check(a.cuMemRetainAllocationHandle(&handle, pointer(unit)),
                "cuMemRetainAllocationHandle (exporting device memory)");
  int fd = -1;
  const CUresult r = a.cuMemExportToShareableHandle(&fd, handle, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
  a.cuMemRelease(handle);
  driver::check(r, "cuMemExportToShareableHandle (exporting device memory)");
  int copy = -1;
  try {
    copy = copy_fd(fd);
    std::lock_guard<SpinLock> lock(mutex_);
    if (shared_fds_.size() < kMaxSharedFds && mapped_whole(unit, unit + 1) && shared_fds_.emplace(unit, fd).second)
      return copy;
  } catch (...) {
    ::close(fd);
    throw;
  }
  ::close(fd);
  return copy;
}

std::vector<int> VmAllocator::take_shared_fds(uintptr_t lo, uintptr_t hi) {
  std::vector<int> out;
  for (auto it = shared_fds_.lower_bound(lo); it != shared_fds_.end() && it->first < hi;) {
    out.push_back(it->second);
    it = shared_fds_.erase(it);
  }
  return out;
}

void VmAllocator::close_all(const std::vector<int>& fds) noexcept {
  for (int fd : fds) ::close(fd);
}

// ---- Addresses --------------------------------------------------------------------------------

uintptr_t VmAllocator::reserve_addresses(size_t size, bool direct) {
  const driver::Api& a = driver::api();
  driver::ContextScope scope(driver::primary_context(device()));
  CUdeviceptr p = 0;
  const CUresult r = a.cuMemAddressReserve(&p, size, direct ? granularity_ : unit_, 0, 0);
  if (r == CUDA_ERROR_OUT_OF_MEMORY)
    throw Error(
        GPUMEM_ERROR_OUT_OF_MEMORY,
        format("out of addresses reserving %s on device %d (cuMemAddressReserve)", bytes(size).c_str(), device()), r);
  if (r != CUDA_SUCCESS)
    driver::throw_result(r, format("cuMemAddressReserve of %s bytes on device %d", grouped(size).c_str(), device()));
  const uintptr_t base = static_cast<uintptr_t>(p);
  try {
    std::lock_guard<SpinLock> lock(mutex_);
    reservations_.emplace(base, Reservation{size, direct});
    reserved_bytes_ += size;
  } catch (...) {
    a.cuMemAddressFree(p, size);  // no room to remember it: give it back rather than lose it
    throw;
  }
  return base;
}

void VmAllocator::free_addresses(uintptr_t base, size_t size) {
  // A driver that has shut down (at process exit) took the addresses with it.
  driver::unless_shut_down([&] {
    const CUresult r = driver::api().cuMemAddressFree(static_cast<CUdeviceptr>(base), size);
    if (r != CUDA_SUCCESS)
      driver::throw_result(
          r, format("cuMemAddressFree(%p, %s bytes) on device %d", pointer(base), grouped(size).c_str(), device()));
  });
  std::lock_guard<SpinLock> lock(mutex_);
  reservations_.erase(base);
  reserved_bytes_ -= size;
}

// ---- Memory -----------------------------------------------------------------------------------

void VmAllocator::fail_mapping(CUresult result, const char* call, size_t size, size_t piece) {
  if (result == CUDA_ERROR_OUT_OF_MEMORY) {
    size_t free = 0, total = 0;
    const std::string held =
        driver::api().cuMemGetInfo(&free, &total) == CUDA_SUCCESS
            ? format(": the device has %s of %s bytes free", grouped(free).c_str(), grouped(total).c_str())
            : "";
    throw Error(GPUMEM_ERROR_OUT_OF_MEMORY,
                format("out of memory mapping %s on device %d%s (%s, in units of %s)", bytes(size).c_str(), device(),
                       held.c_str(), call, bytes(piece).c_str()),
                result);
  }
  driver::throw_result(result, format("%s of %s bytes, mapping %s on device %d", call, grouped(piece).c_str(),
                                      bytes(size).c_str(), device()));
}

void VmAllocator::refuse_during_capture(const char* fn, const char* work) const {
  if (driver::capture_mode_relaxed()) return;
  driver::refuse_during_capture(fn, work, "allocate and free before the capture begins or after it ends",
                                {driver::primary_context(device())});
}

void VmAllocator::undo_map(uintptr_t p, size_t size, size_t piece) noexcept {
  try {
    const driver::Api& a = driver::api();
    for (size_t done = 0; done < size; done += piece) a.cuMemUnmap(static_cast<CUdeviceptr>(p + done), piece);
  } catch (...) {
  }
}

void VmAllocator::set_access_and_record(uintptr_t p, size_t size, uintptr_t range, bool counted) {
  std::vector<CUmemAccessDesc> access;
  uint64_t generation;
  {
    std::lock_guard<SpinLock> lock(mutex_);
    access = access_list(false);
    generation = peer_generation_;
  }
  // The access is set until it matches peers_ as it is when the span is recorded: a change of
  // peer access made meanwhile did not see this span.
  for (;;) {
    const CUresult r = driver::api().cuMemSetAccess(static_cast<CUdeviceptr>(p), size, access.data(), access.size());
    if (r != CUDA_SUCCESS)
      driver::throw_result(
          r, format("cuMemSetAccess of %s bytes at %p for device %d and %zu peer%s", grouped(size).c_str(), pointer(p),
                    device(), access.size() - 1, access.size() == 2 ? "" : "s"));
    std::lock_guard<SpinLock> lock(mutex_);
    if (generation == peer_generation_) {
      add_span(p, p + size, range);
      if (counted) stats_.on_reserve(size);
      return;
    }
    generation = peer_generation_;
    access = access_list(true);
  }
}

void VmAllocator::map_memory(uintptr_t p, size_t size, uintptr_t range, bool counted, size_t piece) {
  const driver::Api& a = driver::api();
  driver::ContextScope scope(driver::primary_context(device()));
  refuse_during_capture("gpumem_alloc", "mapping device memory (cuMemCreate, cuMemMap)");
  size_t done = 0;  // bytes this call has mapped
  try {
    for (; done < size; done += piece) {
      CUmemGenericAllocationHandle handle = 0;
      CUresult r = a.cuMemCreate(&handle, piece, &prop_, 0);
      if (r != CUDA_SUCCESS) {
        // Undone first, so the detail tells what the device has without this call's units.
        undo_map(p, done, piece);
        done = 0;
        fail_mapping(r, "cuMemCreate", size, piece);
      }
      r = a.cuMemMap(static_cast<CUdeviceptr>(p + done), piece, 0, handle, 0);
      // The mapping holds the memory from here on, and unmapping it frees the memory: the handle
      // is not needed again.
      const CUresult released = a.cuMemRelease(handle);
      if (r != CUDA_SUCCESS) {
        undo_map(p, done, piece);
        done = 0;
        fail_mapping(r, "cuMemMap", size, piece);
      }
      if (released != CUDA_SUCCESS) {
        done += piece;
        driver::throw_result(released, format("cuMemRelease after mapping %s at %p on device %d", bytes(piece).c_str(),
                                              pointer(p + done - piece), device()));
      }
    }
    set_access_and_record(p, size, range, counted);
  } catch (...) {
    undo_map(p, done, piece);
    throw;
  }
}

void VmAllocator::unmap_memory(uintptr_t p, size_t size, bool counted, size_t piece, size_t* unmapped) {
  if (unmapped) *unmapped = 0;
  uintptr_t range;
  std::vector<int> exported;  // closed outside the lock (closing may enter the driver)
  {
    std::lock_guard<SpinLock> lock(mutex_);
    if (!mapped_whole(p, p + size))
      fail(GPUMEM_ERROR_INTERNAL, "unmapping %s at %p, which the vm allocator of device %d has not all mapped",
           bytes(size).c_str(), pointer(p), device());
    // Out of the spans first, so a change of peer access leaves it alone from here on.
    range = remove_span(p, p + size);
    exported = take_shared_fds(p, p + size);  // the memory goes: nothing may export it any more
  }
  close_all(exported);
  const driver::Api& a = driver::api();
  size_t done = 0;  // bytes unmapped
  try {
    // A driver that has shut down (at process exit) took all memory with it.
    driver::unless_shut_down([&] {
      driver::ContextScope scope(driver::primary_context(device()));
      refuse_during_capture("gpumem_free", "unmapping device memory (cuCtxSynchronize, cuMemUnmap)");
      // cuMemUnmap, unlike cuMemFree, does not wait for work still using the memory: the device
      // is synchronized first, as PyTorch's expandable segments synchronize before unmapping.
      driver::check(a.cuCtxSynchronize(), "cuCtxSynchronize (waiting for the device's work before unmapping)");
      // One call per physical allocation: the driver unmaps whole mappings only.
      for (; done < size; done += piece) {
        const CUresult r = a.cuMemUnmap(static_cast<CUdeviceptr>(p + done), piece);
        if (r != CUDA_SUCCESS)
          driver::throw_result(
              r, format("cuMemUnmap of %s at %p on device %d", bytes(piece).c_str(), pointer(p + done), device()));
      }
    });
  } catch (...) {
    // What is still mapped stays the allocator's.
    try {
      std::lock_guard<SpinLock> lock(mutex_);
      add_span(p + done, p + size, range);
      if (counted && done) stats_.on_unreserve(done);
    } catch (...) {
    }
    if (unmapped) *unmapped = done;
    throw;
  }
  if (unmapped) *unmapped = size;
  if (counted) {
    std::lock_guard<SpinLock> lock(mutex_);
    stats_.on_unreserve(size);
  }
}

// ---- Direct allocations -----------------------------------------------------------------------

void* VmAllocator::raw_alloc(size_t size, gpumem_stream_t) {
  if (size > SIZE_MAX - (granularity_ - 1))
    fail(GPUMEM_ERROR_INVALID_ARGUMENT, "%s overflows rounding to the device's granularity (%s)", bytes(size).c_str(),
         bytes(granularity_).c_str());
  // One physical allocation, as cuMemAlloc makes: its own addresses, nothing to grow.
  const size_t rounded = (size + granularity_ - 1) / granularity_ * granularity_;
  const uintptr_t p = reserve_addresses(rounded, true);
  try {
    map_memory(p, rounded, p, false, rounded);
  } catch (...) {
    try {
      free_addresses(p, rounded);
    } catch (...) {
    }
    throw;
  }
  return pointer(p);
}

void VmAllocator::raw_free(void* p, size_t, gpumem_stream_t) {
  const uintptr_t base = reinterpret_cast<uintptr_t>(p);
  size_t size;
  {
    std::lock_guard<SpinLock> lock(mutex_);
    const auto it = reservations_.find(base);
    if (it == reservations_.end() || !it->second.direct)
      fail(GPUMEM_ERROR_INTERNAL, "%p is a live allocation of the vm allocator of device %d, but not reserved", p,
           device());
    size = it->second.size;
  }
  unmap_memory(base, size, false, size);
  free_addresses(base, size);
}

// ---- Ranges, for a pool -----------------------------------------------------------------------

uintptr_t VmAllocator::reserve(size_t size) {
  if (size == 0 || size % unit_ != 0)
    fail(GPUMEM_ERROR_INTERNAL, "a range of %s asked of the vm allocator of device %d is not whole units of %s",
         bytes(size).c_str(), device(), bytes(unit_).c_str());
  return reserve_addresses(size, false);
}

void VmAllocator::unreserve(uintptr_t base, size_t size) {
  std::vector<Interval> left;
  {
    std::lock_guard<SpinLock> lock(mutex_);
    const auto it = reservations_.find(base);
    if (it == reservations_.end() || it->second.direct || it->second.size != size)
      fail(GPUMEM_ERROR_INTERNAL, "%p + %s is not a range the vm allocator of device %d reserved for a pool",
           pointer(base), bytes(size).c_str(), device());
    left = mapped_within(base, base + size);
  }
  // The addresses cannot be released with memory mapped in them; that memory is not lost either.
  for (const Interval& span : left) unmap_memory(span.first, span.second - span.first, true, unit_);
  free_addresses(base, size);
}

void VmAllocator::map(uintptr_t p, size_t size) {
  uintptr_t range;
  {
    std::lock_guard<SpinLock> lock(mutex_);
    const auto* r = (size == 0 || p % unit_ || size % unit_) ? nullptr : reservation_holding(p, size);
    if (!r || r->second.direct || mapped_any(p, p + size))
      fail(GPUMEM_ERROR_INTERNAL,
           "mapping %s at %p: not whole units of %s inside a range the vm allocator of device %d reserved for a pool, "
           "with nothing mapped there yet",
           bytes(size).c_str(), pointer(p), bytes(unit_).c_str(), device());
    range = r->first;
  }
  map_memory(p, size, range, true, unit_);
}

void VmAllocator::unmap(uintptr_t p, size_t size, size_t& unmapped) {
  unmapped = 0;
  {
    std::lock_guard<SpinLock> lock(mutex_);
    const auto* r = (size == 0 || p % unit_ || size % unit_) ? nullptr : reservation_holding(p, size);
    if (!r || r->second.direct)
      fail(GPUMEM_ERROR_INTERNAL,
           "unmapping %s at %p: not whole units of %s inside a range the vm allocator of device %d reserved for a "
           "pool",
           bytes(size).c_str(), pointer(p), bytes(unit_).c_str(), device());
  }
  unmap_memory(p, size, true, unit_, &unmapped);
}

// ---- Bookkeeping, under mutex_ ----------------------------------------------------------------

std::vector<CUmemAccessDesc> VmAllocator::access_list(bool with_revoked) const {
  std::vector<CUmemAccessDesc> out;
  out.reserve(1 + peers_.size());
  out.push_back(access_of(device(), true));
  for (const auto& [peer, enabled] : peers_)
    if (enabled || with_revoked) out.push_back(access_of(peer, enabled));
  return out;
}

const std::pair<const uintptr_t, VmAllocator::Reservation>* VmAllocator::reservation_holding(uintptr_t p,
                                                                                             size_t size) const {
  auto it = reservations_.upper_bound(p);
  if (it == reservations_.begin()) return nullptr;
  --it;
  const uintptr_t offset = p - it->first;
  return offset < it->second.size && size <= it->second.size - offset ? &*it : nullptr;
}

bool VmAllocator::mapped_whole(uintptr_t lo, uintptr_t hi) const {
  auto it = mapped_.upper_bound(lo);
  if (it == mapped_.begin()) return false;
  --it;
  return it->second.end >= hi;
}

bool VmAllocator::mapped_any(uintptr_t lo, uintptr_t hi) const {
  auto it = mapped_.lower_bound(hi);  // the first span at or after hi cannot meet [lo, hi)
  if (it == mapped_.begin()) return false;
  --it;
  return it->second.end > lo;
}

std::vector<VmAllocator::Interval> VmAllocator::mapped_within(uintptr_t lo, uintptr_t hi) const {
  std::vector<Interval> out;
  auto it = mapped_.upper_bound(lo);
  if (it != mapped_.begin()) --it;
  for (; it != mapped_.end() && it->first < hi; ++it)
    if (it->second.end > lo) out.emplace_back(std::max(it->first, lo), std::min(it->second.end, hi));
  return out;
}

void VmAllocator::add_span(uintptr_t lo, uintptr_t hi, uintptr_t range) {
  if (lo == hi) return;
  auto it = mapped_.emplace(lo, Span{hi, range}).first;  // the one step that may throw
  const auto next = std::next(it);
  if (next != mapped_.end() && next->first == hi && next->second.range == range) {
    it->second.end = next->second.end;
    mapped_.erase(next);
  }
  if (it != mapped_.begin()) {
    const auto prev = std::prev(it);
    if (prev->second.end == lo && prev->second.range == range) {
      prev->second.end = it->second.end;
      mapped_.erase(it);
    }
  }
  mapped_bytes_ += hi - lo;
}

uintptr_t VmAllocator::remove_span(uintptr_t lo, uintptr_t hi) {
  auto it = std::prev(mapped_.upper_bound(lo));  // the span holding all of [lo, hi), checked by the caller
  const Span span = it->second;
  if (hi < span.end) mapped_.emplace(hi, Span{span.end, span.range});  // the one step that may throw
  if (it->first < lo) {
    it->second.end = lo;
  } else {
    mapped_.erase(it);
  }
  mapped_bytes_ -= hi - lo;
  return span.range;
}

gpumem_vm_info_t VmAllocator::info() {
  gpumem_vm_info_t out{};
  out.map_unit = unit_;
  out.range_size = range_size_;
  std::lock_guard<SpinLock> lock(mutex_);
  out.reserved_bytes = reserved_bytes_;
  out.mapped_bytes = mapped_bytes_;
  return out;
}

// ---- Creation ---------------------------------------------------------------------------------

Allocator* make_vm(const gpumem_vm_params_t& params, bool fine_default) {
  if (params.device < 0)
    fail(GPUMEM_ERROR_INVALID_DEVICE, "params->device is %d; devices are numbered from 0", params.device);
  if (params.map_unit && !power_of_two(params.map_unit))
    fail(GPUMEM_ERROR_INVALID_ARGUMENT, "params->map_unit is %s bytes, which is not a power of two",
         grouped(params.map_unit).c_str());

  const int device = params.device;
  driver::require_device(device);
  const driver::Api& a = driver::device_api();
  std::string missing;
  const std::pair<bool, const char*> entry_points[] = {
      {a.cuMemAddressReserve != nullptr, "cuMemAddressReserve"},
      {a.cuMemAddressFree != nullptr, "cuMemAddressFree"},
      {a.cuMemCreate != nullptr, "cuMemCreate"},
      {a.cuMemRelease != nullptr, "cuMemRelease"},
      {a.cuMemMap != nullptr, "cuMemMap"},
      {a.cuMemUnmap != nullptr, "cuMemUnmap"},
      {a.cuMemSetAccess != nullptr, "cuMemSetAccess"},
      {a.cuMemGetAllocationGranularity != nullptr, "cuMemGetAllocationGranularity"},
  };
  for (const auto& [present, name] : entry_points)
    if (!present) missing += (missing.empty() ? "" : ", ") + std::string(name);
  if (!missing.empty())
    fail(GPUMEM_ERROR_NOT_SUPPORTED,
         "the CUDA driver lacks %s, which virtual memory management needs; use gpumem_allocator_create_device for a "
         "pool's upstream",
         missing.c_str());
  const CUdevice dev = driver::cu_device(device);
  int vmm = 0;
  driver::check(a.cuDeviceGetAttribute(&vmm, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, dev),
                "cuDeviceGetAttribute(virtual memory management supported)");
  if (!vmm)
    fail(GPUMEM_ERROR_NOT_SUPPORTED,
         "device %d does not support virtual memory management (cuMemCreate, cuMemMap); use "
         "gpumem_allocator_create_device for a pool's upstream",
         device);

  driver::ContextScope scope(driver::primary_context(device));
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location = driver::device_location(device);
  size_t granularity = 0;
  driver::check(a.cuMemGetAllocationGranularity(&granularity, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM),
                "cuMemGetAllocationGranularity");
  if (!power_of_two(granularity) || granularity < 512)
    fail(GPUMEM_ERROR_NOT_SUPPORTED,
         "device %d's allocation granularity is %s bytes (cuMemGetAllocationGranularity), not a power of two of at "
         "least 512",
         device, grouped(granularity).c_str());
  const size_t unit = params.map_unit ? static_cast<size_t>(params.map_unit)
                      : fine_default  ? granularity
                                      : std::max(kDefaultMapUnit, granularity);
  if (unit % granularity != 0)
    fail(GPUMEM_ERROR_INVALID_ARGUMENT,
         "params->map_unit is %s bytes, not a multiple of device %d's allocation granularity (%s bytes)",
         grouped(unit).c_str(), device, grouped(granularity).c_str());

  size_t range_size = static_cast<size_t>(params.range_size);
  if (range_size == 0) {
    size_t total = 0;
    driver::check(a.cuDeviceTotalMem(&total, dev), "cuDeviceTotalMem");
    if (total > SIZE_MAX - (unit - 1))
      fail(GPUMEM_ERROR_INVALID_ARGUMENT, "device %d's memory (%s bytes) overflows rounding to the map unit (%s bytes)",
           device, grouped(total).c_str(), grouped(unit).c_str());
    range_size = total == 0 ? unit : (total + unit - 1) / unit * unit;
  } else if (range_size % unit != 0) {
    fail(GPUMEM_ERROR_INVALID_ARGUMENT, "params->range_size is %s bytes, not a multiple of the map unit (%s bytes)",
         grouped(range_size).c_str(), grouped(unit).c_str());
  }
  return new VmAllocator(device, unit, granularity, range_size);
}

}  // namespace gpumem::alloc
