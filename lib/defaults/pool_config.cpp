#include "defaults/pool_config.hpp"

#include <cstdlib>
#include <cstring>
#include <mutex>

#include "core/error.hpp"
#include "core/size_text.hpp"

namespace gpumem::alloc {
namespace {

constexpr const char* kKeys =
    "backend (vm, classic or auto), map_unit (a size), range_size (a size), page_reclaim "
    "(true or false), soft_limit (a size)";

struct Settings {
  std::mutex mutex;
  std::string call;  // what set_device_pool_config() was given, checked
  int made = -1;     // the first device whose pool was made, or -1
};
Settings& settings() {
  static Settings* s = new Settings;  // leaked: device pools are made until exit
  return *s;
}

bool read_bool(const std::string& where, const std::string& v) {
  if (v == "true" || v == "1") return true;
  if (v == "false" || v == "0") return false;
  fail(GPUMEM_ERROR_INVALID_ARGUMENT, "%s: \"%s\" is not true or false", where.c_str(), v.c_str());
}

}  // namespace

PoolConfig parse_pool_config(const char* source, const char* text, PoolConfig out) {
  const std::string all = text ? text : "";
  size_t at = 0;
  while (at < all.size()) {
    size_t end = all.find(',', at);
    if (end == std::string::npos) end = all.size();
    const std::string item = all.substr(at, end - at);
    at = end + 1;
    if (item.empty()) continue;
    const size_t colon = item.find(':');
    if (colon == std::string::npos)
      fail(GPUMEM_ERROR_INVALID_ARGUMENT, "%s: \"%s\" is not key:value; the keys are %s", source, item.c_str(), kKeys);
    const std::string key = item.substr(0, colon), value = item.substr(colon + 1);
    const std::string where = std::string(source) + "'s " + key;
    if (key == "backend") {
      if (value == "vm") {
        out.backend = PoolConfig::Backend::kVm;
      } else if (value == "classic") {
        out.backend = PoolConfig::Backend::kClassic;
      } else if (value == "auto") {
        out.backend = PoolConfig::Backend::kAuto;
      } else {
        fail(GPUMEM_ERROR_INVALID_ARGUMENT, "%s: \"%s\" is not vm, classic or auto", where.c_str(), value.c_str());
      }
    } else if (key == "map_unit" || key == "range_size" || key == "soft_limit") {
      const uint64_t bytes = parse_size(where.c_str(), value.c_str(), nullptr, 0);
      (key == "map_unit" ? out.map_unit : key == "range_size" ? out.range_size : out.soft_limit) = bytes;
    } else if (key == "page_reclaim") {
      out.page_reclaim = read_bool(where, value);
    } else {
      fail(GPUMEM_ERROR_INVALID_ARGUMENT, "%s: unknown key \"%s\"; the keys are %s", source, key.c_str(), kKeys);
    }
  }
  return out;
}

PoolConfig device_pool_config(int device) {
  const char* env = std::getenv("GPUMEM_POOL_CONF");
  PoolConfig config = parse_pool_config("GPUMEM_POOL_CONF", env);
  Settings& s = settings();
  std::lock_guard<std::mutex> lock(s.mutex);
  config = parse_pool_config("gpumem_pool_set_device_config", s.call.c_str(), config);
  if (s.made < 0) s.made = device;  // under the same lock: no call can change what this pool is built from
  return config;
}

void set_device_pool_config(const char* text) {
  parse_pool_config("gpumem_pool_set_device_config", text);  // refused before anything is kept
  Settings& s = settings();
  std::lock_guard<std::mutex> lock(s.mutex);
  if (s.made >= 0)
    fail(GPUMEM_ERROR_BUSY,
         "device %d's pool was asked for already, with the configuration it had then; set the configuration before "
         "the first allocation through a device pool, a default allocator or a drop-in",
         s.made);
  s.call = text ? text : "";
}

}  // namespace gpumem::alloc
