// The allocator over a CUDA memory pool (CUmemoryPool): stream-ordered allocations from one pool,
// and the pool's own settings and counters.
#pragma once

#include "alloc/raw.hpp"
#include "driver/driver.hpp"
#include "gpumem/cuda_pool.h"

namespace gpumem::alloc {

class CudaPoolAllocator final : public RawAllocator {
 public:
  // Destroys the pool with the allocator when owned; max_size is the pool's own (0: none known),
  // for details.
  CudaPoolAllocator(int device, CUmemoryPool pool, bool owned, uint64_t max_size);
  ~CudaPoolAllocator() override;

  StreamOrder* stream_order() override;
  void set_peer_access(int peer_device, bool enable) override;

  CUmemoryPool pool() const { return pool_; }
  void trim(uint64_t keep_bytes);
  void set_release_threshold(uint64_t bytes);
  gpumem_cuda_pool_info_t info();
  void reset_pool_peaks();

 protected:
  void* raw_alloc(size_t size, gpumem_stream_t stream) override;
  void raw_free(void* p, size_t size, gpumem_stream_t stream) override;

 private:
  uint64_t attribute(CUmemPool_attribute attr, const char* name);
  void set_attribute(CUmemPool_attribute attr, uint64_t value, const char* name);
  // The context to queue work on a stream in: the stream's own, else the device's primary one.
  CUcontext context_for(gpumem_stream_t stream);

  const CUmemoryPool pool_;
  const bool owned_;
  const uint64_t max_size_;
};

// Checks the parameters (those that need no driver first), finds or creates the pool, applies the
// threshold, and makes the allocator; a failure leaves nothing behind.
Allocator* make_cuda_pool(const gpumem_cuda_pool_params_t& params);

}  // namespace gpumem::alloc
