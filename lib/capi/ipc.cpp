// Sharing memory between processes at the C boundary.
#include "ipc/ipc.hpp"
#include "capi/guard.hpp"
#include "defaults/defaults.hpp"
#include "pool/pool.hpp"

using gpumem::require_out;
using gpumem::capi::guard;

extern "C" {

GPUMEM_API gpumem_status_t gpumem_ipc_export(gpumem_allocator_t* allocator, void* ptr, gpumem_ipc_handle_t* out_handle,
                                             size_t* out_fd_count) {
  return guard([&] {
    require_out(out_handle, "out_handle");
    *out_handle = {};
    if (out_fd_count) *out_fd_count = 0;
    require_out(ptr, "ptr");
    size_t fd_count = 0;
    const gpumem::alloc::Resolved a = gpumem::alloc::resolve(allocator);
    gpumem::pool::Pool::refuse_if_held_above(a, ptr);  // exported through its owner, as it is freed
    *out_handle = gpumem::ipc::export_allocation(a, ptr, fd_count);
    if (out_fd_count) *out_fd_count = fd_count;
  });
}

GPUMEM_API gpumem_status_t gpumem_ipc_export_fds(const gpumem_ipc_handle_t* handle, int* out_fds, size_t count) {
  return guard([&] { gpumem::ipc::export_fds(handle, out_fds, count); });
}

GPUMEM_API gpumem_status_t gpumem_ipc_open(const gpumem_ipc_handle_t* handle, const int* fds, size_t fd_count,
                                           void** out_ptr, size_t* out_size) {
  return guard([&] {
    require_out(out_ptr, "out_ptr");
    *out_ptr = nullptr;
    if (out_size) *out_size = 0;
    size_t size = 0;
    *out_ptr = gpumem::ipc::open(handle, fds, fd_count, size);
    if (out_size) *out_size = size;
  });
}

GPUMEM_API gpumem_status_t gpumem_ipc_close(void* ptr) {
  return guard([&] { gpumem::ipc::close(ptr); });
}

GPUMEM_API gpumem_status_t gpumem_ipc_send(int socket, const gpumem_ipc_handle_t* handle) {
  return guard([&] { gpumem::ipc::send(socket, handle); });
}

GPUMEM_API gpumem_status_t gpumem_ipc_receive(int socket, void** out_ptr, size_t* out_size) {
  return guard([&] {
    require_out(out_ptr, "out_ptr");
    *out_ptr = nullptr;
    if (out_size) *out_size = 0;
    size_t size = 0;
    *out_ptr = gpumem::ipc::receive(socket, size);
    if (out_size) *out_size = size;
  });
}

GPUMEM_API gpumem_status_t gpumem_ipc_collect(uint64_t* out_freed) {
  return guard([&] {
    if (out_freed) *out_freed = 0;
    const uint64_t freed = gpumem::ipc::collect();
    if (out_freed) *out_freed = freed;
  });
}

GPUMEM_API gpumem_status_t gpumem_ipc_get_info(gpumem_ipc_info_t* out_info) {
  return guard([&] {
    gpumem::capi::fill_struct(out_info, "out_info", [&](gpumem_ipc_info_t& out) { gpumem::ipc::fill_info(out); });
  });
}

}  // extern "C"
