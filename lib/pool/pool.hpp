// The caching pool. Manages address ranges its upstream allocator hands it, and knows nothing
// about CUDA: streams are only keys of arenas here.
#pragma once

#include <tsl/robin_map.h>

#include <array>
#include <memory>
#include <vector>

#include "alloc/allocator.hpp"

namespace gpumem::pool {

// Sizes are rounded to this many bytes, and blocks are taken from the upstream at that size.
constexpr size_t kRound = 512;

struct Info {
  uint64_t used = 0, free = 0, total = 0, free_blocks = 0, limit = 0;
  uint32_t arenas = 0;
};

class Pool final : public alloc::Allocator {
 public:
  // upstream is retained for the pool's life; limit 0 is none.
  Pool(alloc::Allocator* upstream, uint64_t limit);
  ~Pool() override;

  // Returns free whole blocks to the upstream: the stream's arena, or all of them.
  void release(gpumem_stream_t stream, bool all_streams);
  Info info();
  void set_limit(uint64_t limit);
  alloc::Allocator* upstream() const { return upstream_; }

  void live(uint64_t& count, uint64_t& bytes) override;
  void free_all_live() override;
  // Checks every invariant of the pool's structures; throws GPUMEM_ERROR_INTERNAL naming the first
  // broken one. For tests and the fuzzer: it walks everything.
  void check_invariants();

  // The callbacks run before the last retry of an allocation that found no memory.
  using ReclaimRunner = void (*)(int device, size_t size);
  static void set_reclaim_runner(ReclaimRunner runner);

 protected:
  void* do_allocate(size_t size, gpumem_stream_t stream, size_t& mem_size) override;
  void do_deallocate(void* p, gpumem_stream_t stream) override;
  void sizes_of(void* p, size_t& size, size_t& mem_size) override;

 private:
  struct Chunk;
  struct Arena;
  struct Block {  // a whole upstream block, to be returned
    uintptr_t ptr;
    size_t size;
    Arena* arena;
  };

  Arena& arena_for(gpumem_stream_t stream);   // under mutex_
  Chunk* take(Arena& arena, size_t rounded);  // under mutex_: a free chunk of at least rounded, split to fit
  void* hand_out(Chunk* chunk, size_t size);  // under mutex_
  void insert_free(Arena& arena, Chunk* chunk, int size_class);
  void remove_free(Arena& arena, Chunk* chunk);
  Chunk* new_chunk();
  void delete_chunk(Chunk* chunk);
  void collect_whole_blocks(Arena& arena, std::vector<Block>& out);  // under mutex_
  void give_back(std::vector<Block>& blocks);
  // Room for the free blocks of the arenas a collection will visit (all, or the key's).
  void reserve_blocks(std::vector<Block>& blocks, const uintptr_t* key,
                      bool all_streams);  // without mutex_: to the upstream, re-caching failures
  void* grow(Arena*& arena, size_t size, size_t rounded, gpumem_stream_t stream, bool& over_limit);
  [[noreturn]] void fail_out_of_memory(size_t size, size_t rounded, const std::string& why);

  alloc::Allocator* const upstream_;
  uint64_t limit_;
  uint64_t pending_ = 0;  // bytes being taken from the upstream right now, counted against the limit
  // Every chunk, free or in use, by address: a chunk enters when a block arrives or is split and
  // leaves when it is merged or returned, so a cached allocation and its free touch no map entry.
  tsl::robin_map<uintptr_t, Chunk*, alloc::AddressHash> chunks_;
  uint64_t live_count_ = 0;
  std::vector<std::unique_ptr<Arena>> arenas_;
  Arena* last_arena_ = nullptr;  // most streams use one arena over and over
  std::vector<std::unique_ptr<Chunk[]>> chunk_slabs_;
  Chunk* spare_chunks_ = nullptr;
};

// The limit from GPUMEM_GPU_MEMORY_LIMIT, 0 if unset; device_total is asked only for a percentage.
// Throws on a value it cannot read.
uint64_t limit_from_environment(uint64_t (*device_total)(int device), int device);
// Parses the value of an environment variable: "1073741824", "8GiB", "512MB", or "50%" of
// device_total (refused when device_total is NULL).
uint64_t parse_limit(const char* variable, const char* text, uint64_t (*device_total)(int device), int device);

}  // namespace gpumem::pool
