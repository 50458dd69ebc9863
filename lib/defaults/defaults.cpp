#include "defaults/defaults.hpp"

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <thread>

#include "alloc/raw.hpp"
#include "alloc/vm.hpp"
#include "core/size_text.hpp"
#include "defaults/pool_config.hpp"
#include "driver/device.hpp"
#include "driver/driver.hpp"
#include "pool/pool.hpp"

namespace gpumem::alloc {
namespace {

struct Defaults {
  std::mutex mutex;
  std::unique_ptr<std::atomic<Allocator*>[]> pools;     // per device, created on first use
  std::unique_ptr<std::atomic<Allocator*>[]> defaults;  // per device; NULL: the device's pool
  int devices = 0;
};

std::atomic<Defaults*> made_defaults{nullptr};  // all_defaults() once it has been made

// Leaked on purpose: memory may be freed through the defaults during process exit.
Defaults& all_defaults() {
  static Defaults* d = [] {
    const int devices = driver::device_count();  // may throw: before anything is made
    auto* made = new Defaults;
    made->devices = devices;
    made->pools = std::make_unique<std::atomic<Allocator*>[]>(static_cast<size_t>(made->devices));
    made->defaults = std::make_unique<std::atomic<Allocator*>[]>(static_cast<size_t>(made->devices));
    made_defaults.store(made, std::memory_order_release);
    return made;
  }();
  return *d;
}

Defaults& defaults(int device) {
  Defaults& d = all_defaults();
  // The count is the driver's, read once: only a device out of range asks it again, for the detail.
  if (device < 0 || device >= d.devices) driver::require_device(device);
  return d;
}

// The thread's override, given back when the thread ends so the allocator can be destroyed.
struct ThreadOverride {
  Allocator* allocator = nullptr;
  ~ThreadOverride();
};
thread_local ThreadOverride thread_override;
// The same pointer, read on every call with a NULL allocator: trivially destructible, so reading it
// runs no initialization guard. (The initial-exec TLS model would save the __tls_get_addr call too,
// but would make the library need static TLS, which a dlopen may then fail to find.)
thread_local Allocator* thread_override_fast = nullptr;
// Threads whose override is set. While none is, a NULL allocator reads no thread-local at all (a
// __tls_get_addr call each); a thread always sees its own count, so relaxed order does.
std::atomic<int> threads_overriding{0};

ThreadOverride::~ThreadOverride() {
  if (allocator) {
    allocator->unretain();
    threads_overriding.fetch_sub(1, std::memory_order_relaxed);
  }
  allocator = nullptr;  // a later thread-exit free through NULL must not use it
  thread_override_fast = nullptr;
}

// Leaked: pools may run them during exit.
Callbacks<gpumem_reclaim_fn>& reclaim_callbacks() {
  static auto* r = new Callbacks<gpumem_reclaim_fn>;
  return *r;
}
std::mutex& reclaim_mutex() {  // one add or remove at a time sets the pools' runner
  static auto* m = new std::mutex;
  return *m;
}

void run_reclaim(int device, size_t size) {
  reclaim_callbacks().run(~0u, [&](gpumem_reclaim_fn fn, void* user_data) { fn(device, size, user_data); });
}

// Calls that resolved NULL to a process default the caller set, in two generations (SRCU's
// scheme): a call counts itself in the current one before it reads the default, and the destroy of
// an allocator that was a default waits, generation by generation, until no call that may have
// read it is left. Calls that find no default set (they use the device's pool, which is never
// destroyed) and calls through a thread's own override count nothing.
struct DefaultCalls {
  static constexpr size_t kShards = 64;
  struct alignas(64) Shard {
    std::atomic<uint64_t> calls{0};
  };
  std::atomic<unsigned> generation{0};
  Shard shards[2][kShards];
  std::mutex waiting;  // one destroy waits at a time
};
DefaultCalls default_calls;

// A shard per thread, by its stack: threads' stacks lie megabytes apart, so threads rarely share a
// shard (and only contend when they do); no thread-local is read.
size_t default_call_shard() {
  const uint64_t sp = reinterpret_cast<uintptr_t>(__builtin_frame_address(0)) >> 20;
  return static_cast<size_t>((sp * 0x9e3779b97f4a7c15ULL) >> 58);
}

// This thread's counted calls, by generation: a destroy made from inside one of them (a hook, a
// reclaim callback) does not wait for the call it is made from.
thread_local uint64_t own_default_calls[2] = {0, 0};

// The default set for device, counted, or NULL (the device's pool) with nothing counted.
Resolved counted_default(Defaults& d, int device) {
  std::atomic<Allocator*>& slot = d.defaults[static_cast<size_t>(device)];
  if (!slot.load(std::memory_order_acquire)) return Resolved(nullptr);
  // Counted before it is read again: a destroy that waits for this generation sees the count, or
  // this call sees the default that replaced the one being destroyed.
  const unsigned g = default_calls.generation.load(std::memory_order_seq_cst) & 1;
  std::atomic<uint64_t>& calls = default_calls.shards[g][default_call_shard()].calls;
  calls.fetch_add(1, std::memory_order_seq_cst);
  if (Allocator* a = slot.load(std::memory_order_seq_cst)) {
    ++own_default_calls[g];
    return Resolved(a, &calls, g);
  }
  calls.fetch_sub(1, std::memory_order_release);
  return Resolved(nullptr);
}

// Over virtual memory where the device supports it (unless configured otherwise), mapped in units
// of the device's granularity: with page reclaim, the finest unit strands the least.
Allocator* device_pool_upstream(int device, const PoolConfig& config) {
  if (config.backend == PoolConfig::Backend::kClassic) return make_device(device);
  gpumem_vm_params_t params = GPUMEM_VM_PARAMS_INIT;
  params.device = device;
  params.map_unit = config.map_unit;
  params.range_size = config.range_size;
  try {
    return make_vm(params, true);
  } catch (const Error& e) {
    if (config.backend == PoolConfig::Backend::kVm || e.status() != GPUMEM_ERROR_NOT_SUPPORTED) throw;
    return make_device(device);  // auto, on a device or driver without virtual memory management
  }
}

}  // namespace

Resolved::~Resolved() {
  if (!counted_) return;
  --own_default_calls[generation_];
  counted_->fetch_sub(1, std::memory_order_release);
}

Resolved current_default() {
  if (threads_overriding.load(std::memory_order_relaxed) != 0)
    if (Allocator* a = thread_override_fast) return Resolved(a);
  // get_default() and device_pool() in one: every gpumem_alloc(NULL, ...) and free runs this.
  // With one device, every context is device 0's: no driver call (one costs 15-70 ns on the H200).
  Defaults& d = all_defaults();
  const int device = d.devices == 1 ? 0 : driver::current_device();
  if (device >= d.devices) driver::require_device(device);
  if (Resolved set = counted_default(d, device); set) return set;
  if (Allocator* pool = d.pools[static_cast<size_t>(device)].load(std::memory_order_acquire)) return Resolved(pool);
  return Resolved(device_pool(device));
}

void wait_for_default_calls() {
  std::lock_guard<std::mutex> lock(default_calls.waiting);
  // Both generations drain in turn: the one calls counted themselves in before the first flip, then
  // the one a call may have counted itself in after reading the generation before that flip.
  for (int round = 0; round < 2; ++round) {
    const unsigned old = default_calls.generation.fetch_add(1, std::memory_order_seq_cst) & 1;
    for (;;) {
      uint64_t calls = 0;
      for (const auto& shard : default_calls.shards[old]) calls += shard.calls.load(std::memory_order_seq_cst);
      if (calls == own_default_calls[old]) break;  // none left but those this thread is inside
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }
}

Allocator* device_pool(int device) {
  Defaults& d = defaults(device);
  std::atomic<Allocator*>& slot = d.pools[static_cast<size_t>(device)];
  if (Allocator* pool = slot.load(std::memory_order_acquire)) return pool;
  std::lock_guard<std::mutex> lock(d.mutex);
  if (Allocator* pool = slot.load(std::memory_order_relaxed)) return pool;
  const PoolConfig config = device_pool_config(device);
  const uint64_t limit = limit_from_environment(driver::device_total_memory, device);
  std::unique_ptr<Allocator> upstream(device_pool_upstream(device, config));
  upstream->make_permanent();
  auto made = std::make_unique<pool::Pool>(upstream.get(), limit);
  upstream.release();
  made->set_page_reclaim(config.page_reclaim);
  made->set_soft_limit(limit && config.soft_limit > limit ? limit : config.soft_limit);  // never above the hard one
  made->make_permanent();
  slot.store(made.get(), std::memory_order_release);
  return made.release();
}

void release_device_pools() {
  Defaults* d = made_defaults.load(std::memory_order_acquire);  // none made: none to release
  for (int device = 0; d && device < d->devices; ++device)
    if (Allocator* pool = d->pools[static_cast<size_t>(device)].load(std::memory_order_acquire))
      static_cast<pool::Pool*>(pool)->release(nullptr, true);
}

void set_default(int device, Allocator* allocator) {
  Defaults& d = defaults(device);
  if (allocator) {
    allocator->retain();
    allocator->mark_was_default();
  }
  Allocator* old = d.defaults[static_cast<size_t>(device)].exchange(allocator, std::memory_order_seq_cst);
  if (old) old->unretain();
}

Resolved default_for(int device) {
  Defaults& d = defaults(device);
  if (Resolved set = counted_default(d, device); set) return set;
  return Resolved(device_pool(device));
}

Allocator* get_default(int device) {
  Defaults& d = defaults(device);
  if (Allocator* a = d.defaults[static_cast<size_t>(device)].load(std::memory_order_acquire)) return a;
  return device_pool(device);
}

Allocator* set_thread(Allocator* allocator) {
  if (allocator) allocator->retain();
  Allocator* old = thread_override.allocator;
  thread_override.allocator = allocator;
  thread_override_fast = allocator;
  threads_overriding.fetch_add((allocator != nullptr) - (old != nullptr), std::memory_order_relaxed);
  if (old) old->unretain();
  return old;
}

Allocator* get_thread() { return thread_override.allocator; }

uint64_t reclaim_add(gpumem_reclaim_fn fn, void* user_data) {
  std::lock_guard<std::mutex> lock(reclaim_mutex());
  uint32_t all = 0;
  const uint64_t id = reclaim_callbacks().add(~0u, fn, user_data, all);
  pool::Pool::set_reclaim_runner(run_reclaim);
  return id;
}

void reclaim_remove(uint64_t id) {
  std::shared_ptr<Callbacks<gpumem_reclaim_fn>::Entry> callback;
  {
    std::lock_guard<std::mutex> lock(reclaim_mutex());
    uint32_t all = 0;
    callback = reclaim_callbacks().take(id, all);
    if (!callback)
      fail(GPUMEM_ERROR_INVALID_HANDLE, "no reclaim callback has id %llu (removed already, or never added)",
           static_cast<unsigned long long>(id));
    if (all == 0) pool::Pool::set_reclaim_runner(nullptr);
  }
  reclaim_callbacks().wait_idle(callback);
}

}  // namespace gpumem::alloc
