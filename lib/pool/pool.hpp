// The caching pool. Manages address ranges its upstream allocator hands it, and knows nothing
// about CUDA: streams are only keys of arenas here.
#pragma once

#include <tsl/robin_map.h>

#include <array>
#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "alloc/allocator.hpp"
#include "alloc/stream_order.hpp"
#include "gpumem/experimental.h"

namespace gpumem::pool {

// Sizes are rounded to this many bytes, and blocks are taken from the upstream at that size.
constexpr size_t kRound = 512;

// Whether an allocation may take memory another stream freed, when its own stream's arena has
// none that fits: never (CuPy's pools), with its stream waiting on a fence (no host wait), or
// after the host waits for the fence.
enum class StreamReuse { kNever, kFenceWait, kHostWait };

// One chunk of a snapshot, in its upstream block (segment).
struct BlockInfo {
  uintptr_t segment, address;
  size_t segment_size, size, requested;
  int state;  // GPUMEM_BLOCK_*
  gpumem_stream_t stream;
};

// What growth has cost (gpumem_pool_growth_info_t).
struct Growth {
  uint64_t mapped_bytes = 0, map_calls = 0, moved_bytes = 0, move_calls = 0, returned_bytes = 0;
  uint64_t fences_recorded = 0, driver_ns = 0;
};

struct Info {
  uint64_t used = 0, free = 0, total = 0, free_blocks = 0, limit = 0;
  uint64_t addresses = 0;  // the segments' addresses: total, plus over ranges those unmapped
  uint64_t pending = 0;    // freed, waiting for other streams' work before it can be handed out
  uint32_t arenas = 0;
};

// Arenas: one per stream that holds memory of the pool. An arena that holds nothing (no memory in
// use, cached or pending, and no call working on it) is retired at once and its object reused for
// the next new stream, so streams that come and go cost nothing once their memory is gone.
//
// Locking: each arena has its own lock over its free lists, its chunks and the counts of what was
// handed out from it, so threads on different streams never wait for each other on a cached
// allocation. The pool's mutex_ guards what is shared: the arena list, the upstream's bytes and
// the limit, and the pending frees. A thread may take an arena's lock while holding mutex_, never
// the other way round, and never holds either across a call out of the pool.
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
  Growth growth();
  // Every chunk, by segment and address, at one moment.
  std::vector<BlockInfo> snapshot();
  void set_limit(uint64_t limit);
  // Before growing past soft_limit (0: none), the pool gives back what it caches; never refuses.
  void set_soft_limit(uint64_t soft_limit);
  void set_stream_reuse(StreamReuse reuse);
  // Over ranges: whether growth first moves whole free units, of any arena, to where memory is
  // needed (page reclaim; on by default).
  void set_page_reclaim(bool on) { reclaim_pages_.store(on, std::memory_order_relaxed); }
  bool page_reclaim() const { return reclaim_pages_.load(std::memory_order_relaxed); }
  // Marks a live allocation as used on another stream too (PyTorch's record_stream): its free is
  // then fenced on that stream before the memory is handed out again.
  void record_stream(void* p, gpumem_stream_t stream);
  alloc::Allocator* upstream() const { return upstream_; }

