#include "defaults/pool_limit.hpp"

#include "core/error.hpp"
#include "core/size_text.hpp"
#include "driver/device.hpp"

namespace gpumem::alloc {

uint64_t limit_of_fraction(int device, double fraction) {
  if (!(fraction > 0 && fraction <= 1))
    fail(GPUMEM_ERROR_INVALID_ARGUMENT, "limit fraction %g is not in (0, 1]", fraction);
  if (device < 0) fail(GPUMEM_ERROR_INVALID_ARGUMENT, "a limit fraction needs a device; this pool holds host memory");
  const auto limit = static_cast<uint64_t>(static_cast<double>(driver::device_total_memory(device)) * fraction);
  if (limit == 0)
    fail(GPUMEM_ERROR_INVALID_ARGUMENT, "limit fraction %g of device %d's memory is less than a byte", fraction,
         device);
  return limit;
}

uint64_t pool_limit(uint64_t limit, double fraction, int device) {
  if (limit && fraction != 0)
    fail(GPUMEM_ERROR_INVALID_ARGUMENT, "params give both a limit (%s bytes) and a limit fraction (%g); give one",
         grouped(limit).c_str(), fraction);
  if (fraction != 0) return limit_of_fraction(device, fraction);
  if (!limit && device >= 0) return limit_from_environment(driver::device_total_memory, device);
  return limit;
}

}  // namespace gpumem::alloc
