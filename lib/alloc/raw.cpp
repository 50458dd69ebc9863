#include "alloc/raw.hpp"

#include "alloc/cuda_stream_order.hpp"

#include <cstdlib>
#include <cstring>
#include <exception>
#include <iterator>
#include <map>
#include <new>
#include <vector>

#include "memory/memory.hpp"

namespace gpumem::alloc {

void* RawAllocator::do_allocate(size_t size, gpumem_stream_t stream, size_t& mem_size) {
  void* p = nullptr;
  try {
    p = raw_alloc(size, stream);
  } catch (const Error& e) {
    if (e.status() == GPUMEM_ERROR_OUT_OF_MEMORY) {
      std::lock_guard<SpinLock> lock(mutex_);
      ++stats_.ooms;
    }
    throw;
  }
  bool added;
  try {
    std::lock_guard<SpinLock> lock(mutex_);
    added = live_.emplace(p, size).second;
    if (added) {
      stats_.on_alloc(size, size);
      stats_.on_reserve(size);
    }
  } catch (...) {
    raw_free(p, size, stream);  // no room to remember it: give it back rather than lose it
    throw;
  }
  // A source handing out what is live already is broken; the live allocation stays its owner's.
  if (!added) fail(GPUMEM_ERROR_INTERNAL, "the %s allocator's source returned %p, which is already live", kind(), p);
  mem_size = size;
  return p;
}

void RawAllocator::do_deallocate(void* p, gpumem_stream_t stream) {
  size_t size = 0;
  {
    std::lock_guard<SpinLock> lock(mutex_);
    const auto it = live_.find(p);
    if (it == live_.end())
      fail(GPUMEM_ERROR_NOT_OWNED, "%p was not allocated by this %s allocator, or is freed already", p, kind());
    size = it->second;
    live_.erase(it);
  }
  try {
    raw_free(p, size, stream);
  } catch (...) {
    std::lock_guard<SpinLock> lock(mutex_);
    live_.emplace(p, size);  // the source kept it: so does the allocator
    throw;
  }
  std::lock_guard<SpinLock> lock(mutex_);
  stats_.on_free(size, size);
  stats_.on_unreserve(size);
}

void RawAllocator::sizes_of(void* p, size_t& size, size_t& mem_size) {
  std::lock_guard<SpinLock> lock(mutex_);
  const auto it = live_.find(p);
  size = mem_size = it == live_.end() ? 0 : it->second;
}

void RawAllocator::live(uint64_t& count, uint64_t& bytes) {
  std::lock_guard<SpinLock> lock(mutex_);
  count = live_.size();
  bytes = stats_.in_use;
}

void RawAllocator::free_all_live() {
  std::vector<void*> all;
  {
    std::lock_guard<SpinLock> lock(mutex_);
    for (const auto& entry : live_) all.push_back(entry.first);
  }
  free_each(all);
}

namespace {

// How a raw kind's allocation or free (a gpumem_alloc or gpumem_free of it, or a pool's growth or
// return to it) checks for a stream capture: as the gpumem_device_alloc family does, unless the
// thread's captures are in relaxed mode, where the driver lets it run and pools grow during a
// capture, as PyTorch's and CuPy's do. Frees pass no stream: a pool returns a block on its arena's
// stream, which its owner may have destroyed, and the driver must not be asked about it.
memory::Caller checked(const char* fn, gpumem_stream_t stream) {
  if (driver::capture_mode_relaxed()) return {};
  return {fn, stream};
}

// The checks every kind makes before opening its memory to another device.
void require_peer(int device, int peer_device, const char* kind) {
  if (peer_device == device)
    fail(GPUMEM_ERROR_INVALID_ARGUMENT, "device %d is the %s allocator's own device; pass another device", peer_device,
         kind);
  driver::require_device(peer_device);
}

class DeviceAllocator final : public RawAllocator {
 public:
  explicit DeviceAllocator(int device) : RawAllocator(device, "device") {}
  StreamOrder* stream_order() override { return cuda_stream_order(device()); }

  SharedExtent shared_extent(uintptr_t p) override {
    const size_t size = live_size(reinterpret_cast<void*>(p));
    if (!size)
      fail(GPUMEM_ERROR_NOT_OWNED, "%p is not the start of a live allocation of the device allocator of device %d",
           reinterpret_cast<void*>(p), device());
    return {false, p, size, 0};
  }