  alloc::Stats stats() override;
  void reset_peaks() override;
  void live(uint64_t& count, uint64_t& bytes) override;
  void free_all_live() override;
  alloc::StreamOrder* stream_order() override { return order_; }
  // The pool's memory is its upstream's.
  void set_peer_access(int peer_device, bool enable) override { upstream_->set_peer_access(peer_device, enable); }
  // The upstream's allocation (or, over ranges, range) that holds p, as the upstream shares it.
  alloc::SharedExtent shared_extent(uintptr_t p) override;
  int shared_fd(uintptr_t unit) override { return upstream_->shared_fd(unit); }
  // Whether p lies in a block (or address range) the pool holds from its upstream, cached or in use.
  bool holds(const void* p);
  // A live pool built on upstream that holds p, or NULL: the upstream must not take p back from
  // anyone but that pool.
  static Pool* holder_of(const alloc::Allocator* upstream, const void* p);
  // A free by a caller (gpumem_free, the drop-ins), not by a pool: refused with NOT_OWNED, naming
  // the pool, if a pool built on a holds p; an upstream takes a pool's memory back only from it.
  static void free_from_caller(alloc::Allocator* a, void* p, gpumem_stream_t stream);
  // Refuses with NOT_OWNED memory of a that a pool built on a, or a tenant of a, holds: what its
  // caller may not free (nor export) through a.
  static void refuse_if_held_above(const alloc::Allocator* a, const void* p);
  // Checks every invariant of the pool's structures; throws GPUMEM_ERROR_INTERNAL naming the first
  // broken one. For tests and the fuzzer: it walks everything, and wants no other call running.
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
  struct ArenaTable;
  using Fences = std::vector<alloc::StreamOrder::Fence>;
  struct Block {  // a whole upstream block, to be returned
    uintptr_t ptr;
    size_t size;
    Arena* arena;  // pinned while the block is in transit
    gpumem_stream_t stream;
  };
  struct Segment {  // an upstream block, or over ranges an address range
    size_t size;
    Arena* arena;  // whose chunks cover it; changes only when a whole free block moves
  };
  // A chunk freed while other streams' work may still use it: free once its fences complete.
  struct Pending {
    Chunk* chunk;
    Fences fences;
  };
  using ArenaLock = std::unique_lock<SpinLock>;

