// The stream order of memory the GPU's streams work on: fences are CUDA events, taken from a
// free list per context and recorded on the stream, so a fence costs one driver call once warm.
#pragma once

#include "alloc/stream_order.hpp"

namespace gpumem::alloc {

// The order for memory of a device (its default streams are its primary context's), or for
// device -1 (page-locked host memory: the default streams of the calling thread's context).
// Lives for the process.
StreamOrder* cuda_stream_order(int device);

}  // namespace gpumem::alloc
