// The exporter's side: every allocation with a handle out, the ledger slot of each handle, and
// the frees kept back while another process may still use the memory.
#include <fcntl.h>
#include <pthread.h>
#include <sys/random.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <ctime>
#include <map>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "driver/driver.hpp"
#include "ipc/ipc.hpp"
#include "ipc/ledger.hpp"
#include "ipc/wire.hpp"

namespace gpumem::ipc {
namespace {

using Key = std::pair<alloc::Allocator*, uintptr_t>;

struct Export {
  size_t size;
  alloc::SharedExtent extent;
  std::vector<uint32_t> slots;  // one per handle not yet spent
  bool held = false;            // freed by the caller, kept for importers
  gpumem_stream_t stream = nullptr;
  int busy = 0;  // descriptors being made for it: not to be freed meanwhile
};

class Exporter {
 public:
  Exporter() {
    if (getrandom(&id_, sizeof id_, 0) != sizeof id_) id_ = (uint64_t(getpid()) << 32) ^ uint64_t(time(nullptr));
  }

  gpumem_ipc_handle_t add(alloc::Allocator* a, void* ptr, size_t& fd_count);
  void fds(const gpumem_ipc_handle_t* handle, int* fds, size_t count);
  bool hold(alloc::Allocator* a, void* p, gpumem_stream_t stream);
  uint64_t sweep(bool always);
  // sweep(false) on another call's way: what fails stays held for the next collect(), which
  // reports it; the call it rides on is not failed for it.
  void sweep_quietly() noexcept {
    try {
      sweep(false);
    } catch (...) {
    }
  }
  void fill(gpumem_ipc_info_t& out);
  uint64_t id() const { return id_; }

 private:
  // Gives back the slots whose importers have all let go; under mutex_.
  void drop_spent(Export& e);
  Key key_of_slot(uint32_t slot, uint64_t serial);  // under mutex_; INVALID_ARGUMENT if gone

  std::mutex mutex_;  // never held across a driver call
  std::unique_ptr<Ledger> ledger_;
  uint64_t id_ = 0;
  uint64_t next_serial_ = 1;
  std::map<Key, Export> exports_;
  std::unordered_map<uint32_t, Key> by_slot_;
  std::atomic<size_t> held_{0};
  std::chrono::steady_clock::time_point last_sweep_{};
};

Exporter& exporter() { return per_process<Exporter>(); }

bool hold_free(alloc::Allocator* a, void* p, gpumem_stream_t stream) { return exporter().hold(a, p, stream); }

}  // namespace

void Exporter::drop_spent(Export& e) {
  std::erase_if(e.slots, [&](uint32_t slot) {
    if (!ledger_->spent(slot)) return false;
    ledger_->give_back(slot);
    by_slot_.erase(slot);
    return true;
  });
}

gpumem_ipc_handle_t Exporter::add(alloc::Allocator* a, void* ptr, size_t& fd_count) {
  const uintptr_t p = reinterpret_cast<uintptr_t>(ptr);
  const size_t size = a->live_size(ptr);
  if (!size)
    fail(GPUMEM_ERROR_NOT_OWNED, "%p is not the start of a live allocation of the %s allocator %p", ptr, a->kind(),
         static_cast<void*>(static_cast<gpumem_allocator_s*>(a)));
  const alloc::SharedExtent extent = a->shared_extent(p);
  Wire w{};
  w.magic = Wire::kMagic;
  w.version = Wire::kVersion;
  w.kind = extent.vm ? Kind::kVm : Kind::kClassic;
  device_uuid(a->device(), w.uuid);
  w.exporter = id_;
  w.pid = static_cast<uint32_t>(getpid());
  w.segment = extent.base;
  w.segment_size = extent.size;
  w.offset = p - extent.base;
  w.size = size;
  w.unit = extent.unit;
  w.device = a->device();
  w.fd_count = static_cast<uint32_t>(extent.vm ? 1 + w.units() : 1);
  if (!extent.vm) {
    const driver::Api& api = driver::api();
    driver::ContextScope scope(driver::primary_context(a->device()));
    CUipcMemHandle handle;
    require_entry(api.cuIpcGetMemHandle, "cuIpcGetMemHandle");
    driver::check(api.cuIpcGetMemHandle(&handle, static_cast<CUdeviceptr>(extent.base)),
                  "cuIpcGetMemHandle (exporting device memory)");
    static_assert(sizeof handle == sizeof w.ipc);
    std::memcpy(w.ipc, &handle, sizeof handle);
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!ledger_) {
      ledger_ = std::make_unique<Ledger>();
      alloc::free_hold.store(hold_free, std::memory_order_release);
    }
    auto [it, fresh] = exports_.try_emplace(Key{a, p}, Export{size, extent, {}});
    Export& e = it->second;
    if (!fresh) {
      if (e.held) fail(GPUMEM_ERROR_NOT_OWNED, "%p was freed already (kept for the processes that opened it)", ptr);
      drop_spent(e);  // so that a block exported again and again keeps few slots
    }
    try {
      w.serial = next_serial_++;
      w.slot = ledger_->take(w.serial);
      e.slots.push_back(w.slot);
      by_slot_[w.slot] = it->first;
    } catch (...) {
      if (fresh) exports_.erase(it);
      throw;
    }
    if (fresh) {
      a->retain();  // its destroy waits for the exports to go
      a->add_export();
    }
  }
  w.seal();
  gpumem_ipc_handle_t out;
  std::memcpy(out.bytes, &w, sizeof w);
  fd_count = w.fd_count;
  sweep_quietly();
  return out;
}