  Arena* find_arena(uintptr_t key) const;  // without locks, a hint: see ArenaTable
  // The stream's arena, made if it has none, pinned against retirement until unpin().
  Arena& pin_arena(gpumem_stream_t stream);
  void unpin(Arena& arena);
  Arena* make_arena(uintptr_t key, gpumem_stream_t stream);  // under mutex_
  // Retires the arena if it holds nothing and nothing has it pinned: at once, or (retire_later)
  // when the next new stream's arena is made, so that a stream whose last block another stream
  // took keeps, for a while, what the lending policy knows of it. The first takes mutex_ and the
  // arena's lock; the others want mutex_ held.
  void retire_if_empty(Arena& arena) noexcept;
  void retire_locked(Arena& arena) noexcept;
  void retire_later(Arena& arena) noexcept;
  static void enlist(Pool* pool);  // into the list holder_of() reads
  static void delist(Pool* pool);
  // Every arena not retired. Their objects stay valid, but one may be retired meanwhile.
  std::vector<Arena*> all_arenas();
  // The arena whose chunks cover p, by the segments' map; NULL if no segment holds p.
  Arena* segment_arena(uintptr_t p);
  // Lists a new segment; refuses (INTERNAL) one that overlaps a segment the pool holds or wraps
  // past the end of the address space, which only a broken upstream hands out. Under mutex_.
  void add_segment(uintptr_t base, size_t size, Arena* arena);
  // The live chunk at p, with its arena locked in lock; looks in hint's arena first. Throws
  // NOT_OWNED.
  Chunk* find_live(uintptr_t p, Arena* hint, ArenaLock& lock);
  // Under the arena's lock: a free chunk of at least rounded, split to fit.
  Chunk* take(Arena& arena, size_t rounded);
  void* hand_out(Chunk* chunk, size_t size, gpumem_stream_t stream);  // under its arena's lock
  // Puts a chunk that was in use into its arena's free lists, merging it with free neighbours;
  // undo takes back a hand_out that did not reach the caller. Under the arena's lock; cannot fail.
  void finish_free(Chunk* chunk, bool undo, bool defer = false);
  // A free on the fast path is deferred: listed at its own size without merging, so that a
  // request of the same size takes it back whole, as from blocks of exact sizes, instead of
  // splitting it off its neighbour again; the oldest of more than a few is merged. Whoever looks for more than one
  // chunk's worth (the slow path, lending, returning or moving memory) merges the arena's deferred chunks first. Under
  // the arena's lock.
  void merge_deferred(Arena& arena);
  void merge_one(Arena& arena, Chunk* deferred);  // merges one deferred chunk with its free neighbours
  // Merges c, free and in no list, with every free neighbour and lists the whole; returns it.
  Chunk* merge_and_list(Arena& arena, Chunk* c);
  // keep, under its arena's lock, takes in its next neighbour gone, which leaves the segment.
  void absorb(Arena& arena, Chunk* keep, Chunk* gone);
  // Moves pending frees whose fences have completed to the free lists; with wait, the host waits
  // for every pending fence first. Calls the driver outside the locks. True if any moved.
  bool settle_pending(bool wait);
  // Another stream's free whole block of at least rounded, moved into own once stream waits for
  // that stream's work, then allocated from; NULL if none fits.
  void* take_block_across(Arena& own, size_t rounded, size_t size, gpumem_stream_t stream);
  // A piece of another stream's block, lent for one allocation and returned to that stream's
  // arena by its free; for when the pool cannot grow. NULL if none fits.
  void* take_across(Arena& own, size_t rounded, size_t size, gpumem_stream_t stream);
  // Whether source's memory may be lent to stream: not when reuse is kNever, nor across the
  // per-thread default stream, which names another stream on every thread.
  bool may_lend(const Arena& source, const Arena& own, gpumem_stream_t stream) const;
  bool may_borrow(gpumem_stream_t stream) const;  // whether any stream's memory may be lent to stream
  // Orders stream after the work queued so far on source's stream, as the reuse policy says.
  // False when that cannot be done; source is then marked unfenceable if its stream is gone.
  bool fence_after(Arena& source, gpumem_stream_t stream);
  void insert_free(Arena& arena, Chunk* chunk, int size_class);
  void remove_free(Arena& arena, Chunk* chunk);
  Chunk* new_chunk(Arena& arena);
  void delete_chunk(Arena& arena, Chunk* chunk);
  // Takes the arena's free whole blocks out of it; under its lock. Throws only before any change.
  void collect_whole_blocks(Arena& arena, std::vector<Block>& out);
  // Without locks: to the upstream, re-caching failures. Returns the bytes given back.
  uint64_t give_back(std::vector<Block>& blocks);
  // Returns the free whole blocks of every arena, or of the key's; throws the first failure once
  // all arenas were visited. Returns the bytes given back (or unmapped).
  uint64_t return_cached_blocks(const uintptr_t* key);
  // do_allocate when the stream's arena has nothing that fits: the ladder of out_of_memory.cpp.
  void* allocate_slow(Arena& arena, size_t size, size_t rounded, gpumem_stream_t stream);
  // The arena's own cache, then a whole free block of another stream's.
  void* take_own_or_across(Arena& arena, size_t size, size_t rounded, gpumem_stream_t stream);
  // One rung of it: a free piece of another stream, the pending frees waited for, cached blocks
  // returned, then the arena's cache and growing again (a retry, counted if count_retry). Appends
  // to tried what it did.
  void* after_out_of_memory(Arena& arena, size_t size, size_t rounded, gpumem_stream_t stream, std::string& tried,
                            std::string& why, bool count_retry);
  // The reclaim callbacks (unless none is registered, or this thread is inside one), then the
  // arena, other streams' memory and after_out_of_memory() again, for what they freed.
  void* after_reclaim(Arena& arena, size_t size, size_t rounded, gpumem_stream_t stream, std::string& tried,
                      std::string& why);
  // The arena's cache, then the upstream; sets why when the upstream or the limit refuses.
  void* take_or_grow(Arena& arena, size_t size, size_t rounded, gpumem_stream_t stream, std::string& why);
  void* grow(Arena& arena, size_t size, size_t rounded, gpumem_stream_t stream, bool& over_limit);

