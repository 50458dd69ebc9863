// The allocator over CUDA's virtual memory management: addresses reserved with
// cuMemAddressReserve, device memory created and mapped into them a unit at a time (cuMemCreate,
// cuMemMap). By itself it maps whole allocations; as a pool's upstream it offers its ranges, into
// which the pool maps and unmaps as its segments grow and shrink in place.
#pragma once

#include <map>
#include <mutex>
#include <utility>
#include <vector>

#include "alloc/raw.hpp"
#include "driver/driver.hpp"
#include "gpumem/vm.h"

namespace gpumem::alloc {

// One device's access to mapped memory, read-write or none (vm_access.cpp).
CUmemAccessDesc access_of(int device, bool read_write);

class VmAllocator final : public RawAllocator, public Ranges {
 public:
  // unit: a power of two and a multiple of granularity, the device's; range_size: a multiple of unit.
  VmAllocator(int device, size_t unit, size_t granularity, size_t range_size);
  ~VmAllocator() override;

  StreamOrder* stream_order() override;
  Ranges* ranges() override { return this; }
  void set_peer_access(int peer_device, bool enable) override;
  // The direct allocation at p, or the pool's range that holds it; memory is exportable when the
  // device can export it as a file descriptor.
  SharedExtent shared_extent(uintptr_t p) override;
  // Exported once per mapping and kept (cuMemExportToShareableHandle costs about a millisecond),
  // a copy each time; let go when the memory is unmapped or moved.
  int shared_fd(uintptr_t unit) override;

  size_t unit() const override { return unit_; }
  size_t range_size() const override { return range_size_; }
  uintptr_t reserve(size_t size) override;
  void unreserve(uintptr_t base, size_t size) override;
  void map(uintptr_t p, size_t size) override;
  void unmap(uintptr_t p, size_t size, size_t& unmapped) override;
  // The same physical memory mapped at to (vm_move.cpp): no memory made or freed.
  void move(uintptr_t from, uintptr_t to, size_t size, size_t& moved, size_t& lost) override;

  gpumem_vm_info_t info();

 protected:
  void* raw_alloc(size_t size, gpumem_stream_t stream) override;
  void raw_free(void* p, size_t size, gpumem_stream_t stream) override;

 private:
  struct Reservation {
    size_t size;
    bool direct;  // a direct allocation's; else a range handed to a pool
  };
  // A mapped interval, from its key to end, inside the reservation that starts at range.
  struct Span {
    uintptr_t end;
    uintptr_t range;
  };
  using Interval = std::pair<uintptr_t, uintptr_t>;

  uintptr_t reserve_addresses(size_t size, bool direct);
  void free_addresses(uintptr_t base, size_t size);
  // counted: a pool's map or unmap, which the statistics count as reserved bytes (a direct
  // allocation is counted as one by RawAllocator).
  // piece: the bytes of each physical allocation, mapped and unmapped whole: the unit for a
  // pool's ranges, the whole allocation for a direct one.
  void map_memory(uintptr_t p, size_t size, uintptr_t range, bool counted, size_t piece);
  // unmapped, if not NULL, is set to the bytes from p unmapped, also when it throws.
  void unmap_memory(uintptr_t p, size_t size, bool counted, size_t piece, size_t* unmapped = nullptr);
  // Unmaps units this allocator mapped and nothing has used yet; ignores failures.
  void undo_map(uintptr_t p, size_t size, size_t piece) noexcept;
  [[noreturn]] void fail_mapping(CUresult result, const char* call, size_t size, size_t piece);
  // As the device allocator refuses cuMemAlloc and cuMemFree: mapping and unmapping (and the
  // synchronize before an unmap) during a capture, unless the thread's captures are relaxed.
  void refuse_during_capture(const char* fn, const char* work) const;
  // Sets [p, p + size)'s access to the device's and its peers', until it matches peers_ as the
  // span is recorded (add_span) under mutex_; with counted, the bytes count as reserved.
  void set_access_and_record(uintptr_t p, size_t size, uintptr_t range, bool counted);
  // Unmaps what move() mapped at to, if anything fails before the memory at from is let go.
  void undo_move(uintptr_t to, size_t size) noexcept { undo_map(to, size, unit_); }
  // Sets one device's access to [lo, hi), or to what is still mapped of it.
  void apply_access(uintptr_t lo, uintptr_t hi, const CUmemAccessDesc& desc);

  // Under mutex_.
  std::vector<CUmemAccessDesc> access_list(bool with_revoked) const;
  const std::pair<const uintptr_t, Reservation>* reservation_holding(uintptr_t p, size_t size) const;
  bool mapped_whole(uintptr_t lo, uintptr_t hi) const;
  bool mapped_any(uintptr_t lo, uintptr_t hi) const;
  std::vector<Interval> mapped_within(uintptr_t lo, uintptr_t hi) const;
  void add_span(uintptr_t lo, uintptr_t hi, uintptr_t range);
  uintptr_t remove_span(uintptr_t lo, uintptr_t hi);  // of one span's part; returns its range
  // The descriptors kept for units in [lo, hi), out of shared_fds_, for the caller to close.
  std::vector<int> take_shared_fds(uintptr_t lo, uintptr_t hi);
  static void close_all(const std::vector<int>& fds) noexcept;

  const size_t unit_;
  const size_t granularity_;  // the device's: direct allocations are rounded to it
  const size_t range_size_;
  CUmemAllocationProp prop_{};
  // Under mutex_.
  std::map<uintptr_t, Reservation> reservations_;
  std::map<uintptr_t, Span> mapped_;     // adjacent spans of one reservation are merged
  std::map<uintptr_t, int> shared_fds_;  // by unit: kept by shared_fd(), a bounded number
  uint64_t reserved_bytes_ = 0;
  uint64_t mapped_bytes_ = 0;
  std::map<int, bool> peers_;     // devices given access (true), or whose access was taken away
  uint64_t peer_generation_ = 0;  // changes with peers_, so a map in flight sees a change
  // Serializes changes of peer access with each other, so the last one is what every span ends
  // with. Held across driver calls; maps, unmaps and allocations never take it.
  std::mutex access_mutex_;
};

// Checks the parameters (those that need no driver first), resolves the defaults and makes the
// allocator; a failure makes nothing. A map_unit of 0 is 32 MiB, or with fine_default the device's
// granularity (the device pools').
Allocator* make_vm(const gpumem_vm_params_t& params, bool fine_default = false);

}  // namespace gpumem::alloc
