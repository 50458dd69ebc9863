// Tenants at the C boundary.
#include <cstring>
#include <string>

#include "capi/guard.hpp"
#include "defaults/defaults.hpp"
#include "pool/tenant.hpp"

using gpumem::fail;
using gpumem::require_out;
using gpumem::alloc::Allocator;
using gpumem::capi::guard;
using gpumem::pool::Tenant;

namespace {

Tenant* tenant_from(gpumem_allocator_t* handle) {
  Allocator* a = Allocator::from(handle);
  auto* tenant = dynamic_cast<Tenant*>(a);
  if (!tenant)
    fail(GPUMEM_ERROR_INVALID_HANDLE, "%p is a %s allocator, not a tenant (from gpumem_tenant_create)",
         static_cast<void*>(handle), a->kind());
  return tenant;
}

}  // namespace

extern "C" {

GPUMEM_API gpumem_status_t gpumem_tenant_params_init(gpumem_tenant_params_t* params, size_t struct_size) {
  return guard([&] { gpumem::capi::init_struct(params, "params", struct_size); });
}

GPUMEM_API gpumem_status_t gpumem_tenant_create(const gpumem_tenant_params_t* params, gpumem_allocator_t** out_tenant) {
  return guard([&] {
    require_out(out_tenant, "out_tenant");
    *out_tenant = nullptr;
    const gpumem_tenant_params_t p = gpumem::capi::in_struct(params, "params");
    Tenant::check_limits(p.limit, p.soft_limit);
    Allocator* upstream = p.upstream ? Allocator::from(p.upstream) : gpumem::alloc::device_pool(p.device);
    const std::string name = p.name ? std::string(p.name, strnlen(p.name, GPUMEM_TENANT_NAME_SIZE - 1)) : "tenant";
    *out_tenant = new Tenant(upstream, name, p.limit, p.soft_limit);
  });
}

GPUMEM_API gpumem_status_t gpumem_tenant_set_limits(gpumem_allocator_t* tenant, uint64_t limit, uint64_t soft_limit) {
  return guard([&] { tenant_from(tenant)->set_limits(limit, soft_limit); });
}

GPUMEM_API gpumem_status_t gpumem_tenant_get_info(gpumem_allocator_t* tenant, gpumem_tenant_info_t* out_info) {
  return guard([&] {
    gpumem::capi::fill_struct(out_info, "out_info", [&](gpumem_tenant_info_t& out) {
      Tenant* t = tenant_from(tenant);
      const Tenant::Figures f = t->figures();
      std::memcpy(out.name, t->name().c_str(), t->name().size() + 1);
      out.limit = f.limit;
      out.soft_limit = f.soft_limit;
      out.bytes_in_use = f.in_use;
      out.peak_bytes_in_use = f.peak;
      out.refused = f.refused;
      out.soft_crossings = f.soft_crossings;
    });
  });
}

}  // extern "C"
