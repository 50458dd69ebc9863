// Allocators that go to their source once per call: the driver's memory kinds, plain host memory,
// and the caller's functions. Each remembers its live allocations, for statistics and to refuse
// pointers it did not hand out.
#pragma once

#include <tsl/robin_map.h>

#include "alloc/allocator.hpp"

namespace gpumem::alloc {

class RawAllocator : public Allocator {
 public:
  using Allocator::Allocator;
  void live(uint64_t& count, uint64_t& bytes) override;
  void free_all_live() override;

 protected:
  void* do_allocate(size_t size, gpumem_stream_t stream, size_t& mem_size) override;
  void do_deallocate(void* p, gpumem_stream_t stream) override;
  void sizes_of(void* p, size_t& size, size_t& mem_size) override;

  // The source: allocate size bytes, or free what raw_alloc gave. Called without the lock.
  virtual void* raw_alloc(size_t size, gpumem_stream_t stream) = 0;
  virtual void raw_free(void* p, size_t size, gpumem_stream_t stream) = 0;

 private:
  tsl::robin_map<void*, size_t, AddressHash> live_;  // under mutex_
};

// The allocators of allocator.h, one function each; they check their arguments as they are made.
Allocator* make_device(int device);
Allocator* make_device_async(int device, gpumem_cuda_pool_t pool);
Allocator* make_managed(int device, unsigned flags);
Allocator* make_pinned(unsigned flags);
Allocator* make_host(size_t alignment);
Allocator* make_functions(const gpumem_allocator_functions_t& functions);

}  // namespace gpumem::alloc
