// What a trace says the traced allocator did (gpumem_trace_summarize(), `gpumem summary`): the
// figures of torch.cuda.memory_stats(), and as a person reads them, with the largest allocations
// live at the peak and the frames they were allocated from.
#pragma once

#include <cstdint>
#include <string>

#include "gpumem/trace.h"

namespace gpumem::trace {

struct Summary {
  gpumem_trace_summary_t figures{};
  std::string text;
};

// Reads the trace at path once, to its end; top is how many of the largest allocations at the
// peak the text lists. Throws GPUMEM_ERROR_IO as the reader does.
Summary summarize(const std::string& path, uint32_t top);

}  // namespace gpumem::trace
