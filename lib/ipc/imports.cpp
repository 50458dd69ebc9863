// The importer's side: other processes' segments opened here once each (over VM, a range of the
// exporter's addresses mirrored by a reservation here, into which each unit is mapped once), the
// ledger slots held, and the opens, counted, by the address they returned.
//
// One lock guards it all and is held across the driver calls of an open or a close: a segment is
// opened once however many threads open its allocations at once, and none of this is on a fast path.
#include <fcntl.h>
#include <pthread.h>
#include <unistd.h>

#include <map>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "alloc/vm.hpp"
#include "driver/driver.hpp"
#include "ipc/ipc.hpp"
#include "ipc/ledger.hpp"
#include "ipc/wire.hpp"

namespace gpumem::ipc {
namespace {

struct Segment {
  int device;
  bool vm;
  uintptr_t base;  // here
  size_t size, unit;
  bool own;                             // this process's own memory, opened where it is
  uint64_t opens = 0;                   // classic and own: opens inside it
  std::map<uint64_t, uint64_t> mapped;  // VM: unit offset -> opens that touch it
};

struct Open {
  uint64_t exporter;
  uint32_t slot;
  uint64_t segment;  // the exporter's address
  uint64_t first_unit;
  uint64_t units;
};

struct Ledger {
  std::unique_ptr<LedgerView> view;
  uint64_t opens = 0;
};
// Exporters whose ledger stays open here with nothing open from them, for their next handle
// (opening one costs an open and a map of its file).
constexpr size_t kKeptLedgers = 16;

class Importer {
 public:
  void* open(const gpumem_ipc_handle_t* handle, const int* fds, size_t fd_count, size_t& size);
  void close(void* p);
  void fill(gpumem_ipc_info_t& out);

 private:
  using SegmentKey = std::pair<uint64_t, uint64_t>;  // exporter, its address
  using SlotKey = std::pair<uint64_t, uint32_t>;     // exporter, slot
  // Maps what the open needs of its segment, made if new; undoes its own work if it throws.
  Segment& map_segment(const Wire& w, int device, const int* fds);
  // Unmaps what only this open needs; the device was synchronized.
  void unmap_segment(const Open& o);

