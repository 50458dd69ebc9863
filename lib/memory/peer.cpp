// Peer access between devices: enabled on the first copy between two devices and remembered for
// the pair, as CuPy does, so that later copies take the direct path.
#include <atomic>
#include <memory>
#include <mutex>

#include "memory/memory.hpp"

namespace gpumem::memory {
namespace {

enum PeerState : uint8_t { kUnknown, kEnabled, kUnavailable };

struct PeerTable {
  int count = 0;
  std::unique_ptr<std::atomic<uint8_t>[]> states;  // count x count, [from * count + to]
  std::mutex mutex;
};

PeerTable& table() {
  static PeerTable* t = [] {
    auto* table = new PeerTable;  // leaked: copies may run during process exit
    table->count = driver::device_count();
    table->states = std::make_unique<std::atomic<uint8_t>[]>(static_cast<size_t>(table->count * table->count));
    return table;
  }();
  return *t;
}

// Lets `from` reach `to`'s memory. kUnavailable only where the hardware or the driver says the
// pair never can; any other failure leaves the pair to be tried again on the next copy.
PeerState enable(int from, int to) try {
  const driver::Api& a = driver::api();
  CUdevice dev_from = 0, dev_to = 0;
  driver::check(a.cuDeviceGet(&dev_from, from), "cuDeviceGet");
  driver::check(a.cuDeviceGet(&dev_to, to), "cuDeviceGet");
  int can = 0;
  driver::check(a.cuDeviceCanAccessPeer(&can, dev_from, dev_to), "cuDeviceCanAccessPeer");
  if (!can) return kUnavailable;
  driver::ContextScope scope(driver::primary_context(from));
  driver::RelaxedCaptureScope relaxed;
  switch (a.cuCtxEnablePeerAccess(driver::primary_context(to), 0)) {
    case CUDA_SUCCESS:
    case CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED:  // by the caller's own code, say
      return kEnabled;
    case CUDA_ERROR_PEER_ACCESS_UNSUPPORTED:
    case CUDA_ERROR_TOO_MANY_PEERS:
      return kUnavailable;
    default:
      return kUnknown;
  }
} catch (const Error&) {
  return kUnknown;  // peer access only speeds copies up: the copy goes on without it
}

}  // namespace

bool ensure_peer_access(int a, int b) {
  if (a == b || a < 0 || b < 0) return true;
  PeerTable& t = table();
  if (a >= t.count || b >= t.count) return false;
  std::atomic<uint8_t>& ab = t.states[static_cast<size_t>(a * t.count + b)];
  std::atomic<uint8_t>& ba = t.states[static_cast<size_t>(b * t.count + a)];
  if (ab.load(std::memory_order_acquire) == kUnknown || ba.load(std::memory_order_acquire) == kUnknown) {
    std::lock_guard<std::mutex> lock(t.mutex);
    if (ab.load(std::memory_order_relaxed) == kUnknown) ab.store(enable(a, b), std::memory_order_release);
    if (ba.load(std::memory_order_relaxed) == kUnknown) ba.store(enable(b, a), std::memory_order_release);
  }
  return ab.load(std::memory_order_acquire) == kEnabled && ba.load(std::memory_order_acquire) == kEnabled;
}

}  // namespace gpumem::memory
