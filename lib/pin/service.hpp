// The process's pinning service: the bookkeeping of pin_map.hpp over the driver's host registration.
#pragma once

#include "pin/pin_map.hpp"

namespace gpumem::pin {

// Made on first use, with the page size and the budget from GPUMEM_PIN_CACHE (else 1 GiB);
// throws GPUMEM_ERROR_INVALID_ARGUMENT if the variable cannot be read.
PinMap& service();
// The service if something has used it, else NULL; never makes it.
PinMap* started_service();

}  // namespace gpumem::pin