  // Over an upstream with address ranges (grow_in_place.cpp): each arena's segments are ranges of
  // addresses whose unmapped parts are hole chunks, so neighbouring free memory always merges and
  // growing maps memory next to what is free instead of making a new segment.
  struct Placement;
  // grow() over ranges: maps memory into the hole run that needs the least, reserving a new range
  // when no run can hold the request, and allocates there.
  void* grow_in_place(Arena& arena, size_t size, size_t rounded, gpumem_stream_t stream, bool& over_limit);
  // Under the arena's lock: the run of free chunks and holes that holds rounded bytes with the
  // fewest bytes to map; false if none can.
  bool place(Arena& arena, size_t rounded, Placement& out) const;
  // Under the locks: splits the placement's holes at the unit bounds of what is to be mapped and
  // takes the region's chunks out of the lists (in transit). Returns the parts to map.
  // Fresh chunk objects are set aside in spares too, one for each hole.
  std::vector<Chunk*> take_for_mapping(Arena& arena, const Placement& at, size_t rounded, std::vector<Chunk*>& spares);
  // The placement's chunks in transit, a new range reserved if no run can hold rounded; sets
  // over_limit, taking nothing, when a new range would be beyond the limit.
  void place_in_transit(Arena& arena, size_t rounded, Placement& at, std::vector<Chunk*>& transit,
                        std::vector<Chunk*>& spares, bool& over_limit);
  template <class Work>
  void* from_upstream(uint64_t asked, gpumem_stream_t stream, Work&& work);  // see pool_parts.hpp
  // The limit's check of growth, for both kinds: whether bytes more may be taken from the upstream
  // beside what the pool holds and what other threads are taking; under mutex_.
  bool within_limit(uint64_t bytes) const {
    return !limit_ || (bytes <= limit_ && stats_.reserved + growing_ + bytes <= limit_);
  }
  // Maps the holes among transit's chunks past what filled_of says is mapped already (bytes of
  // them), with the hooks and trace records of growth; a hole mapped to its end is marked mapped.
  // Stops at the first failure. Returns the bytes mapped.
  uint64_t map_holes(const std::vector<Chunk*>& transit, const std::vector<size_t>& filled_of, uint64_t bytes,
                     gpumem_stream_t stream, std::exception_ptr& failure);
  // Under the arena's lock: lists the region's chunks again, free where mapped and holes where not,
  // a hole mapped in part split where its mapping ends (with one of spares).
  void settle_region(Arena& arena, const std::vector<Chunk*>& transit, const std::vector<size_t>& filled_of,
                     std::vector<Chunk*>& spares);
  // Splits c at offset into fresh, which becomes the upper part: registered and linked, with c's
  // flags and in no list. The chunk map must have room (reserved).
  Chunk* split(Arena& arena, Chunk* c, size_t offset, Chunk* fresh);
  // Takes [lo, hi) out of free chunk c into transit, what lies around it listed free again; uses up
  // to two of fresh (popped from the back). Under the arena's lock. Returns the part in transit.
  Chunk* cut_out(Arena& arena, Chunk* c, uintptr_t lo, uintptr_t hi, std::vector<Chunk*>& fresh);
  // Fresh chunk objects for splits, taken before any change; returned with delete_chunk.
  std::vector<Chunk*> fresh_chunks(Arena& arena, size_t count);
  // Under the arena's lock: makes a chunk that was in transit free (mapped) or a hole, merging it
  // with neighbours of the same kind and listing it. Returns the chunk that holds it.
  Chunk* settle_chunk(Arena& arena, Chunk* c, bool hole);
  void insert_hole(Arena& arena, Chunk* c);
  void remove_hole(Arena& arena, Chunk* c);
  // Unmaps the whole units of every free chunk of the arena, and unreserves its ranges that are
  // then wholly unmapped. Throws the first failure once done; what failed stays cached.
  uint64_t unmap_free(Arena& arena);  // returns the bytes unmapped
  // Unreserves the arena's ranges that have nothing mapped; throws the first failure once done.
  void unreserve_empty_ranges(Arena& arena);

