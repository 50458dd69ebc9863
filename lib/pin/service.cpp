#include "pin/service.hpp"

#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <cstring>

#include "core/size_text.hpp"
#include "memory/memory.hpp"

namespace gpumem::pin {
namespace {

constexpr uint64_t kDefaultBudget = uint64_t{1} << 30;

thread_local const char* current_call = nullptr;  // see CallScope

memory::Caller caller(const char* otherwise) { return {current_call ? current_call : otherwise}; }

class DriverBackend final : public Backend {
 public:
  void lock_pages(uintptr_t start, size_t size) override {
    // Portable and mapped: one registration serves every device.
    try {
      memory::host_register(reinterpret_cast<void*>(start), size,
                            GPUMEM_HOST_REGISTER_PORTABLE | GPUMEM_HOST_REGISTER_DEVICEMAP, caller("gpumem_pin"));
    } catch (const Error& e) {
      if (e.status() != GPUMEM_ERROR_ALREADY_REGISTERED) throw;
      throw Error(GPUMEM_ERROR_INVALID_POINTER,
                  format("the pages at %p + %s are page-locked outside the pinning service (a pinned allocation or "
                         "a direct registration): %s",
                         reinterpret_cast<void*>(start), bytes(size).c_str(), e.what()),
                  e.cuda_result());
    }
  }
  void unlock_pages(uintptr_t start, size_t) override {
    memory::host_unregister(reinterpret_cast<void*>(start), caller("gpumem_unpin"));
  }
};

uint64_t budget_from_environment() {
  const char* text = std::getenv("GPUMEM_PIN_CACHE");
  if (!text || !*text) return kDefaultBudget;
  if (std::strcmp(text, "0") == 0) return 0;
  return parse_size("GPUMEM_PIN_CACHE", text, nullptr, -1);
}

}  // namespace

std::atomic<PinMap*> started{nullptr};

PinMap& service() {
  // Leaked on purpose: pins may be dropped during process exit.
  static PinMap* map = [] {
    const uint64_t budget = budget_from_environment();  // may throw: before anything is made
    static DriverBackend backend;
    auto* made = new PinMap(backend, static_cast<size_t>(sysconf(_SC_PAGESIZE)), budget);
    started.store(made, std::memory_order_release);
    return made;
  }();
  return *map;
}

PinMap* started_service() { return started.load(std::memory_order_acquire); }

CallScope::CallScope(const char* fn) : previous_(current_call) { current_call = fn; }
CallScope::~CallScope() { current_call = previous_; }

}  // namespace gpumem::pin
