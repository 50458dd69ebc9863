// A tenant (gpumem/tenant.h): a view of a shared allocator that is an allocator of its own, with
// budgets and its own statistics, hooks and traces. It knows nothing about CUDA.
#pragma once

#include <tsl/robin_map.h>

#include <string>

#include "alloc/allocator.hpp"

namespace gpumem::pool {

class Tenant final : public alloc::Allocator {
 public:
  // upstream is retained for the tenant's life. Budgets: 0 is none; soft_limit <= a nonzero limit.
  Tenant(alloc::Allocator* upstream, const std::string& name, uint64_t limit, uint64_t soft_limit);
  ~Tenant() override;

  const std::string& name() const { return name_; }
  alloc::Allocator* upstream() const { return upstream_; }
  void set_limits(uint64_t limit, uint64_t soft_limit);
  struct Figures {
    uint64_t limit, soft_limit, in_use, peak, refused, soft_crossings;
  };
  Figures figures();

  void live(uint64_t& count, uint64_t& bytes) override;
  void free_all_live() override;
  // The upstream's memory, as the upstream orders, shares and opens it.
  alloc::StreamOrder* stream_order() override { return upstream_->stream_order(); }
  void set_peer_access(int peer_device, bool enable) override { upstream_->set_peer_access(peer_device, enable); }
  alloc::SharedExtent shared_extent(uintptr_t p) override;
  int shared_fd(uintptr_t unit) override { return upstream_->shared_fd(unit); }

  // A free by a caller of upstream's memory: refused with NOT_OWNED, naming the tenant, if a tenant
  // of upstream holds p (the tenant would count it live, and free it again later).
  static void refuse_if_held(const alloc::Allocator* upstream, const void* p);
  bool holds(const void* p);

  // Throws the error a budget's check gives, for callers that check before they allocate.
  static void check_limits(uint64_t limit, uint64_t soft_limit);

 protected:
  void* do_allocate(size_t size, gpumem_stream_t stream, size_t& mem_size) override;
  void do_deallocate(void* p, gpumem_stream_t stream) override;
  void sizes_of(void* p, size_t& size, size_t& mem_size) override;

 private:
  struct Live {
    size_t size, mem_size;
  };
  [[noreturn]] void refuse(size_t size, uint64_t would_hold);
  // After in_use changed: past the soft budget for the first time since below it, the upstream
  // pool gives back its cache. Call without mutex_.
  void after_growth() noexcept;

  alloc::Allocator* const upstream_;
  const std::string name_;
  // Under mutex_ (the base's).
  uint64_t limit_, soft_limit_;
  uint64_t taking_ = 0;  // bytes being allocated now, counted against the hard budget
  uint64_t refused_ = 0, soft_crossings_ = 0;
  bool above_soft_ = false;
  tsl::robin_map<void*, Live, alloc::AddressHash> live_;
};

// gpumem_pool_record_stream() on a pool, or on a tenant of one (its memory is the pool's): throws
// INVALID_HANDLE for other kinds, NOT_OWNED for memory that is not a live allocation of a.
void record_stream(alloc::Allocator* a, void* p, gpumem_stream_t stream);

}  // namespace gpumem::pool