  std::mutex mutex_;
  std::map<uint64_t, Ledger> ledgers_;
  std::map<SegmentKey, Segment> segments_;
  struct Held {
    uint64_t opens = 0;   // opens holding the slot's lock
    uint64_t serial = 0;  // the export it stood for when locked
  };
  std::map<SlotKey, Held> slots_;
  std::unordered_map<uintptr_t, std::vector<Open>> opens_;
  uint64_t imports_ = 0, segment_opens_ = 0;
};

Importer& importer() { return per_process<Importer>(); }

[[noreturn]] void driver_failed(CUresult r, const char* call, const Wire& w) {
  driver::throw_result(r, format("%s (opening %s of process %u's memory)", call, bytes(w.size).c_str(), w.pid));
}

}  // namespace

Segment& Importer::map_segment(const Wire& w, int device, const int* fds) {
  const driver::Api& api = driver::api();
  const SegmentKey key{w.exporter, w.segment};
  auto it = segments_.find(key);
  const bool fresh = it == segments_.end();
  if (!fresh && (it->second.size != w.segment_size || it->second.vm != (w.kind == Kind::kVm && !it->second.own) ||
                 (it->second.vm && it->second.unit != w.unit)))
    fail(GPUMEM_ERROR_INVALID_ARGUMENT,
         "the handle describes process %u's segment at %#llx otherwise than the one open here from it (%s, in units of "
         "%s): it is not a handle that process made",
         w.pid, static_cast<unsigned long long>(w.segment), bytes(it->second.size).c_str(),
         bytes(it->second.unit).c_str());
  if (w.exporter == exporter_id()) {  // the driver refuses to open a process's own memory: it is here
    if (fresh)
      it = segments_.emplace(key, Segment{device, false, uintptr_t(w.segment), w.segment_size, 0, true, 0, {}}).first;
    ++it->second.opens;
    return it->second;
  }
  require_entry(api.cuIpcOpenMemHandle, "cuIpcOpenMemHandle");
  require_entry(api.cuMemImportFromShareableHandle, "cuMemImportFromShareableHandle");
  if (w.kind == Kind::kClassic) {
    if (fresh) {
      CUipcMemHandle handle;
      std::memcpy(&handle, w.ipc, sizeof handle);
      CUdeviceptr base = 0;
      const CUresult r = api.cuIpcOpenMemHandle(&base, handle, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS);
      if (r != CUDA_SUCCESS) driver_failed(r, "cuIpcOpenMemHandle", w);
      it = segments_.emplace(key, Segment{device, false, uintptr_t(base), w.segment_size, 0, false, 0, {}}).first;
      ++segment_opens_;
    }
    ++it->second.opens;
    return it->second;
  }
  if (fresh) {
    CUdeviceptr base = 0;
    const CUresult r = api.cuMemAddressReserve(&base, w.segment_size, w.unit, 0, 0);
    if (r != CUDA_SUCCESS) driver_failed(r, "cuMemAddressReserve", w);
    it = segments_.emplace(key, Segment{device, true, uintptr_t(base), w.segment_size, w.unit, false, 0, {}}).first;
  }
  Segment& s = it->second;
  std::vector<uint64_t> made;  // units this open mapped
  try {
    const CUmemAccessDesc access = alloc::access_of(device, true);
    for (uint64_t i = 0; i < w.units(); ++i) {
      const uint64_t offset = w.first_unit() + i * w.unit;
      if (s.mapped.count(offset)) continue;
      CUmemGenericAllocationHandle h = 0;
      CUresult r = api.cuMemImportFromShareableHandle(&h, reinterpret_cast<void*>(intptr_t{fds[1 + i]}),
                                                      CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
      if (r != CUDA_SUCCESS) driver_failed(r, "cuMemImportFromShareableHandle", w);
      r = api.cuMemMap(static_cast<CUdeviceptr>(s.base + offset), w.unit, 0, h, 0);
      api.cuMemRelease(h);  // the mapping holds the memory
      if (r != CUDA_SUCCESS) driver_failed(r, "cuMemMap", w);
      made.push_back(offset);
      s.mapped[offset] = 0;
      r = api.cuMemSetAccess(static_cast<CUdeviceptr>(s.base + offset), w.unit, &access, 1);
      if (r != CUDA_SUCCESS) driver_failed(r, "cuMemSetAccess", w);
      ++segment_opens_;
    }
  } catch (...) {
    for (uint64_t offset : made) {
      api.cuMemUnmap(static_cast<CUdeviceptr>(s.base + offset), w.unit);
      s.mapped.erase(offset);
    }
    if (s.mapped.empty()) {
      api.cuMemAddressFree(static_cast<CUdeviceptr>(s.base), s.size);
      segments_.erase(it);
    }
    throw;
  }
  for (uint64_t i = 0; i < w.units(); ++i) ++s.mapped[w.first_unit() + i * w.unit];
  return s;
}

void* Importer::open(const gpumem_ipc_handle_t* handle, const int* fds, size_t fd_count, size_t& size) {
  const Wire w = Wire::read(handle);
  require(fds != nullptr, "fds is NULL");
  if (fd_count != w.fd_count)
    fail(GPUMEM_ERROR_INVALID_ARGUMENT, "fd_count is %zu; the handle needs %u descriptors", fd_count, w.fd_count);
  for (size_t i = 0; i < fd_count; ++i)
    if (fcntl(fds[i], F_GETFD) < 0)
      fail(GPUMEM_ERROR_INVALID_ARGUMENT, "fds[%zu] (%d) is not an open descriptor", i, fds[i]);
  const int device = device_with_uuid(w.uuid);
  driver::ContextScope scope(driver::primary_context(device));
  std::lock_guard<std::mutex> lock(mutex_);
  Ledger& ledger = ledgers_[w.exporter];
  Held& held = slots_[{w.exporter, w.slot}];
  uint64_t& slot_opens = held.opens;
  try {
    if (!ledger.view) ledger.view = std::make_unique<LedgerView>(fds[0]);
    // A slot held already stands for the export it was locked for: a handle of an earlier (or later)
    // export in the same slot is not that one.
    if (slot_opens ? held.serial != w.serial : !ledger.view->hold(w.slot, w.serial))
      fail(GPUMEM_ERROR_INVALID_ARGUMENT,
           "the handle is spent or its memory gone: every process that opened it has closed it, or process %u freed "
           "it before it was opened here and the memory was returned (export again for each receiver)",
           w.pid);
    try {
      const Segment& s = map_segment(w, device, fds);
      void* p = reinterpret_cast<void*>(s.base + w.offset);
      opens_[uintptr_t(p)].push_back(Open{w.exporter, w.slot, w.segment, w.first_unit(), s.vm ? w.units() : 0});
      held.serial = w.serial;
      ++slot_opens;
      ++ledger.opens;
      ++imports_;
      size = w.size;
      return p;
    } catch (...) {
      if (!slot_opens) ledger.view->let_go(w.slot);
      throw;
    }
  } catch (...) {
    if (!slot_opens) slots_.erase({w.exporter, w.slot});
    if (!ledger.view) ledgers_.erase(w.exporter);
    throw;
  }
}

void Importer::unmap_segment(const Open& o) {
  const driver::Api& api = driver::api();
  const auto it = segments_.find({o.exporter, o.segment});
  Segment& s = it->second;
  CUresult failed = CUDA_SUCCESS;
  if (s.own) {
    --s.opens;
  } else if (!s.vm) {
    if (--s.opens == 0) failed = api.cuIpcCloseMemHandle(static_cast<CUdeviceptr>(s.base));
  } else {
    for (uint64_t i = 0; i < o.units; ++i) {
      const uint64_t offset = o.first_unit + uint64_t{i} * s.unit;
      if (--s.mapped[offset]) continue;
      s.mapped.erase(offset);
      const CUresult r = api.cuMemUnmap(static_cast<CUdeviceptr>(s.base + offset), s.unit);
      if (r != CUDA_SUCCESS && failed == CUDA_SUCCESS) failed = r;
    }
    if (s.mapped.empty()) api.cuMemAddressFree(static_cast<CUdeviceptr>(s.base), s.size);
  }
  if (s.vm ? s.mapped.empty() : s.opens == 0) segments_.erase(it);
  if (failed != CUDA_SUCCESS) driver::throw_result(failed, "unmapping another process's memory (closed here)");
}

void Importer::close(void* p) {
  require(p != nullptr, "ptr is NULL");
  std::lock_guard<std::mutex> lock(mutex_);
  const auto it = opens_.find(reinterpret_cast<uintptr_t>(p));
  if (it == opens_.end())
    fail(GPUMEM_ERROR_NOT_OWNED, "%p is not open here (gpumem_ipc_open did not return it, or it was closed as often)",
         p);
  const Open o = it->second.back();
  const SlotKey slot{o.exporter, o.slot};
  const Segment& s = segments_.at({o.exporter, o.segment});
  // The exporter may reuse the memory once the slot is let go, and unmapping does not wait for
  // the device: its work is waited for first.
  {
    driver::ContextScope scope(driver::primary_context(s.device));
    driver::refuse_during_capture("gpumem_ipc_close", "closing another process's memory (cuCtxSynchronize)",
                                  "close before the capture begins or after it ends",
                                  {driver::primary_context(s.device)});
    driver::check(driver::api().cuCtxSynchronize(), "cuCtxSynchronize (before closing another process's memory)");
  }
  it->second.pop_back();
  if (it->second.empty()) opens_.erase(it);
  --imports_;
  struct LetGo {  // runs also when the unmap throws: the open is closed either way
    Importer& self;
    SlotKey slot;
    ~LetGo() {
      if (--self.slots_[slot].opens == 0) {
        self.slots_.erase(slot);
        Ledger& l = self.ledgers_[slot.first];
        l.view->let_go(slot.second);
      }
      if (--self.ledgers_[slot.first].opens == 0 && self.ledgers_.size() > kKeptLedgers)
        self.ledgers_.erase(slot.first);
    }
  } let_go{*this, slot};
  driver::ContextScope scope(driver::primary_context(s.device));
  unmap_segment(o);
}

void Importer::fill(gpumem_ipc_info_t& out) {
  std::lock_guard<std::mutex> lock(mutex_);
  out.imports = imports_;
  out.segment_opens = segment_opens_;
  for (const auto& [key, s] : segments_) {
    if (s.own) continue;  // nothing mapped for it
    out.open_segments += s.vm ? s.mapped.size() : 1;
    out.open_bytes += s.vm ? s.mapped.size() * s.unit : s.size;
  }
}

void* open(const gpumem_ipc_handle_t* handle, const int* fds, size_t fd_count, size_t& size) {
  return importer().open(handle, fds, fd_count, size);
}
void close(void* p) { importer().close(p); }
void fill_info(gpumem_ipc_info_t& out) {
  fill_exports(out);
  importer().fill(out);
}

void device_uuid(int device, uint8_t out[16]) {
  // Asked once per device: every export and every open wants it.
  static std::mutex mutex;
  static std::map<int, CUuuid> known;
  std::lock_guard<std::mutex> lock(mutex);
  auto it = known.find(device);
  if (it == known.end()) {
    CUuuid uuid;
    require_entry(driver::api().cuDeviceGetUuid, "cuDeviceGetUuid");
    driver::check(driver::api().cuDeviceGetUuid(&uuid, driver::cu_device(device)), "cuDeviceGetUuid");
    it = known.emplace(device, uuid).first;
  }
  std::memcpy(out, it->second.bytes, 16);
}

int device_with_uuid(const uint8_t uuid[16]) {
  const int n = driver::device_count();
  for (int d = 0; d < n; ++d) {
    uint8_t mine[16];
    device_uuid(d, mine);
    if (std::memcmp(mine, uuid, 16) == 0) return d;
  }
  fail(GPUMEM_ERROR_INVALID_DEVICE, "the handle's memory is on a device this process does not see (of its %d)", n);
}

}  // namespace gpumem::ipc