  // Page reclaim (reclaim.cpp): memory that growth over ranges would map is first moved from the
  // whole units inside free chunks, of any arena, that the GPU is done with — checked by fences
  // on each arena's stream, never waited for — so that free memory anywhere serves a request
  // anywhere and the pool maps new memory only for what no free unit can give.
  struct Donor {
    Arena* arena;  // pinned until given back
    Chunk* chunk;  // whole units, in transit
    size_t moved;  // bytes from its start moved away (now holes)
    Chunk* spare;  // for the split between what moved and what did not
  };
  // Takes up to want bytes (whole units) into donors, from other arenas first, oldest freed first.
  uint64_t take_pages(Arena& own, uint64_t want, std::vector<Donor>& donors) noexcept;
  uint64_t take_pages_from(Arena& arena, uint64_t want, std::vector<Donor>& donors);
  // Moves donors' units into the holes among transit's chunks (in order): a hole filled whole is
  // marked mapped, and filled_of[i] is set to the bytes from the start of transit[i] that are
  // mapped now. Returns the bytes still to map. Stops at the first failure, stored in failure.
  uint64_t move_pages(std::vector<Donor>& donors, const std::vector<Chunk*>& transit, std::vector<size_t>& filled_of,
                      std::exception_ptr& failure);
  // What moved away becomes holes, the rest free again; unpins the arenas.
  void return_pages(std::vector<Donor>& donors) noexcept;
  // Moves done_seq up to the fences that completed, without waiting.
  void poll_fences(Arena& arena);
  // Records a fence on the arena's stream if free memory waits for one and there is room.
  void fence_free_pages(Arena& arena);
  // Every arena not retired, each pinned (unpin() each).
  std::vector<Arena*> pin_all();
  // Out of memory over ranges: the host waits for the events that cover each arena's free memory
  // (each stream's work, not the device's), so that growth may move all of it. True if any did.
  bool wait_for_free_pages();
  // Under the arena's lock: takes its fence if it is still f (another thread may have taken it),
  // moving done_seq up to what it covered if done. True if it took it.
  bool retire_fence(Arena& arena, alloc::StreamOrder::Fence f, bool done) noexcept;
  // Releases the arena's fence; under its lock, when it holds nothing (retired, or the pool going).
  void drop_fences(Arena& arena) noexcept;
  void reserve_range(Arena& arena);
  // Throws OUT_OF_MEMORY with where the held bytes are and what would have served the request.
  [[noreturn]] void fail_out_of_memory(size_t size, size_t rounded, const std::string& why, const Arena& own);
  // The arena's bytes in use as counted into published_in_use_, and the peak; under its lock.
  void publish(Arena& arena);
  void on_alloc(Arena& arena, uint64_t mem_size, uint64_t asked);
  void on_free(Arena& arena, uint64_t mem_size, uint64_t asked);

  // Read on every call, written rarely: a cache line of their own, apart from the counters below
  // and from the fields the base class writes under mutex_.
  alignas(64) alloc::Allocator* const upstream_;
  alloc::StreamOrder* const order_;
  alloc::Ranges* const ranges_;  // the upstream's, if it has them: segments grow in place
  std::atomic<ArenaTable*> table_{nullptr};
  std::atomic<bool> several_arenas_{false};
  std::atomic<StreamReuse> reuse_;
  std::atomic<bool> reclaim_pages_{true};  // over ranges: growth moves free units first (reclaim.cpp)
  // Read on every free, written when another thread publishes (rarely, in a steady state).
  alignas(64) std::atomic<const void*> last_publisher_{nullptr};  // the thread that published last
  // Bytes in use for the peak: the sum of what each arena last published, which is never below
  // what it has in use. See publish().
  alignas(64) std::atomic<uint64_t> published_in_use_{0};
  std::atomic<uint64_t> peak_in_use_{0};
  alignas(64) uint64_t limit_;
  uint64_t soft_limit_ = 0;  // under mutex_
  uint64_t growing_ = 0;     // bytes being taken from the upstream right now, counted against the limit
  uint64_t addresses_ = 0;   // over ranges: bytes of addresses reserved
  Growth growth_;            // under mutex_
  // Adds the nanoseconds since t0 to growth_.driver_ns.
  void count_driver_time(uint64_t t0) noexcept;
  std::vector<Pending> pending_frees_;
  std::mutex settle_mutex_;  // held by settle_pending() across its driver calls; not on any fast path
  std::vector<std::unique_ptr<Arena>> arenas_;        // not retired, each at its index
  std::vector<std::unique_ptr<Arena>> spare_arenas_;  // retired, for new streams
  uint64_t retired_allocs_ = 0, retired_frees_ = 0;   // the counts of arenas since retired
  std::map<uintptr_t, Segment> segments_;             // by base address
  std::vector<Arena*> emptied_;                       // arenas that may hold nothing, to retire
  std::vector<std::unique_ptr<ArenaTable>> tables_;   // the current one last; older ones kept for readers
};

// The figures of the calling thread's last out-of-memory failure of a pool, as
// gpumem_last_out_of_memory() gives them (cause GPUMEM_OOM_NONE before the first).
using OutOfMemory = gpumem_out_of_memory_info_t;
const OutOfMemory& last_out_of_memory() noexcept;

// Writes the pool's snapshot to path as JSON ("format": "gpumem-pool-snapshot"); IO on failure.
void write_snapshot_json(Pool& pool, const char* path);

}  // namespace gpumem::pool