  // cuMemAlloc memory is reached through context peer access, which covers every allocation of
  // the context: it is enabled as peer copies enable it, and never taken away, since that would
  // cut off memory this allocator does not own.
  void set_peer_access(int peer_device, bool enable) override {
    require_peer(device(), peer_device, kind());
    if (!enable)
      fail(GPUMEM_ERROR_NOT_SUPPORTED,
           "peer access to the device allocator's memory cannot be taken away: it is the access of device %d's "
           "context to all of device %d's cuMemAlloc memory, which other allocations and peer copies rely on",
           peer_device, device());
    if (!memory::ensure_peer_access(device(), peer_device))
      fail(GPUMEM_ERROR_NOT_SUPPORTED,
           "devices %d and %d cannot reach each other's memory (cuDeviceCanAccessPeer or cuCtxEnablePeerAccess "
           "refused)",
           device(), peer_device);
  }

 protected:
  void* raw_alloc(size_t size, gpumem_stream_t stream) override {
    return memory::device_alloc(device(), size, checked("gpumem_alloc", stream));
  }
  void raw_free(void* p, size_t, gpumem_stream_t) override { memory::device_free(p, checked("gpumem_free", nullptr)); }
};

class DeviceAsyncAllocator final : public RawAllocator {
 public:
  DeviceAsyncAllocator(int device, gpumem_cuda_pool_t pool)
      : RawAllocator(device, "stream-ordered device"), pool_(pool) {}
  StreamOrder* stream_order() override { return cuda_stream_order(device()); }

 protected:
  void* raw_alloc(size_t size, gpumem_stream_t stream) override {
    const memory::Caller caller = checked("gpumem_alloc", stream);
    return pool_ ? memory::device_alloc_from_pool(pool_, size, stream, caller)
                 : memory::device_alloc_async(device(), size, stream, caller);
  }
  void raw_free(void* p, size_t, gpumem_stream_t stream) override {
    memory::device_free_async(p, stream, checked("gpumem_free", stream));
  }

 private:
  gpumem_cuda_pool_t pool_;
};

class ManagedAllocator final : public RawAllocator {
 public:
  ManagedAllocator(int device, unsigned flags) : RawAllocator(device, "managed"), flags_(flags) {}
  StreamOrder* stream_order() override { return cuda_stream_order(device()); }

  // Every device reaches managed memory already: the driver migrates or maps it on demand.
  void set_peer_access(int peer_device, bool enable) override {
    require_peer(device(), peer_device, kind());
    if (!enable)
      fail(GPUMEM_ERROR_NOT_SUPPORTED,
           "managed memory is reachable from every device, device %d included; its access cannot be taken away",
           peer_device);
  }

 protected:
  void* raw_alloc(size_t size, gpumem_stream_t stream) override {
    return memory::managed_alloc(device(), size, flags_, checked("gpumem_alloc", stream));
  }
  void raw_free(void* p, size_t, gpumem_stream_t) override { memory::managed_free(p, checked("gpumem_free", nullptr)); }

 private:
  unsigned flags_;
};

class PinnedAllocator final : public RawAllocator {
 public:
  explicit PinnedAllocator(unsigned flags) : RawAllocator(-1, "pinned host"), flags_(flags) {}
  // Copies on the GPU's streams read and write it too.
  StreamOrder* stream_order() override { return cuda_stream_order(-1); }

 protected:
  void* raw_alloc(size_t size, gpumem_stream_t stream) override {
    return memory::host_alloc(size, flags_, checked("gpumem_alloc", stream));
  }
  void raw_free(void* p, size_t, gpumem_stream_t) override { memory::host_free(p, checked("gpumem_free", nullptr)); }

 private:
  unsigned flags_;
};

class HostAllocator final : public RawAllocator {
 public:
  explicit HostAllocator(size_t alignment) : RawAllocator(-1, "host"), alignment_(alignment) {}

 protected:
  void* raw_alloc(size_t size, gpumem_stream_t) override {
    // aligned_alloc wants a multiple of the alignment.
    if (size > SIZE_MAX - (alignment_ - 1))
      fail(GPUMEM_ERROR_INVALID_ARGUMENT, "%s overflows rounding to the alignment %zu", bytes(size).c_str(),
           alignment_);
    void* p = std::aligned_alloc(alignment_, (size + alignment_ - 1) / alignment_ * alignment_);
    if (!p) fail(GPUMEM_ERROR_OUT_OF_MEMORY, "out of host memory allocating %s (aligned_alloc)", bytes(size).c_str());
    return p;
  }
  void raw_free(void* p, size_t, gpumem_stream_t) override { std::free(p); }

