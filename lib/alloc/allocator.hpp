// The allocator base: what every allocator has, whatever its kind — a handle check, statistics,
// hooks, and the count of things that rely on it. Knows nothing about CUDA.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <new>
#include <string>
#include <vector>

#include "alloc/stream_order.hpp"
#include "core/callbacks.hpp"
#include "core/error.hpp"
#include "core/handle.hpp"
#include "core/keep.hpp"
#include "core/spin_lock.hpp"
#include "gpumem/allocator.h"
#include "trace/trace.hpp"

// An allocator handle (core/handle.hpp): refused once destroyed, for good.
struct gpumem_allocator_s : gpumem::Handle<0x676d616c6c6f6321> {};  // "gmalloc!"

namespace gpumem::alloc {

// Hash for addresses as map keys: they are aligned (to 512 bytes or more), so the identity hash
// that std::hash gives would fill one bucket in 512 of a power-of-two table.
struct AddressHash {
  size_t operator()(uintptr_t p) const noexcept {
    uint64_t x = p;
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    return static_cast<size_t>(x);
  }
  size_t operator()(const void* p) const noexcept { return (*this)(reinterpret_cast<uintptr_t>(p)); }
};

// Counters behind gpumem_allocator_stats_t, kept under the allocator's own lock.
struct Stats {
  uint64_t in_use = 0, peak_in_use = 0, requested = 0, reserved = 0, peak_reserved = 0;
  uint64_t allocs = 0, frees = 0, upstream_allocs = 0, upstream_frees = 0, retries = 0, ooms = 0;

  void on_alloc(uint64_t mem_size, uint64_t asked) {
    in_use += mem_size;
    requested += asked;
    ++allocs;
    if (in_use > peak_in_use) peak_in_use = in_use;
  }
  void on_free(uint64_t mem_size, uint64_t asked) {
    in_use -= mem_size;
    requested -= asked;
    ++frees;
  }
  void on_reserve(uint64_t bytes) {
    reserved += bytes;
    ++upstream_allocs;
    if (reserved > peak_reserved) peak_reserved = reserved;
  }
  void on_unreserve(uint64_t bytes) {
    reserved -= bytes;
    ++upstream_frees;
  }
};

// Address ranges into which memory is mapped on demand (CUDA's virtual memory management, or the
// caller's functions): what lets a pool's segments grow in place. A range is reserved and
// unreserved whole; map and unmap take offsets and sizes in whole units, inside one range.
class Ranges {
 public:
  virtual size_t unit() const = 0;        // bytes mapped at a time; a power of two, at least 512
  virtual size_t range_size() const = 0;  // bytes of addresses a pool reserves at a time
  // A new range with nothing mapped, aligned to the unit. Throws OUT_OF_MEMORY when no addresses
  // are left.
  virtual uintptr_t reserve(size_t size) = 0;
  virtual void unreserve(uintptr_t base, size_t size) = 0;
  // Backs [p, p + size) with memory the allocator's device (and its peers) can reach. Throws
  // OUT_OF_MEMORY when the device has no more, having mapped nothing.
  virtual void map(uintptr_t p, size_t size) = 0;
  // Sets unmapped to the bytes from p that are unmapped: size, or on a failure, which it throws,
  // what went before the failure (a whole number of units).
  virtual void unmap(uintptr_t p, size_t size, size_t& unmapped) = 0;
  // Moves the memory mapped at [from, from + size) to [to, to + size), where nothing is mapped,
  // both whole units in ranges of this allocator: what is mapped stays as much. The caller
  // guarantees that no work uses from any more (unmapping does not wait for the device). Sets
  // moved to the bytes from the start that left from, whole units, also when it throws; of them,
  // the last lost bytes (a unit at most, only when it throws) are mapped nowhere any more. By
  // default each unit is unmapped at from and mapped at to (mapped at from again if that fails);
  // over CUDA the same physical memory is mapped again, which keeps the bytes and loses nothing.
  virtual void move(uintptr_t from, uintptr_t to, size_t size, size_t& moved, size_t& lost);

