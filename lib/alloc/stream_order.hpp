// How a pool hands memory from one stream's work to another's without waiting on the host: a
// fence recorded on the stream that last used the memory, which the next user's stream waits for.
// Knows nothing about CUDA; the device kinds implement it with CUDA events.
#pragma once

#include "gpumem/core.h"

namespace gpumem::alloc {

class StreamOrder {
 public:
  using Fence = void*;
  virtual ~StreamOrder() = default;
  // A fence that completes when the work queued on stream so far has.
  virtual Fence record(gpumem_stream_t stream) = 0;
  // Work queued on stream from now on waits for the fence; the host does not.
  virtual void wait(gpumem_stream_t stream, Fence fence) = 0;
  // Whether the fence has completed; the host does not wait.
  virtual bool query(Fence fence) = 0;
  // The host waits for the fence.
  virtual void synchronize(Fence fence) = 0;
  // The fence is no longer needed (its event goes back to a pool for reuse).
  virtual void release(Fence fence) noexcept = 0;
};

}  // namespace gpumem::alloc