 private:
  size_t alignment_;
};

// A caller's function may return anything; what is not a gpumem error becomes an invalid argument.
gpumem_status_t known(gpumem_status_t st) {
  return std::strcmp(status_name(st), "GPUMEM_UNKNOWN_STATUS") == 0 ? GPUMEM_ERROR_INVALID_ARGUMENT : st;
}

class FunctionsAllocator final : public RawAllocator, public Ranges {
 public:
  explicit FunctionsAllocator(const gpumem_allocator_functions_t& f) : RawAllocator(f.device, "caller's"), f_(f) {}
  ~FunctionsAllocator() override {
    if (f_.destroy) f_.destroy(f_.context);
  }
  Ranges* ranges() override { return f_.reserve ? this : nullptr; }
  size_t unit() const override { return f_.map_unit; }
  size_t range_size() const override { return f_.range_size; }
  uintptr_t reserve(size_t size) override {
    void* got = nullptr;
    const gpumem_status_t st = f_.reserve(f_.context, size, device(), &got);
    if (st != GPUMEM_SUCCESS)
      fail(known(st), "the caller's reserve function returned %s (%d) for %s", status_name(st), st,
           bytes(size).c_str());
    const auto p = reinterpret_cast<uintptr_t>(got);
    if (!p)
      fail(GPUMEM_ERROR_INTERNAL, "the caller's reserve function returned success but no range (NULL) for %s",
           bytes(size).c_str());
    const bool wraps = size > UINTPTR_MAX - p;  // ends past the last address, or at 2^64 itself
    const bool aligned = p % f_.map_unit == 0;
    // A range that overlaps one still held would give two pools, or two streams of one, the same
    // addresses; giving it back would release the one held, which a pool is using.
    bool overlaps = false, held = false;
    std::pair<uintptr_t, size_t> other;
    {
      std::lock_guard<SpinLock> lock(mutex_);
      const auto after = held_.lower_bound(p);
      if (after != held_.begin() && std::prev(after)->first + std::prev(after)->second > p) {
        overlaps = true;
        other = *std::prev(after);
      } else if (after != held_.end() && (wraps || after->first < p + size)) {
        overlaps = true;
        other = *after;
      } else if (!wraps && aligned) {
        try {
          held_.emplace(p, size);
          held = true;
        } catch (const std::bad_alloc&) {
        }
      }
    }
    if (held) return p;
    if (overlaps)
      fail(GPUMEM_ERROR_INTERNAL,
           "the caller's reserve function returned %p for %s, which overlaps the range of %s at %p that it gave "
           "before and that is still reserved; the new range was not given back (unreserving it would release the "
           "one in use)",
           got, bytes(size).c_str(), bytes(other.second).c_str(), reinterpret_cast<void*>(other.first));
    f_.unreserve(f_.context, got, size, device());
    if (wraps)
      fail(GPUMEM_ERROR_INTERNAL,
           "the caller's reserve function returned %p for %s, a range that runs past the end of the address space; "
           "it was given back (unreserve)",
           got, bytes(size).c_str());
    if (!aligned)
      fail(GPUMEM_ERROR_INTERNAL,
           "the caller's reserve function returned %p for %s, not a start aligned to map_unit %s; it was given back "
           "(unreserve)",
           got, bytes(size).c_str(), bytes(f_.map_unit).c_str());
    throw std::bad_alloc();  // no memory to remember the range: given back
  }
  void unreserve(uintptr_t base, size_t size) override {
    // Forgotten first, so that a range the caller's reserve hands out again as soon as it is back
    // is not taken for one still held.
    decltype(held_)::node_type node;
    {
      std::lock_guard<SpinLock> lock(mutex_);
      node = held_.extract(base);
    }
    try {
      call(f_.unreserve, "unreserve", base, size);
    } catch (...) {
      if (node) {
        std::lock_guard<SpinLock> lock(mutex_);
        held_.insert(std::move(node));  // still reserved: still held
      }
      throw;
    }
  }
  void map(uintptr_t p, size_t size) override {
    call(f_.map, "map", p, size);
    std::lock_guard<SpinLock> lock(mutex_);
    stats_.on_reserve(size);
  }
  void unmap(uintptr_t p, size_t size, size_t& unmapped) override {
    unmapped = 0;  // the caller's unmap does all or nothing
    call(f_.unmap, "unmap", p, size);
    unmapped = size;
    std::lock_guard<SpinLock> lock(mutex_);
    stats_.on_unreserve(size);
  }

