// Memset and copies at the C boundary.
#include "gpumem/copy.h"
#include "capi/guard.hpp"
#include "memory/memory.hpp"

using gpumem::capi::guard;
using gpumem::capi::in_struct;
using gpumem::capi::init_struct;
namespace memory = gpumem::memory;

namespace {

memory::CopyRegion region_of(const gpumem_copy2d_t& c) {
  return {{"dst", c.dst, c.dst_array, c.dst_x, c.dst_y, 0, c.dst_pitch, 0},
          {"src", c.src, c.src_array, c.src_x, c.src_y, 0, c.src_pitch, 0},
          c.width,
          c.height,
          1,
          2};
}

memory::CopyRegion region_of(const gpumem_copy3d_t& c) {
  return {{"dst", c.dst, c.dst_array, c.dst_x, c.dst_y, c.dst_z, c.dst_pitch, c.dst_height},
          {"src", c.src, c.src_array, c.src_x, c.src_y, c.src_z, c.src_pitch, c.src_height},
          c.width,
          c.height,
          c.depth,
          3};
}

}  // namespace

extern "C" {

GPUMEM_API gpumem_status_t gpumem_memset(void* dst, uint32_t value, uint32_t element_size, size_t count) {
  return guard([&] { memory::memset(dst, value, element_size, count, nullptr, false); });
}

GPUMEM_API gpumem_status_t gpumem_memset_async(void* dst, uint32_t value, uint32_t element_size, size_t count,
                                               gpumem_stream_t stream) {
  return guard([&] { memory::memset(dst, value, element_size, count, stream, true); });
}

GPUMEM_API gpumem_status_t gpumem_copy(void* dst, const void* src, size_t size) {
  return guard([&] { memory::copy(dst, src, size, nullptr, false); });
}

GPUMEM_API gpumem_status_t gpumem_copy_async(void* dst, const void* src, size_t size, gpumem_stream_t stream) {
  return guard([&] { memory::copy(dst, src, size, stream, true); });
}

GPUMEM_API gpumem_status_t gpumem_copy2d_init(gpumem_copy2d_t* copy, size_t struct_size) {
  return guard([&] { init_struct(copy, "copy", struct_size); });
}

GPUMEM_API gpumem_status_t gpumem_copy3d_init(gpumem_copy3d_t* copy, size_t struct_size) {
  return guard([&] { init_struct(copy, "copy", struct_size); });
}

GPUMEM_API gpumem_status_t gpumem_copy2d(const gpumem_copy2d_t* copy) {
  return guard([&] { memory::copy3d(region_of(in_struct(copy, "copy")), nullptr, false); });
}

GPUMEM_API gpumem_status_t gpumem_copy2d_async(const gpumem_copy2d_t* copy, gpumem_stream_t stream) {
  return guard([&] { memory::copy3d(region_of(in_struct(copy, "copy")), stream, true); });
}

GPUMEM_API gpumem_status_t gpumem_copy3d(const gpumem_copy3d_t* copy) {
  return guard([&] { memory::copy3d(region_of(in_struct(copy, "copy")), nullptr, false); });
}

GPUMEM_API gpumem_status_t gpumem_copy3d_async(const gpumem_copy3d_t* copy, gpumem_stream_t stream) {
  return guard([&] { memory::copy3d(region_of(in_struct(copy, "copy")), stream, true); });
}

GPUMEM_API gpumem_status_t gpumem_copy_staging_get_held(size_t* out_bytes) {
  return guard([&] {
    gpumem::require_out(out_bytes, "out_bytes");
    *out_bytes = memory::staging_held();
  });
}

GPUMEM_API gpumem_status_t gpumem_copy_staging_release(void) {
  return guard([&] { memory::staging_release(); });
}

}  // extern "C"