Key Exporter::key_of_slot(uint32_t slot, uint64_t serial) {
  const auto it = by_slot_.find(slot);
  if (it == by_slot_.end() || !ledger_ || ledger_->serial(slot) != serial)
    fail(GPUMEM_ERROR_INVALID_ARGUMENT,
         "the handle's memory is gone: every importer has closed it, or it was freed and returned");
  return it->second;
}

void Exporter::fds(const gpumem_ipc_handle_t* handle, int* fds, size_t count) {
  const Wire w = Wire::read(handle);
  require_out(fds, "out_fds");
  if (w.exporter != id_)
    fail(GPUMEM_ERROR_INVALID_ARGUMENT, "the handle was exported by process %u, not this one (%d)", w.pid, getpid());
  if (count != w.fd_count)
    fail(GPUMEM_ERROR_INVALID_ARGUMENT, "count is %zu; the handle has %u descriptors", count, w.fd_count);
  Key key;
  int ledger_fd;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    key = key_of_slot(w.slot, w.serial);
    ++exports_.at(key).busy;
    ledger_fd = ledger_->fd();
  }
  std::vector<int> made;
  auto done = [&] {
    std::lock_guard<std::mutex> lock(mutex_);
    --exports_.at(key).busy;
  };
  try {
    made.reserve(count);
    const int ledger_copy = fcntl(ledger_fd, F_DUPFD_CLOEXEC, 0);
    if (ledger_copy < 0) fail(GPUMEM_ERROR_IO, "duplicating the IPC ledger's descriptor: %s", strerror(errno));
    made.push_back(ledger_copy);
    if (w.kind == Kind::kVm)
      for (uint64_t i = 0; i < w.units(); ++i)
        made.push_back(key.first->shared_fd(w.segment + w.first_unit() + i * w.unit));
  } catch (...) {
    for (int fd : made) ::close(fd);
    done();
    throw;
  }
  done();
  std::copy(made.begin(), made.end(), fds);
}

bool Exporter::hold(alloc::Allocator* a, void* p, gpumem_stream_t stream) {
  if (a->exports() == 0) return false;  // one load: frees of allocators with nothing exported pay nothing more
  bool held = false;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    const auto it = exports_.find(Key{a, reinterpret_cast<uintptr_t>(p)});
    if (it != exports_.end()) {
      Export& e = it->second;
      if (e.held) fail(GPUMEM_ERROR_NOT_OWNED, "%p was freed already (kept for the processes that opened it)", p);
      drop_spent(e);
      if (e.slots.empty() && !e.busy) {
        exports_.erase(it);
        a->remove_export();
        a->unretain();
      } else {
        e.held = held = true;
        e.stream = stream;
        held_.fetch_add(1, std::memory_order_relaxed);
      }
    }
  }
  if (held_.load(std::memory_order_relaxed)) sweep_quietly();
  return held;
}

uint64_t Exporter::sweep(bool always) {
  std::vector<std::pair<Key, Export>> done;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    const auto now = std::chrono::steady_clock::now();
    // A free of memory another process holds is checked at once; the rest at most once a
    // millisecond, since each check is a system call per handle.
    if (!held_.load(std::memory_order_relaxed) || (!always && now - last_sweep_ < std::chrono::milliseconds(1)))
      return 0;
    last_sweep_ = now;
    for (auto it = exports_.begin(); it != exports_.end();) {
      Export& e = it->second;
      if (e.held) drop_spent(e);
      if (e.held && e.slots.empty() && !e.busy) {
        done.emplace_back(it->first, std::move(e));
        it->first.first->remove_export();
        it = exports_.erase(it);
        held_.fetch_sub(1, std::memory_order_relaxed);
      } else {
        ++it;
      }
    }
  }
  uint64_t freed = 0;
  std::exception_ptr first;
  for (auto& [key, e] : done) {
    try {
      key.first->deallocate(reinterpret_cast<void*>(key.second), e.stream);
      freed += e.size;
      key.first->unretain();
    } catch (...) {
      if (!first) first = std::current_exception();
      std::lock_guard<std::mutex> lock(mutex_);  // held still, for the next collect
      exports_.emplace(key, std::move(e));
      key.first->add_export();
      held_.fetch_add(1, std::memory_order_relaxed);
    }
  }
  if (first) std::rethrow_exception(first);
  return freed;
}

void Exporter::fill(gpumem_ipc_info_t& out) {
  std::lock_guard<std::mutex> lock(mutex_);
  out.exported = exports_.size();
  for (const auto& [key, e] : exports_)
    if (e.held) {
      ++out.held;
      out.held_bytes += e.size;
    }
}

gpumem_ipc_handle_t export_allocation(alloc::Allocator* a, void* p, size_t& fd_count) {
  return exporter().add(a, p, fd_count);
}
void export_fds(const gpumem_ipc_handle_t* handle, int* fds, size_t count) { exporter().fds(handle, fds, count); }
uint64_t exporter_id() { return exporter().id(); }
uint64_t collect() { return exporter().sweep(true); }
void fill_exports(gpumem_ipc_info_t& out) { exporter().fill(out); }

}  // namespace gpumem::ipc
