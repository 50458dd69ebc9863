// Peer access to a VM allocator's memory: set on the mappings themselves (cuMemSetAccess), for
// everything mapped now and, through peers_, for everything mapped later.
#include "alloc/vm.hpp"

namespace gpumem::alloc {
CUmemAccessDesc access_of(int device, bool read_write) {
  CUmemAccessDesc desc{};
  desc.location = driver::device_location(device);
  desc.flags = read_write ? CU_MEM_ACCESS_FLAGS_PROT_READWRITE : CU_MEM_ACCESS_FLAGS_PROT_NONE;
  return desc;
}

namespace {

void* pointer(uintptr_t p) { return reinterpret_cast<void*>(p); }

}  // namespace

void VmAllocator::apply_access(uintptr_t lo, uintptr_t hi, const CUmemAccessDesc& desc) {
  const driver::Api& a = driver::api();
  for (int attempt = 0;; ++attempt) {
    const CUresult r = a.cuMemSetAccess(static_cast<CUdeviceptr>(lo), hi - lo, &desc, 1);
    if (r == CUDA_SUCCESS) return;
    // An unmap on another thread may have taken part of the span away since it was copied: what
    // is still mapped of it gets the access, and the failure stands if all of it is still there.
    std::vector<Interval> pieces;
    {
      std::lock_guard<SpinLock> lock(mutex_);
      pieces = mapped_within(lo, hi);
    }
    const bool whole = pieces.size() == 1 && pieces[0] == Interval(lo, hi);
    if (whole && attempt >= 2)
      driver::throw_result(r, format("cuMemSetAccess of %s bytes at %p (device %d's memory) for device %d",
                                     grouped(hi - lo).c_str(), pointer(lo), device(), desc.location.id));
    if (whole) continue;  // unmapped and mapped again meanwhile: again
    for (const Interval& piece : pieces) apply_access(piece.first, piece.second, desc);
    return;
  }
}

void VmAllocator::set_peer_access(int peer_device, bool enable) {
  if (peer_device == device())
    fail(GPUMEM_ERROR_INVALID_ARGUMENT,
         "device %d is the vm allocator's own device, whose access is always read-write; pass another device",
         peer_device);
  driver::require_device(peer_device);
  if (!driver::can_access_peer(peer_device, device())) {
    if (!enable) return;  // it has no access to take away
    fail(GPUMEM_ERROR_NOT_SUPPORTED,
         "device %d cannot reach device %d's memory (cuDeviceCanAccessPeer: no peer path between them), so the vm "
         "allocator's memory cannot be opened to it",
         peer_device, device());
  }
  std::lock_guard<std::mutex> serial(access_mutex_);
  bool was = false;
  std::vector<Interval> spans;
  {
    std::lock_guard<SpinLock> lock(mutex_);
    const auto it = peers_.find(peer_device);
    was = it != peers_.end() && it->second;
    if (was == enable) return;  // every span has that access already
    spans.reserve(mapped_.size());
    for (const auto& [start, span] : mapped_) spans.emplace_back(start, span.end);
    peers_[peer_device] = enable;
    ++peer_generation_;
  }
  driver::ContextScope scope(driver::primary_context(device()));
  size_t applied = 0;
  try {
    for (; applied < spans.size(); ++applied)
      apply_access(spans[applied].first, spans[applied].second, access_of(peer_device, enable));
  } catch (...) {
    // Back as it was, as far as the driver lets: the call fails having changed nothing.
    {
      std::lock_guard<SpinLock> lock(mutex_);
      peers_[peer_device] = was;
      ++peer_generation_;
    }
    for (size_t i = 0; i < applied; ++i) {
      try {
        apply_access(spans[i].first, spans[i].second, access_of(peer_device, was));
      } catch (...) {
      }
    }
    throw;
  }
}

}  // namespace gpumem::alloc
