// Sharing device memory between processes (gpumem/ipc.h): the exporter's registry of what it has
// handed out (exports.cpp), the importer's table of what it has opened (imports.cpp), and the two
// carried over a Unix-domain socket (socket.cpp).
#pragma once

#include <pthread.h>

#include <cstddef>
#include <cstdint>
#include <mutex>

#include "alloc/allocator.hpp"
#include "gpumem/ipc.h"

namespace gpumem::ipc {

// Exports the live allocation at p of a; sets fd_count to the descriptors that go with it.
gpumem_ipc_handle_t export_allocation(alloc::Allocator* a, void* p, size_t& fd_count);
// New descriptors for a handle this process exported: the ledger's, then each unit's.
void export_fds(const gpumem_ipc_handle_t* handle, int* fds, size_t count);
// This process's id as an exporter (random, new in a forked child).
uint64_t exporter_id();
// Frees what was freed here while held elsewhere and is no longer; returns the bytes.
uint64_t collect();

void* open(const gpumem_ipc_handle_t* handle, const int* fds, size_t fd_count, size_t& size);
void close(void* p);

void send(int socket, const gpumem_ipc_handle_t* handle);
void* receive(int socket, size_t& size);

// What this process shares: its exports (exports.cpp), then what it has opened (imports.cpp).
void fill_exports(gpumem_ipc_info_t& out);
void fill_info(gpumem_ipc_info_t& out);

// One T per process, never destroyed (frees and closes may come during exit); a child made by
// fork() starts with a new one, none of its parent's exports or opens, and closes its copies of
// the parent's descriptors (a ledger lock lasts while any copy of its description is open).
template <class T>
T& per_process() {
  static T* the = nullptr;
  static std::once_flag once;
  std::call_once(once, [] {
    the = new T;
    pthread_atfork(nullptr, nullptr, [] {
      T* parents = the;
      the = new T;
      delete parents;  // locks nothing: the parent's other threads may have held its mutex
    });
  });
  return *the;
}

// Refuses with NOT_SUPPORTED when the driver lacks an entry point (a driver older than it).
template <class F>
void require_entry(F* f, const char* name) {
  if (!f)
    fail(GPUMEM_ERROR_NOT_SUPPORTED, "the CUDA driver lacks %s, which sharing memory between processes needs", name);
}

// The device's UUID as the driver gives it, and the device of this process with that UUID
// (INVALID_DEVICE if none).
void device_uuid(int device, uint8_t out[16]);
int device_with_uuid(const uint8_t uuid[16]);

}  // namespace gpumem::ipc
