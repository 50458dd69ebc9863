#include "pool/tenant.hpp"

#include <mutex>
#include <vector>

#include "pool/pool.hpp"

namespace gpumem::pool {

namespace {
std::mutex registry_mutex;
std::vector<Tenant*>& registry() {
  static auto* all = new std::vector<Tenant*>;  // never destroyed: frees may come during exit
  return *all;
}
}  // namespace

void Tenant::refuse_if_held(const alloc::Allocator* upstream, const void* p) {
  std::lock_guard<std::mutex> lock(registry_mutex);
  for (Tenant* t : registry())
    if (t->upstream_ == upstream && t->holds(p))
      fail(GPUMEM_ERROR_NOT_OWNED,
           "%p was allocated through the tenant '%s' of this allocator: free it through that tenant", p,
           t->name_.c_str());
}

bool Tenant::holds(const void* p) {
  std::lock_guard<SpinLock> lock(mutex_);
  return live_.count(const_cast<void*>(p)) != 0;
}

Tenant::Tenant(alloc::Allocator* upstream, const std::string& name, uint64_t limit, uint64_t soft_limit)
    : Allocator(upstream->device(), "tenant"),
      upstream_(upstream),
      name_(name),
      limit_(limit),
      soft_limit_(soft_limit) {
  check_limits(limit, soft_limit);
  {
    std::lock_guard<std::mutex> lock(registry_mutex);
    registry().push_back(this);
  }
  upstream_->retain();
  upstream_->add_tenant();
}

Tenant::~Tenant() {
  {
    std::lock_guard<std::mutex> lock(registry_mutex);
    std::erase(registry(), this);
  }
  upstream_->remove_tenant();
  upstream_->unretain();
}

void Tenant::check_limits(uint64_t limit, uint64_t soft_limit) {
  if (limit && soft_limit > limit)
    fail(GPUMEM_ERROR_INVALID_ARGUMENT, "soft_limit (%s) is above limit (%s): a soft budget lies within the hard one",
         bytes(soft_limit).c_str(), bytes(limit).c_str());
}

void Tenant::set_limits(uint64_t limit, uint64_t soft_limit) {
  check_limits(limit, soft_limit);
  {
    std::lock_guard<SpinLock> lock(mutex_);
    limit_ = limit;
    soft_limit_ = soft_limit;
    above_soft_ = false;  // looked at again from the next allocation
  }
  after_growth();
}

Tenant::Figures Tenant::figures() {
  std::lock_guard<SpinLock> lock(mutex_);
  return {limit_, soft_limit_, stats_.in_use, stats_.peak_in_use, refused_, soft_crossings_};
}

void Tenant::refuse(size_t size, uint64_t would_hold) {
  ++refused_;
  ++stats_.ooms;
  fail(GPUMEM_ERROR_OUT_OF_MEMORY,
       "out of memory allocating %s for tenant '%s': it would hold %s, past its budget of %s (it holds %s; "
       "gpumem_tenant_set_limits raises it)",
       bytes(size).c_str(), name_.c_str(), bytes(would_hold).c_str(), bytes(limit_).c_str(),
       bytes(stats_.in_use).c_str());
}

void* Tenant::do_allocate(size_t size, gpumem_stream_t stream, size_t& mem_size) {
  // Counted at the pool's rounding before the upstream is asked, so that threads allocating at
  // once cannot pass the budget together.
  const uint64_t estimate = (uint64_t{size} + kRound - 1) / kRound * kRound;
  {
    std::lock_guard<SpinLock> lock(mutex_);
    if (limit_ && (estimate > limit_ || stats_.in_use + taking_ > limit_ - estimate))
      refuse(size, stats_.in_use + taking_ + estimate);
    taking_ += estimate;
  }
  void* p = nullptr;
  try {
    p = upstream_->allocate(size, stream);
  } catch (...) {
    std::lock_guard<SpinLock> lock(mutex_);
    taking_ -= estimate;
    throw;
  }
  size_t asked = 0, accounted = 0;
  upstream_->live_sizes(p, asked, accounted);
  if (!accounted) accounted = size;  // an upstream that keeps no sizes
  bool over = false;
  {
    std::lock_guard<SpinLock> lock(mutex_);
    taking_ -= estimate;
    over = limit_ && stats_.in_use + taking_ + accounted > limit_;
    if (!over) {
      live_.emplace(p, Live{size, accounted});
      stats_.on_alloc(accounted, size);
      stats_.on_reserve(accounted);  // what it holds of its upstream is what it has handed out
    }
  }
  if (over) {  // the upstream accounts more than the estimate: give it back and refuse
    try {
      upstream_->deallocate(p, stream);
    } catch (...) {
      std::lock_guard<SpinLock> lock(mutex_);  // kept, and counted, rather than lost
      live_.emplace(p, Live{size, accounted});
      stats_.on_alloc(accounted, size);
      stats_.on_reserve(accounted);
      mem_size = accounted;
      return p;
    }
    std::lock_guard<SpinLock> lock(mutex_);
    refuse(size, stats_.in_use + taking_ + accounted);
  }
  mem_size = accounted;
  after_growth();
  return p;
}

void Tenant::after_growth() noexcept {
  bool crossed = false;
  {
    std::lock_guard<SpinLock> lock(mutex_);
    if (soft_limit_ && stats_.in_use > soft_limit_ && !above_soft_) {
      above_soft_ = crossed = true;
      ++soft_crossings_;
    }
  }
  if (crossed)
    if (auto* pool = dynamic_cast<Pool*>(upstream_)) {
      try {
        pool->release(nullptr, true);
      } catch (...) {
        // A soft budget never refuses: what the pool could not give back stays cached.
      }
    }
}

void Tenant::do_deallocate(void* p, gpumem_stream_t stream) {
  Live l;
  {
    std::lock_guard<SpinLock> lock(mutex_);
    const auto it = live_.find(p);
    if (it == live_.end())
      fail(GPUMEM_ERROR_NOT_OWNED, "%p was not allocated by this tenant ('%s'), or is freed already", p, name_.c_str());
    l = it->second;
    live_.erase(it);
    stats_.on_free(l.mem_size, l.size);
    stats_.on_unreserve(l.mem_size);
    if (soft_limit_ && stats_.in_use <= soft_limit_) above_soft_ = false;
  }
  try {
    upstream_->deallocate(p, stream);
  } catch (...) {
    std::lock_guard<SpinLock> lock(mutex_);  // the upstream kept it: so does the tenant
    live_.emplace(p, l);
    stats_.on_alloc(l.mem_size, l.size);
    stats_.on_reserve(l.mem_size);
    --stats_.allocs;
    --stats_.frees;
    --stats_.upstream_allocs;
    --stats_.upstream_frees;
    throw;
  }
}

void Tenant::sizes_of(void* p, size_t& size, size_t& mem_size) {
  std::lock_guard<SpinLock> lock(mutex_);
  const auto it = live_.find(p);
  size = it == live_.end() ? 0 : it->second.size;
  mem_size = it == live_.end() ? 0 : it->second.mem_size;
}

alloc::SharedExtent Tenant::shared_extent(uintptr_t p) { return upstream_->shared_extent(p); }

void Tenant::live(uint64_t& count, uint64_t& bytes) {
  std::lock_guard<SpinLock> lock(mutex_);
  count = live_.size();
  bytes = stats_.in_use;
}

void Tenant::free_all_live() {
  std::vector<void*> all;
  {
    std::lock_guard<SpinLock> lock(mutex_);
    for (const auto& entry : live_) all.push_back(entry.first);
  }
  free_each(all);
}

void record_stream(alloc::Allocator* a, void* p, gpumem_stream_t stream) {
  if (auto* t = dynamic_cast<Tenant*>(a)) {
    if (!t->holds(p))
      fail(GPUMEM_ERROR_NOT_OWNED, "%p is not a live allocation of the tenant '%s'", p, t->name().c_str());
    a = t->upstream();
  }
  auto* pool = dynamic_cast<Pool*>(a);
  if (!pool)
    fail(GPUMEM_ERROR_INVALID_HANDLE, "%p is a %s allocator, not a pool or a tenant of one",
         static_cast<void*>(static_cast<gpumem_allocator_s*>(a)), a->kind());
  pool->record_stream(p, stream);
}

}  // namespace gpumem::pool