 protected:
  ~Ranges() = default;
};

// Where memory lies for another process to open it (ipc/): the device allocation or VM range
// that holds it, as the driver knows it.
struct SharedExtent {
  bool vm;         // mapped through virtual memory management; else a cuMemAlloc allocation
  uintptr_t base;  // the allocation, or the VM range
  size_t size;
  size_t unit;  // VM: bytes of each physical allocation, from base
};

class Allocator;
// A free that the IPC layer keeps back while other processes use the memory: set once the first
// allocation is exported, it returns true if it took the free (ipc/exports.cpp).
using FreeHold = bool (*)(Allocator* a, void* p, gpumem_stream_t stream);
extern std::atomic<FreeHold> free_hold;

class Allocator : public gpumem_allocator_s {
 public:
  Allocator(int device, const char* kind) : device_(device), kind_(kind) {}
  virtual ~Allocator();

  Allocator(const Allocator&) = delete;
  Allocator& operator=(const Allocator&) = delete;

  int device() const { return device_; }
  const char* kind() const { return kind_; }

  // gpumem_alloc and gpumem_free: the hooks around the kind's own work.
  void* allocate(size_t size, gpumem_stream_t stream);
  void deallocate(void* p, gpumem_stream_t stream);

  // The size of the live allocation that starts at p, as asked; 0 if there is none.
  size_t live_size(void* p) {
    size_t size = 0, mem_size = 0;
    sizes_of(p, size, mem_size);
    return size;
  }
  // Both sizes of the live allocation at p: as asked, and as accounted; 0 if there is none.
  void live_sizes(void* p, size_t& size, size_t& mem_size) { sizes_of(p, size, mem_size); }
  // Where the memory at p lies, for another process to open it; kinds whose memory cannot be
  // shared so refuse with GPUMEM_ERROR_NOT_SUPPORTED.
  virtual SharedExtent shared_extent(uintptr_t p);
  // VM: a new descriptor (the caller's to close) for the physical allocation mapped at unit, the
  // start of a unit of its shared_extent(), for another process to import.
  virtual int shared_fd(uintptr_t unit);

  virtual Stats stats();
  virtual void reset_peaks();
  uint64_t add_hook(uint32_t events, gpumem_hook_fn fn, void* user_data);
  // Returns once no other thread runs the hook (core/callbacks.hpp); throws INVALID_HANDLE for an
  // id not on this allocator.
  void remove_hook(uint64_t id);
  // Starts recording this allocator's events, with what options asks beside them, to a new file
  // at path; BUSY if it is recorded already. The recorder stays the caller's handle until
  // stop_trace().
  trace::Recorder* start_trace(const std::string& path, const trace::Options& options = {});
  // Stops the recording (if still this allocator's), then flushes and closes its file.
  void stop_trace(trace::Recorder* recorder);

  // Pools built on this allocator, and places it is installed as a default: destroy waits for 0.
  void retain() { users_.fetch_add(1, std::memory_order_relaxed); }
  void unretain() { users_.fetch_sub(1, std::memory_order_relaxed); }
  int users() const { return users_.load(std::memory_order_relaxed); }
  // Pools built on this allocator (counted in users() too): a caller's free looks for a pool that
  // holds the memory only while there is one.
  void add_pool() { pools_.fetch_add(1, std::memory_order_relaxed); }
  void remove_pool() { pools_.fetch_sub(1, std::memory_order_relaxed); }
  int pools() const { return pools_.load(std::memory_order_relaxed); }
  // Tenants of this allocator (counted in users() too): a caller's free looks for a tenant that
  // holds the memory only while there is one.
  void add_tenant() { tenants_.fetch_add(1, std::memory_order_relaxed); }
  void remove_tenant() { tenants_.fetch_sub(1, std::memory_order_relaxed); }
  int tenants() const { return tenants_.load(std::memory_order_relaxed); }
  // Allocations of this allocator exported to other processes (ipc/): a free looks for its
  // pointer among the exports only while there is one.
  void add_export() { exports_.fetch_add(1, std::memory_order_relaxed); }
  void remove_export() { exports_.fetch_sub(1, std::memory_order_relaxed); }
  int exports() const { return exports_.load(std::memory_order_relaxed); }
  bool permanent() const { return permanent_; }
  // Set once it is made a process default: its destroy waits for calls that resolved NULL to it.
  bool was_default() const { return was_default_.load(std::memory_order_relaxed); }
  void mark_was_default() { was_default_.store(true, std::memory_order_relaxed); }
  void make_permanent() {
    permanent_ = true;
    disown();  // the library's own: it keeps nothing busy (gpumem_shutdown)
  }

