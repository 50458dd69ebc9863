#include "alloc/allocator.hpp"

#include <algorithm>

namespace gpumem::alloc {

void Allocator::refuse(gpumem_allocator_t* handle) {
  const void* p = handle;
  if (!p) fail(GPUMEM_ERROR_INVALID_HANDLE, "NULL is not a live gpumem allocator (this call takes no default)");
  fail(GPUMEM_ERROR_INVALID_HANDLE, "%p is not a live gpumem allocator: %s", p, gpumem_allocator_s::why(p));
}

std::atomic<FreeHold> free_hold{nullptr};

void Allocator::free_each(const std::vector<void*>& all) {
  std::exception_ptr first;
  for (void* p : all) {
    try {
      do_deallocate(p, nullptr);
    } catch (...) {
      if (!first) first = std::current_exception();
    }
  }
  if (first) std::rethrow_exception(first);
}

SharedExtent Allocator::shared_extent(uintptr_t) {
  fail(GPUMEM_ERROR_NOT_SUPPORTED,
       "memory of the %s allocator cannot be shared with another process: only device memory (of the device and "
       "VM allocators, and pools over them) can",
       kind_);
}

int Allocator::shared_fd(uintptr_t) {
  fail(GPUMEM_ERROR_NOT_SUPPORTED, "the %s allocator's memory has no file descriptors to share", kind_);
}

void Allocator::set_peer_access(int peer_device, bool) {
  fail(GPUMEM_ERROR_NOT_SUPPORTED, "the %s allocator's memory cannot be opened to device %d", kind_, peer_device);
}

void Ranges::move(uintptr_t from, uintptr_t to, size_t size, size_t& moved, size_t& lost) {
  const size_t u = unit();
  lost = 0;
  for (moved = 0; moved < size; moved += u) {
    // Unmapped first, so that no more is mapped than before even for a moment.
    size_t unmapped = 0;
    unmap(from + moved, u, unmapped);
    try {
      map(to + moved, u);
    } catch (...) {
      try {
        map(from + moved, u);  // back where it was
      } catch (...) {
        moved += u;
        lost = u;
      }
      throw;
    }
  }
}

Allocator::~Allocator() {
  // Whatever it recorded stays readable: the file is completed. A failure to write it was the
  // caller's to hear from gpumem_trace_stop(), which can no longer reach this allocator.
  if (trace::Recorder* r = recorder_.exchange(nullptr)) {
    r->owner.store(nullptr);  // gpumem_trace_stop() must not reach this allocator any more
    try {
      r->close();
    } catch (...) {
    }
  }
}

void* Allocator::allocate(size_t size, gpumem_stream_t stream) {
  if (!hooked(GPUMEM_HOOK_MALLOC_PRE | GPUMEM_HOOK_MALLOC_POST | kTraced)) {
    size_t mem_size = 0;
    return do_allocate(size, stream, mem_size);
  }
  if (hooked(GPUMEM_HOOK_MALLOC_PRE)) run_hooks(GPUMEM_HOOK_MALLOC_PRE, size, 0, nullptr, stream, GPUMEM_SUCCESS);
  size_t mem_size = 0;
  void* p = nullptr;
  try {
    p = do_allocate(size, stream, mem_size);
  } catch (const Error& e) {
    record(trace::Event::kAllocFailed, size, 0, nullptr, stream, e.status());
    if (hooked(GPUMEM_HOOK_MALLOC_POST)) run_hooks(GPUMEM_HOOK_MALLOC_POST, size, 0, nullptr, stream, e.status());
    throw;
  }
  record(trace::Event::kAlloc, size, mem_size, p, stream);
  if (hooked(GPUMEM_HOOK_MALLOC_POST)) run_hooks(GPUMEM_HOOK_MALLOC_POST, size, mem_size, p, stream, GPUMEM_SUCCESS);
  return p;
}

void Allocator::deallocate(void* p, gpumem_stream_t stream) {
  if (!hooked(GPUMEM_HOOK_FREE_PRE | GPUMEM_HOOK_FREE_POST | kTraced)) return do_deallocate(p, stream);
  const bool hooks = hooked(GPUMEM_HOOK_FREE_PRE | GPUMEM_HOOK_FREE_POST);
  size_t size = 0, mem_size = 0;
  if (hooks) sizes_of(p, size, mem_size);
  if (hooked(GPUMEM_HOOK_FREE_PRE)) run_hooks(GPUMEM_HOOK_FREE_PRE, size, mem_size, p, stream, GPUMEM_SUCCESS);
  try {
    do_deallocate(p, stream);
  } catch (const Error& e) {
    if (hooked(GPUMEM_HOOK_FREE_POST)) run_hooks(GPUMEM_HOOK_FREE_POST, size, mem_size, p, stream, e.status());
    throw;
  }
  record(trace::Event::kFree, 0, 0, p, stream);  // only frees that happened: a replay repeats them
  if (hooked(GPUMEM_HOOK_FREE_POST)) run_hooks(GPUMEM_HOOK_FREE_POST, size, mem_size, p, stream, GPUMEM_SUCCESS);
}

trace::Recorder* Allocator::start_trace(const std::string& path, const trace::Options& options) {
  std::lock_guard<std::mutex> lock(hooks_mutex_);  // one start or stop at a time, with the hooks
  if (trace::Recorder* r = recorder_.load())
    fail(GPUMEM_ERROR_BUSY, "the %s allocator is being traced already, to %s; stop that trace first", kind_,
         r->path().c_str());
  auto* r = new trace::Recorder(path, device_, kind_, options);
  r->owner = this;
  recorder_.store(r, std::memory_order_release);
  hook_events_.fetch_or(kTraced, std::memory_order_release);
  return r;
}

void Allocator::stop_trace(trace::Recorder* r) {
  {
    std::lock_guard<std::mutex> lock(hooks_mutex_);
    if (recorder_.load() == r) {
      recorder_.store(nullptr, std::memory_order_release);
      hook_events_.fetch_and(~kTraced, std::memory_order_release);
    }
  }
  r->close();  // a thread still recording into it finds it closed: the record is dropped
}

Stats Allocator::stats() {
  std::lock_guard<SpinLock> lock(mutex_);
  return stats_;
}

void Allocator::reset_peaks() {
  std::lock_guard<SpinLock> lock(mutex_);
  stats_.peak_in_use = stats_.in_use;
  stats_.peak_reserved = stats_.reserved;
}

uint64_t Allocator::add_hook(uint32_t events, gpumem_hook_fn fn, void* user_data) {
  std::lock_guard<std::mutex> lock(hooks_mutex_);  // hook_events_ is written by one at a time
  uint32_t all = 0;
  const uint64_t id = hooks_.add(events, fn, user_data, all);
  hook_events_.store(all | (recorder_.load() ? kTraced : 0), std::memory_order_release);
  return id;
}

void Allocator::remove_hook(uint64_t id) {
  uint32_t all = 0;
  std::shared_ptr<Callbacks<gpumem_hook_fn>::Entry> hook;
  {
    std::lock_guard<std::mutex> lock(hooks_mutex_);
    // The wait for calls in progress holds none of this allocator's locks, so those calls may
    // still add or remove hooks.
    hook = hooks_.take(id, all);
    if (!hook)
      fail(GPUMEM_ERROR_INVALID_HANDLE, "no hook with id %llu is on this allocator (removed already, or never added)",
           static_cast<unsigned long long>(id));
    hook_events_.store(all | (recorder_.load() ? kTraced : 0), std::memory_order_release);
  }
  hooks_.wait_idle(hook);
}

void Allocator::run_hooks(uint32_t event, size_t size, size_t mem_size, void* p, gpumem_stream_t stream,
                          gpumem_status_t status) noexcept {
  gpumem_hook_info_t info{};
  info.struct_size = sizeof info;
  info.event = event;
  info.device = device_;
  info.allocator = this;
  info.size = size;
  info.mem_size = mem_size;
  info.ptr = p;
  info.stream = stream;
  info.status = status;
  hooks_.run(event, [&](gpumem_hook_fn fn, void* user_data) { fn(&info, user_data); });
}

}  // namespace gpumem::alloc
