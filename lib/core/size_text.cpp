// Sizes written in environment variables and configuration strings: "1073741824", "8GiB",
// "512MB", and for GPUMEM_GPU_MEMORY_LIMIT "50%".
#include "core/size_text.hpp"

#include <strings.h>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "core/error.hpp"

namespace gpumem {
namespace {

struct Unit {
  const char* name;
  double factor;
};
constexpr Unit kUnits[] = {
    {"", 1},      {"B", 1},        {"KB", 1e3},        {"MB", 1e6},           {"GB", 1e9},
    {"TB", 1e12}, {"KiB", 1024.0}, {"MiB", 1048576.0}, {"GiB", 1073741824.0}, {"TiB", 1099511627776.0},
};

[[noreturn]] void unreadable(const char* variable, const char* text, const char* why) {
  fail(GPUMEM_ERROR_INVALID_ARGUMENT, "%s=\"%s\" %s; write bytes (1073741824) or a size with a unit (8GiB, 512MB)%s",
       variable, text, why,
       std::strcmp(variable, "GPUMEM_GPU_MEMORY_LIMIT") == 0 ? ", or a percentage of the device's memory (50%)" : "");
}

}  // namespace

uint64_t parse_size(const char* variable, const char* text, uint64_t (*device_total)(int device), int device) {
  errno = 0;
  char* end = nullptr;
  const double value = std::strtod(text, &end);
  if (end == text || errno || !std::isfinite(value)) unreadable(variable, text, "is not a number");
  if (value < 0) unreadable(variable, text, "is negative");
  while (*end == ' ') ++end;
  double limit;
  if (std::strcmp(end, "%") == 0) {
    if (!device_total) unreadable(variable, text, "is a percentage, which it does not take");
    if (value <= 0 || value > 100) unreadable(variable, text, "is not a percentage in (0, 100]");
    limit = static_cast<double>(device_total(device)) * value / 100;
  } else {
    const Unit* unit = nullptr;
    for (const Unit& u : kUnits)
      if (strcasecmp(end, u.name) == 0) unit = &u;
    if (!unit) unreadable(variable, text, "has an unknown unit");
    limit = value * unit->factor;
  }
  if (limit < 1 || limit >= 18446744073709551615.0) unreadable(variable, text, "is out of range");
  return static_cast<uint64_t>(limit);
}

uint64_t limit_from_environment(uint64_t (*device_total)(int device), int device) {
  const char* text = std::getenv("GPUMEM_GPU_MEMORY_LIMIT");
  if (!text || !*text) return 0;
  return parse_size("GPUMEM_GPU_MEMORY_LIMIT", text, device_total, device);
}

}  // namespace gpumem
