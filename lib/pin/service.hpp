// The process's pinning service: the bookkeeping of pin_map.hpp over the driver's host registration.
#pragma once

#include "pin/pin_map.hpp"

namespace gpumem::pin {

// Made on first use, with the page size and the budget from GPUMEM_PIN_CACHE (else 1 GiB);
// throws GPUMEM_ERROR_INVALID_ARGUMENT if the variable cannot be read.
PinMap& service();
// The service if something has used it, else NULL; never makes it.
PinMap* started_service();

// Names the public function the calling thread's pinning call serves, for the detail of a
// refusal during a stream capture. The service reaches the driver only for pages that need
// (un)locking and checks for a capture just then, so a pin that the cache serves costs no driver call.
class CallScope {
 public:
  explicit CallScope(const char* fn);
  ~CallScope();
  CallScope(const CallScope&) = delete;
  CallScope& operator=(const CallScope&) = delete;

 private:
  const char* previous_;
};

}  // namespace gpumem::pin
