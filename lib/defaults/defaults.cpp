#include "defaults/defaults.hpp"

#include <algorithm>
#include <atomic>
#include <memory>
#include <vector>

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

// Leaked on purpose: memory may be freed through the defaults during process exit.
Defaults& all_defaults() {
  static Defaults* d = [] {
    const int devices = driver::device_count();  // may throw: before anything is made
    auto* made = new Defaults;
    made->devices = devices;
    made->pools = std::make_unique<std::atomic<Allocator*>[]>(static_cast<size_t>(made->devices));
    made->defaults = std::make_unique<std::atomic<Allocator*>[]>(static_cast<size_t>(made->devices));
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

struct Reclaim {
  uint64_t id;
  gpumem_reclaim_fn fn;
  void* user_data;
};
struct ReclaimRegistry {
  std::mutex mutex;
  std::vector<Reclaim> callbacks;
  uint64_t next_id = 1;
};
ReclaimRegistry& reclaim_registry() {
  static ReclaimRegistry* r = new ReclaimRegistry;  // leaked: pools may run it during exit
  return *r;
}

void run_reclaim(int device, size_t size) {
  std::vector<Reclaim> callbacks;
  {
    ReclaimRegistry& r = reclaim_registry();
    std::lock_guard<std::mutex> lock(r.mutex);
    callbacks = r.callbacks;
  }
  for (const Reclaim& c : callbacks) c.fn(device, size, c.user_data);
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

Allocator* current_default() {
  if (threads_overriding.load(std::memory_order_relaxed) != 0)
    if (Allocator* a = thread_override_fast) return a;
  // get_default() and device_pool() in one: every gpumem_alloc(NULL, ...) and free runs this.
  // With one device, every context is device 0's: no driver call (one costs 15-70 ns on the H200).
  Defaults& d = all_defaults();
  const int device = d.devices == 1 ? 0 : driver::current_device();
  if (device >= d.devices) driver::require_device(device);
  if (Allocator* a = d.defaults[static_cast<size_t>(device)].load(std::memory_order_acquire)) return a;
  if (Allocator* pool = d.pools[static_cast<size_t>(device)].load(std::memory_order_acquire)) return pool;
  return device_pool(device);
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
  made->make_permanent();
  slot.store(made.get(), std::memory_order_release);
  return made.release();
}

void set_default(int device, Allocator* allocator) {
  Defaults& d = defaults(device);
  if (allocator) allocator->retain();
  Allocator* old = d.defaults[static_cast<size_t>(device)].exchange(allocator, std::memory_order_acq_rel);
  if (old) old->unretain();
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
  ReclaimRegistry& r = reclaim_registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  const uint64_t id = r.next_id++;
  r.callbacks.push_back(Reclaim{id, fn, user_data});
  pool::Pool::set_reclaim_runner(run_reclaim);
  return id;
}

void reclaim_remove(uint64_t id) {
  ReclaimRegistry& r = reclaim_registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  const auto it = std::find_if(r.callbacks.begin(), r.callbacks.end(), [&](const Reclaim& c) { return c.id == id; });
  if (it == r.callbacks.end())
    fail(GPUMEM_ERROR_INVALID_ARGUMENT, "no reclaim callback has id %llu", static_cast<unsigned long long>(id));
  r.callbacks.erase(it);
  if (r.callbacks.empty()) pool::Pool::set_reclaim_runner(nullptr);
}

}  // namespace gpumem::alloc
