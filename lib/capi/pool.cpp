// Pools at the C boundary.
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "capi/guard.hpp"
#include "defaults/defaults.hpp"
#include "defaults/pool_config.hpp"
#include "defaults/pool_limit.hpp"
#include "pool/pool.hpp"
#include "pool/tenant.hpp"

using gpumem::fail;
using gpumem::require;
using gpumem::require_out;
using gpumem::alloc::Allocator;
using gpumem::capi::guard;
using gpumem::pool::Pool;

namespace {

Pool* pool_from(gpumem_allocator_t* handle) {
  Allocator* a = Allocator::from(handle);
  auto* pool = dynamic_cast<Pool*>(a);
  if (!pool)
    fail(GPUMEM_ERROR_INVALID_HANDLE, "%p is a %s allocator, not a pool", static_cast<void*>(handle), a->kind());
  return pool;
}

}  // namespace

extern "C" {

GPUMEM_API gpumem_status_t gpumem_pool_params_init(gpumem_pool_params_t* params, size_t struct_size) {
  return guard([&] { gpumem::capi::init_struct(params, "params", struct_size); });
}

GPUMEM_API gpumem_status_t gpumem_pool_create(const gpumem_pool_params_t* params, gpumem_allocator_t** out_pool) {
  return guard([&] {
    require_out(out_pool, "out_pool");
    *out_pool = nullptr;
    const gpumem_pool_params_t p = gpumem::capi::in_struct(params, "params");
    require(p.upstream != nullptr, "params->upstream is NULL");
    Allocator* upstream = Allocator::from(p.upstream);
    *out_pool = new Pool(upstream, gpumem::alloc::pool_limit(p.limit, p.limit_fraction, upstream->device()));
  });
}

GPUMEM_API gpumem_status_t gpumem_pool_get_device(int32_t device, gpumem_allocator_t** out_pool) {
  return guard([&] {
    require_out(out_pool, "out_pool");
    *out_pool = nullptr;
    *out_pool = gpumem::alloc::device_pool(device);
  });
}

GPUMEM_API gpumem_status_t gpumem_pool_release(gpumem_allocator_t* pool, gpumem_stream_t stream, uint32_t flags) {
  return guard([&] {
    if (flags & ~uint32_t{GPUMEM_POOL_RELEASE_ALL_STREAMS})
      fail(GPUMEM_ERROR_INVALID_ARGUMENT, "unknown release flags 0x%x",
           flags & ~uint32_t{GPUMEM_POOL_RELEASE_ALL_STREAMS});
    pool_from(pool)->release(stream, flags & GPUMEM_POOL_RELEASE_ALL_STREAMS);
  });
}

GPUMEM_API gpumem_status_t gpumem_pool_get_info(gpumem_allocator_t* pool, gpumem_pool_info_t* out_info) {
  return guard([&] {
    gpumem::capi::fill_struct(out_info, "out_info", [&](gpumem_pool_info_t& out) {
      const gpumem::pool::Info i = pool_from(pool)->info();
      out.used_bytes = i.used;
      out.free_bytes = i.free;
      out.total_bytes = i.total;
      out.free_block_count = i.free_blocks;
      out.limit = i.limit;
      out.arena_count = i.arenas;
      out.pending_bytes = i.pending;
      out.address_bytes = i.addresses;
    });
  });
}

GPUMEM_API gpumem_status_t gpumem_pool_get_growth_info(gpumem_allocator_t* pool, gpumem_pool_growth_info_t* out_info) {
  return guard([&] {
    gpumem::capi::fill_struct(out_info, "out_info", [&](gpumem_pool_growth_info_t& out) {
      const gpumem::pool::Growth g = pool_from(pool)->growth();
      out.mapped_bytes = g.mapped_bytes;
      out.map_calls = g.map_calls;
      out.moved_bytes = g.moved_bytes;
      out.move_calls = g.move_calls;
      out.returned_bytes = g.returned_bytes;
      out.fences_recorded = g.fences_recorded;
      out.driver_ns = g.driver_ns;
    });
  });
}

GPUMEM_API gpumem_status_t gpumem_pool_set_limit(gpumem_allocator_t* pool, uint64_t limit) {
  return guard([&] { pool_from(pool)->set_limit(limit); });
}

GPUMEM_API gpumem_status_t gpumem_pool_set_soft_limit(gpumem_allocator_t* pool, uint64_t soft_limit) {
  return guard([&] { pool_from(pool)->set_soft_limit(soft_limit); });
}

GPUMEM_API gpumem_status_t gpumem_pool_set_limit_fraction(gpumem_allocator_t* pool, double fraction) {
  return guard([&] {
    Pool* p = pool_from(pool);
    p->set_limit(gpumem::alloc::limit_of_fraction(p->device(), fraction));
  });
}

GPUMEM_API gpumem_status_t gpumem_pool_set_stream_reuse(gpumem_allocator_t* pool, int32_t reuse) {
  return guard([&] {
    Pool* p = pool_from(pool);
    if (reuse < GPUMEM_STREAM_REUSE_NEVER || reuse > GPUMEM_STREAM_REUSE_HOST_WAIT)
      fail(GPUMEM_ERROR_INVALID_ARGUMENT, "stream reuse %d is not one of GPUMEM_STREAM_REUSE_* (0 to 2)", reuse);
    p->set_stream_reuse(reuse == GPUMEM_STREAM_REUSE_NEVER   ? gpumem::pool::StreamReuse::kNever
                        : reuse == GPUMEM_STREAM_REUSE_FENCE ? gpumem::pool::StreamReuse::kFenceWait
                                                             : gpumem::pool::StreamReuse::kHostWait);
  });
}

GPUMEM_API gpumem_status_t gpumem_pool_set_page_reclaim(gpumem_allocator_t* pool, int32_t enable) {
  return guard([&] {
    Pool* p = pool_from(pool);
    if (enable != 0 && enable != 1) fail(GPUMEM_ERROR_INVALID_ARGUMENT, "enable is %d; pass 1 or 0", enable);
    p->set_page_reclaim(enable == 1);
  });
}

GPUMEM_API gpumem_status_t gpumem_pool_set_device_config(const char* config) {
  return guard([&] { gpumem::alloc::set_device_pool_config(config); });
}

GPUMEM_API gpumem_status_t gpumem_pool_record_stream(gpumem_allocator_t* pool, void* ptr, gpumem_stream_t stream) {
  return guard([&] { gpumem::pool::record_stream(Allocator::from(pool), ptr, stream); });
}

GPUMEM_API gpumem_status_t gpumem_reclaim_add(gpumem_reclaim_fn reclaim, void* user_data, uint64_t* out_id) {
  return guard([&] {
    require_out(out_id, "out_id");
    *out_id = 0;
    require(reclaim != nullptr, "reclaim is NULL");
    *out_id = gpumem::alloc::reclaim_add(reclaim, user_data);
  });
}

GPUMEM_API gpumem_status_t gpumem_reclaim_remove(uint64_t id) {
  return guard([&] { gpumem::alloc::reclaim_remove(id); });
}

}  // extern "C"

GPUMEM_API gpumem_status_t gpumem_pool_snapshot(gpumem_allocator_t* pool, gpumem_block_fn fn, void* user_data) {
  return guard([&] {
    require(fn != nullptr, "fn is NULL");
    for (const gpumem::pool::BlockInfo& b : pool_from(pool)->snapshot()) {
      gpumem_block_info_t info{};
      info.struct_size = sizeof info;
      info.segment = reinterpret_cast<void*>(b.segment);
      info.segment_size = b.segment_size;
      info.address = reinterpret_cast<void*>(b.address);
      info.size = b.size;
      info.requested = b.requested;
      info.state = static_cast<uint32_t>(b.state);
      info.stream = b.stream;
      fn(&info, user_data);
    }
  });
}

GPUMEM_API gpumem_status_t gpumem_pool_snapshot_json(gpumem_allocator_t* pool, const char* path) {
  return guard([&] {
    require(path != nullptr, "path is NULL");
    gpumem::pool::write_snapshot_json(*pool_from(pool), path);
  });
}