  // How the GPU's streams' work on this allocator's memory is ordered; NULL for memory no stream's
  // work touches (plain host memory). A pool built on it fences its frees with it.
  virtual StreamOrder* stream_order() { return nullptr; }
  // The allocator's address ranges, for a pool to grow its segments in place; NULL for kinds
  // that only hand out whole allocations.
  virtual Ranges* ranges() { return nullptr; }

  // Lets peer_device's kernels and copies reach this allocator's memory, or stops it. Kinds whose
  // memory cannot be shared that way refuse with GPUMEM_ERROR_NOT_SUPPORTED.
  virtual void set_peer_access(int peer_device, bool enable);

  // Live allocations, for destroy's refusal: count and bytes.
  virtual void live(uint64_t& count, uint64_t& bytes) = 0;
  // Frees every live allocation (destroy_force).
  virtual void free_all_live() = 0;

  // The allocator behind a handle from C; throws GPUMEM_ERROR_INVALID_HANDLE. Reads through the
  // handle only once it is known to point into the handle space. Every gpumem_alloc() and
  // gpumem_free() runs it: a few instructions, no lock.
  static Allocator* from(gpumem_allocator_t* handle) {
    if (__builtin_expect(!gpumem_allocator_s::live(handle), 0)) refuse(handle);
    return static_cast<Allocator*>(handle);
  }
  [[noreturn]] static void refuse(gpumem_allocator_t* handle);

 protected:
  // The kind's allocation: returns the memory and sets mem_size to the bytes it accounts.
  virtual void* do_allocate(size_t size, gpumem_stream_t stream, size_t& mem_size) = 0;
  virtual void do_deallocate(void* p, gpumem_stream_t stream) = 0;
  // The sizes of a live allocation, for the free hooks: as asked, and as accounted; 0 if not one
  // of this allocator's.
  virtual void sizes_of(void* p, size_t& size, size_t& mem_size) = 0;
  // free_all_live()'s work: each through the ordinary free, so statistics and ownership stay right
  // if one fails; throws the first failure once all were tried.
  void free_each(const std::vector<void*>& all);

  // A bit of hook_events_ beside the hooks' own: a trace is being recorded. One load on the fast
  // path tells whether anything observes a call.
  static constexpr uint32_t kTraced = 0x80000000u;
  bool hooked(uint32_t event) const { return hook_events_.load(std::memory_order_acquire) & event; }
  // Adds a record to the trace being recorded, if any.
  void record(trace::Event event, uint64_t size, uint64_t mem_size, const void* p, gpumem_stream_t stream,
              gpumem_status_t status = GPUMEM_SUCCESS) noexcept {
    if (trace::Recorder* r = recorder_.load(std::memory_order_acquire))
      r->record(event, size, mem_size, p, stream, status);
  }
  void run_hooks(uint32_t event, size_t size, size_t mem_size, void* p, gpumem_stream_t stream,
                 gpumem_status_t status) noexcept;

  SpinLock mutex_;  // guards stats_ and the kind's own state; never held across a call out of gpumem
  Stats stats_;

 private:
  const int device_;
  const char* const kind_;
  std::atomic<int> users_{0};
  std::atomic<int> pools_{0};
  std::atomic<int> tenants_{0};
  std::atomic<int> exports_{0};
  bool permanent_ = false;
  std::atomic<bool> was_default_{false};
  std::mutex hooks_mutex_;  // one trace start or stop at a time
  Callbacks<gpumem_hook_fn> hooks_;
  std::atomic<uint32_t> hook_events_{0};  // union of the hooks' masks, and kTraced: one load on the fast path
  std::atomic<trace::Recorder*> recorder_{nullptr};
};

}  // namespace gpumem::alloc
