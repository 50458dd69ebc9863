// The caching pool. Manages address ranges its upstream allocator hands it, and knows nothing
// about CUDA: streams are only keys of arenas here.
#pragma once

#include <tsl/robin_map.h>

#include <array>
#include <memory>
#include <mutex>
#include <vector>

#include "alloc/allocator.hpp"
#include "alloc/stream_order.hpp"

namespace gpumem::pool {

// Sizes are rounded to this many bytes, and blocks are taken from the upstream at that size.
constexpr size_t kRound = 512;

// Whether an allocation may take memory another stream freed, when its own stream's arena has
// none that fits: never (CuPy's pools), with its stream waiting on a fence (no host wait), or
// after the host waits for the fence.
enum class StreamReuse { kNever, kFenceWait, kHostWait };

struct Info {
  uint64_t used = 0, free = 0, total = 0, free_blocks = 0, limit = 0;
  uint64_t pending = 0;  // freed, waiting for other streams' work before it can be handed out
  uint32_t arenas = 0;
};

class Pool final : public alloc::Allocator {
 public:
  // upstream is retained for the pool's life; limit 0 is none. Memory is ordered between streams
  // by the upstream's stream order (none: memory no stream's work touches), or by order for tests.
  // With an order, reuse across streams is by fence (kFenceWait) until set otherwise.
  Pool(alloc::Allocator* upstream, uint64_t limit);
  Pool(alloc::Allocator* upstream, uint64_t limit, alloc::StreamOrder* order);
  ~Pool() override;

  // Returns free whole blocks to the upstream: the stream's arena, or all of them.
  void release(gpumem_stream_t stream, bool all_streams);
  Info info();
  void set_limit(uint64_t limit);
  void set_stream_reuse(StreamReuse reuse);
  // Marks a live allocation as used on another stream too (PyTorch's record_stream): its free is
  // then fenced on that stream before the memory is handed out again.
  void record_stream(void* p, gpumem_stream_t stream);
  alloc::Allocator* upstream() const { return upstream_; }

  void live(uint64_t& count, uint64_t& bytes) override;
  void free_all_live() override;
  alloc::StreamOrder* stream_order() override { return order_; }
  // The pool's memory is its upstream's.
  void set_peer_access(int peer_device, bool enable) override { upstream_->set_peer_access(peer_device, enable); }
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
  using Fences = std::vector<alloc::StreamOrder::Fence>;
  struct Block {  // a whole upstream block, to be returned
    uintptr_t ptr;
    size_t size;
    Arena* arena;
  };
  // A chunk freed while other streams' work may still use it: free once its fences complete.
  struct Pending {
    Chunk* chunk;
    Fences fences;
  };

  Arena& arena_for(gpumem_stream_t stream);   // under mutex_
  Chunk* take(Arena& arena, size_t rounded);  // under mutex_: a free chunk of at least rounded, split to fit
  void* hand_out(Chunk* chunk, size_t size, gpumem_stream_t stream);  // under mutex_
  // Puts a chunk that was in use into its arena's free lists, merging it with free neighbours;
  // undo takes back a hand_out that did not reach the caller. Under mutex_; cannot fail.
  void finish_free(Chunk* chunk, bool undo);
  // Moves pending frees whose fences have completed to the free lists; with wait, the host waits
  // for every pending fence first. Calls the driver outside mutex_. True if any moved.
  bool settle_pending(bool wait);
  // An allocation from another stream's arena, ordered after that stream's work; NULL if none fits.
  void* take_across(Arena& own, size_t rounded, size_t size, gpumem_stream_t stream);
  // A free chunk that fits from an arena other than own that can be fenced; under mutex_.
  Chunk* take_from_other_stream(Arena& own, size_t rounded, Arena*& source);
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
  alloc::StreamOrder* const order_;
  StreamReuse reuse_;
  uint64_t limit_;
  uint64_t pending_ = 0;  // bytes being taken from the upstream right now, counted against the limit
  // Every chunk, free or in use, by address: a chunk enters when a block arrives or is split and
  // leaves when it is merged or returned, so a cached allocation and its free touch no map entry.
  tsl::robin_map<uintptr_t, Chunk*, alloc::AddressHash> chunks_;
  uint64_t live_count_ = 0;
  std::vector<Pending> pending_frees_;
  std::mutex settle_mutex_;  // held by settle_pending() across its driver calls; not on any fast path
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
