// The pool's snapshot as a JSON file (gpumem_pool_snapshot_json): its totals, and its segments
// with their blocks, in address order.
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "gpumem/pool.h"
#include "pool/pool.hpp"

namespace gpumem::pool {
namespace {

const char* block_state_name(int state) {
  switch (state) {
    case GPUMEM_BLOCK_IN_USE:
      return "in_use";
    case GPUMEM_BLOCK_PENDING:
      return "pending";
    case GPUMEM_BLOCK_UNMAPPED:
      return "unmapped";
    default:
      return "free";
  }
}

}  // namespace

void write_snapshot_json(Pool& pool, const char* path) {
  const Info info = pool.info();
  const std::vector<BlockInfo> blocks = pool.snapshot();
  std::string out = format(
      "{\"format\": \"gpumem-pool-snapshot\", \"version\": 1, \"device\": %d, \"used_bytes\": %llu, "
      "\"free_bytes\": %llu, \"pending_bytes\": %llu, \"total_bytes\": %llu, \"limit\": %llu,\n \"segments\": [",
      pool.device(), static_cast<unsigned long long>(info.used), static_cast<unsigned long long>(info.free),
      static_cast<unsigned long long>(info.pending), static_cast<unsigned long long>(info.total),
      static_cast<unsigned long long>(info.limit));
  for (size_t i = 0; i < blocks.size(); ++i) {
    const BlockInfo& b = blocks[i];
    const bool first = i == 0 || blocks[i - 1].segment != b.segment;
    const bool last = i + 1 == blocks.size() || blocks[i + 1].segment != b.segment;
    if (first)
      out += format("%s\n  {\"address\": %llu, \"size\": %llu, \"blocks\": [", i ? "," : "",
                    static_cast<unsigned long long>(b.segment), static_cast<unsigned long long>(b.segment_size));
    out +=
        format("%s\n    {\"address\": %llu, \"size\": %llu, \"requested\": %llu, \"state\": \"%s\", \"stream\": %llu}",
               first ? "" : ",", static_cast<unsigned long long>(b.address), static_cast<unsigned long long>(b.size),
               static_cast<unsigned long long>(b.requested), block_state_name(b.state),
               static_cast<unsigned long long>(reinterpret_cast<uintptr_t>(b.stream)));
    if (last) out += "]}";
  }
  out += "\n]}\n";
  std::FILE* f = std::fopen(path, "wb");
  if (!f) fail(GPUMEM_ERROR_IO, "cannot create the snapshot file %s: %s", path, std::strerror(errno));
  const bool written = std::fwrite(out.data(), 1, out.size(), f) == out.size();
  if (std::fclose(f) != 0 || !written)
    fail(GPUMEM_ERROR_IO, "writing the snapshot file %s failed: %s", path, std::strerror(errno));
}

}  // namespace gpumem::pool