 protected:
  void* raw_alloc(size_t size, gpumem_stream_t stream) override {
    void* p = nullptr;
    const gpumem_status_t st = f_.alloc(f_.context, size, device(), stream, &p);
    if (st != GPUMEM_SUCCESS)
      fail(known(st), "the caller's alloc function returned %s (%d) for %s", status_name(st), st, bytes(size).c_str());
    if (!p)
      fail(GPUMEM_ERROR_OUT_OF_MEMORY, "the caller's alloc function returned success but no memory for %s",
           bytes(size).c_str());
    return p;
  }
  void raw_free(void* p, size_t size, gpumem_stream_t stream) override {
    const gpumem_status_t st = f_.free(f_.context, p, size, device(), stream);
    if (st != GPUMEM_SUCCESS)
      fail(known(st), "the caller's free function returned %s (%d) for %p", status_name(st), st, p);
  }

 private:
  void call(gpumem_map_fn fn, const char* name, uintptr_t p, size_t size) {
    const gpumem_status_t st = fn(f_.context, reinterpret_cast<void*>(p), size, device());
    if (st != GPUMEM_SUCCESS)
      fail(known(st), "the caller's %s function returned %s (%d) for %s at %p", name, status_name(st), st,
           bytes(size).c_str(), reinterpret_cast<void*>(p));
  }

 private:
  gpumem_allocator_functions_t f_;
  std::map<uintptr_t, size_t> held_;  // ranges from reserve not yet given back, by start; under mutex_
};

}  // namespace

Allocator* make_device(int device) {
  driver::require_device(device);
  return new DeviceAllocator(device);
}

Allocator* make_device_async(int device, gpumem_cuda_pool_t pool) {
  driver::require_device(device);
  int pools = 0;
  driver::check(driver::api().cuDeviceGetAttribute(&pools, CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED, device),
                "cuDeviceGetAttribute(memory pools)");
  if (!pools) fail(GPUMEM_ERROR_NOT_SUPPORTED, "device %d has no memory pools (stream-ordered allocation)", device);
  return new DeviceAsyncAllocator(device, pool);
}

Allocator* make_managed(int device, unsigned flags) {
  if (flags != 0 && flags != GPUMEM_MANAGED_ATTACH_GLOBAL && flags != GPUMEM_MANAGED_ATTACH_HOST)
    fail(GPUMEM_ERROR_INVALID_ARGUMENT,
         "managed flags 0x%x: pass 0, GPUMEM_MANAGED_ATTACH_GLOBAL or GPUMEM_MANAGED_ATTACH_HOST", flags);
  driver::require_device(device);
  return new ManagedAllocator(device, flags);
}

Allocator* make_pinned(unsigned flags) {
  constexpr unsigned known = GPUMEM_HOST_ALLOC_PORTABLE | GPUMEM_HOST_ALLOC_DEVICEMAP | GPUMEM_HOST_ALLOC_WRITECOMBINED;
  if (flags & ~known) fail(GPUMEM_ERROR_INVALID_ARGUMENT, "unknown host allocation flags 0x%x", flags & ~known);
  return new PinnedAllocator(flags);
}

Allocator* make_host(size_t alignment) {
  if (alignment == 0) alignment = 512;
  if (alignment < 8 || alignment > (size_t{1} << 20) || (alignment & (alignment - 1)))
    fail(GPUMEM_ERROR_INVALID_ARGUMENT, "alignment %zu is not a power of two from 8 to 1,048,576", alignment);
  return new HostAllocator(alignment);
}

Allocator* make_functions(const gpumem_allocator_functions_t& f) {
  require(f.alloc != nullptr, "functions->alloc is NULL");
  require(f.free != nullptr, "functions->free is NULL");
  if (f.device < -1) fail(GPUMEM_ERROR_INVALID_ARGUMENT, "functions->device %d is neither a device nor -1", f.device);
  const int ranges = (f.reserve != nullptr) + (f.unreserve != nullptr) + (f.map != nullptr) + (f.unmap != nullptr);
  if (ranges != 0 && ranges != 4)
    fail(GPUMEM_ERROR_INVALID_ARGUMENT, "functions has %d of reserve, unreserve, map and unmap; give all four or none",
         ranges);
  if (ranges) {
    if (f.map_unit < 512 || (f.map_unit & (f.map_unit - 1)))
      fail(GPUMEM_ERROR_INVALID_ARGUMENT, "functions->map_unit %llu is not a power of two of at least 512",
           static_cast<unsigned long long>(f.map_unit));
    if (f.range_size == 0 || f.range_size % f.map_unit)
      fail(GPUMEM_ERROR_INVALID_ARGUMENT, "functions->range_size %llu is not a positive multiple of map_unit %llu",
           static_cast<unsigned long long>(f.range_size), static_cast<unsigned long long>(f.map_unit));
  }
  return new FunctionsAllocator(f);
}

}  // namespace gpumem::alloc
