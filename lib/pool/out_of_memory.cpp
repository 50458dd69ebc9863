// Out of memory: the slow path of an allocation, from the cache to the upstream and back, and the
// return of cached blocks.
#include "pool/pool.hpp"

#include <algorithm>
#include <atomic>
#include <cstring>

#include "gpumem/pool.h"
#include "pool/pool_parts.hpp"

namespace gpumem::pool {
namespace {

std::atomic<Pool::ReclaimRunner> reclaim_runner{nullptr};

// The reclaim callbacks running on this thread: an allocation inside one does not run them again.
thread_local int reclaim_depth = 0;

}  // namespace

void Pool::set_reclaim_runner(ReclaimRunner runner) { reclaim_runner.store(runner); }

void* Pool::take_or_grow(Arena& arena, size_t size, size_t rounded, gpumem_stream_t stream, std::string& why) {
  {
    std::lock_guard<SpinLock> lock(arena.lock);
    merge_deferred(arena);
    if (Chunk* c = take(arena, rounded)) return hand_out(c, size, stream);
  }
  // Over ranges with page reclaim, another stream's free memory is lent in place first for a
  // request of a unit or more: a fence costs a few microseconds where moving the memory here
  // costs a remap per unit, and streams that take turns at the same memory would move it back and
  // forth (measured on bench_alloc's multi-stream pattern: 1.3-5 us a pair, against 8-27 us). A
  // smaller request grows its own arena instead, once, rather than paying a fence every time.
  if (ranges_ && rounded >= ranges_->unit() && reclaim_pages_.load(std::memory_order_relaxed))
    if (void* p = take_across(arena, rounded, size, stream)) return p;
  bool past_soft = false;
  {
    std::lock_guard<SpinLock> lock(mutex_);
    past_soft = soft_limit_ && stats_.reserved + growing_ + rounded > soft_limit_;
  }
  if (past_soft) {
    try {
      return_cached_blocks(nullptr);
    } catch (const Error&) {
      // A soft limit never refuses: what could not go back stays cached.
    }
  }
  bool over_limit = false;
  try {
    if (void* p = grow(arena, size, rounded, stream, over_limit)) return p;
    why = "the pool's limit";
  } catch (const Error& e) {
    if (e.status() != GPUMEM_ERROR_OUT_OF_MEMORY) throw;
    why = e.what();
  }
  return nullptr;
}

void* Pool::after_out_of_memory(Arena& arena, size_t size, size_t rounded, gpumem_stream_t stream, std::string& tried,
                                std::string& why, bool count_retry) {
  // A free piece of another stream's block may serve without the pool growing.
  if (void* p = take_across(arena, rounded, size, stream)) return p;
  // The host waits for the pending frees' fences (only those: no device-wide synchronize); what
  // they free, and every stream's free whole blocks, may then serve or go back to the upstream.
  bool settled = false;
  try {
    settled = settle_pending(true);
  } catch (const Error&) {
    // A fence that cannot be waited for keeps its chunk pending; the retry goes on.
  }
  if (settled)
    if (void* p = take_own_or_across(arena, size, rounded, stream)) return p;
  // Over ranges, free memory that queued work may still use is moved once its streams' events are
  // waited for, before any of it is unmapped (which synchronizes the device).
  const bool waited = wait_for_free_pages();
  if (waited)
    if (void* p = take_or_grow(arena, size, rounded, stream, why)) return p;
  if (count_retry) {
    std::lock_guard<SpinLock> lock(mutex_);
    ++stats_.retries;
  }
  uint64_t returned = 0;
  try {
    returned = return_cached_blocks(nullptr);
  } catch (const Error&) {
    // What the upstream would not take back stays cached; the retry goes on regardless.
  }
  tried += format(
      "looked in other streams' arenas, waited for the pending frees%s, returned %s cached bytes and "
      "tried again",
      waited ? " and for the streams' work on free memory, to move it" : "", grouped(returned).c_str());
  return take_or_grow(arena, size, rounded, stream, why);
}

void* Pool::take_own_or_across(Arena& arena, size_t size, size_t rounded, gpumem_stream_t stream) {
  {
    std::lock_guard<SpinLock> lock(arena.lock);
    merge_deferred(arena);
    if (Chunk* c = take(arena, rounded)) return hand_out(c, size, stream);
  }
  return take_block_across(arena, rounded, size, stream);
}

void* Pool::after_reclaim(Arena& arena, size_t size, size_t rounded, gpumem_stream_t stream, std::string& tried,
                          std::string& why) {
  const ReclaimRunner runner = reclaim_runner.load();
  if (!runner) return nullptr;
  if (reclaim_depth > 0) {
    tried += "; the reclaim callbacks were not run, as this allocation is made from inside one";
    return nullptr;
  }
  {
    std::lock_guard<SpinLock> lock(mutex_);
    ++stats_.retries;
  }
  struct Depth {
    Depth() { ++reclaim_depth; }
    ~Depth() { --reclaim_depth; }
  };
  {
    const Depth inside;
    runner(device(), size);
  }
  tried += "; ran the reclaim callbacks, ";
  if (void* p = take_own_or_across(arena, size, rounded, stream)) return p;
  return after_out_of_memory(arena, size, rounded, stream, tried, why, false);
}

void* Pool::allocate_slow(Arena& arena, size_t size, size_t rounded, gpumem_stream_t stream) {
  // Frees whose other streams have finished, then another stream's free memory, before the
  // upstream.
  bool has_pending;
  {
    std::lock_guard<SpinLock> lock(mutex_);
    has_pending = !pending_frees_.empty();
  }
  try {
    if (has_pending) settle_pending(false);
  } catch (const Error&) {
    // A fence the driver could not answer for keeps its chunk pending; this allocation goes on.
  }
  if (void* p = take_own_or_across(arena, size, rounded, stream)) return p;
  bool beyond_limit;
  const bool beyond_range = ranges_ && rounded > ranges_->range_size();
  {
    std::lock_guard<SpinLock> lock(mutex_);
    beyond_limit = limit_ && rounded > limit_;
    if (beyond_limit || beyond_range) ++stats_.ooms;
  }
  // Nothing could make room for it: refused before the cache is given back.
  if (beyond_limit) fail_out_of_memory(size, rounded, "the pool's limit, which the request alone exceeds", arena);
  if (beyond_range)
    fail_out_of_memory(size, rounded,
                       format("the size of an address range of the upstream %s allocator (range_size %s bytes), "
                              "which the request alone exceeds",
                              upstream_->kind(), grouped(ranges_->range_size()).c_str()),
                       arena);
  std::string why, tried;
  if (void* p = take_or_grow(arena, size, rounded, stream, why)) return p;
  // Out of memory: other streams' memory, the pending frees and the cache; then the reclaim
  // callbacks, and all of that again for what they freed, wherever they freed it. Never from
  // inside a callback: an allocation it makes fails here instead of running them again.
  if (void* p = after_out_of_memory(arena, size, rounded, stream, tried, why, true)) return p;
  if (void* p = after_reclaim(arena, size, rounded, stream, tried, why)) return p;
  if (ranges_) {
    // A range this call reserved may be left with nothing mapped: it goes back, so that the
    // failed call holds no more than before (and a new stream's arena is retired).
    try {
      unmap_free(arena);
    } catch (const Error&) {
      // It stays the pool's, to be returned by a later release.
    }
  }
  {
    std::lock_guard<SpinLock> lock(mutex_);
    ++stats_.ooms;
  }
  fail_out_of_memory(size, rounded, why + "; then the pool " + tried, arena);
}

namespace {

thread_local OutOfMemory thread_out_of_memory{sizeof(OutOfMemory), 0, GPUMEM_OOM_NONE, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};

// Which of the ways out would have served a failed allocation, and the bytes it names, from what
// the pool held.
void choose_way_out(OutOfMemory& f, uint64_t largest_other, uint64_t largest_pending) {
  const uint64_t free = f.free_pieces + f.free_whole;
  if (largest_other >= f.rounded)
    f.cause = GPUMEM_OOM_OTHER_STREAM, f.would_serve = largest_other;
  else if (largest_pending >= f.rounded)
    f.cause = GPUMEM_OOM_PENDING, f.would_serve = largest_pending;
  else if (free >= f.rounded)
    f.cause = GPUMEM_OOM_FRAGMENTED, f.would_serve = free;
  else if (f.limit && f.pool_bytes - f.free_whole + f.rounded > f.limit)
    f.cause = GPUMEM_OOM_LIMIT, f.would_serve = f.pool_bytes - f.free_whole + f.rounded;
  else
    f.cause = GPUMEM_OOM_IN_USE, f.would_serve = f.rounded - free;
}

}  // namespace

const OutOfMemory& last_out_of_memory() noexcept { return thread_out_of_memory; }

void Pool::fail_out_of_memory(size_t size, size_t rounded, const std::string& why, const Arena& own) {
  // Where the bytes the pool holds are, for the caller to see why they could not serve.
  OutOfMemory& f = thread_out_of_memory;
  f = OutOfMemory{sizeof(OutOfMemory), device(), GPUMEM_OOM_NONE, size, rounded, 0, 0, 0, 0, 0, 0, 0, 0};
  uint64_t largest_pending = 0, largest_own = 0, largest_other = 0;
  bool lending = false;
  {
    std::lock_guard<SpinLock> lock(mutex_);
    f.limit = limit_;
    f.pool_bytes = stats_.reserved;
    for (const Pending& p : pending_frees_) {
      f.pending += p.chunk->size;
      largest_pending = std::max<uint64_t>(largest_pending, p.chunk->size);
    }
    lending = order_ && reuse_.load(std::memory_order_relaxed) != StreamReuse::kNever;
    for (auto& a : arenas_) {
      std::lock_guard<SpinLock> arena_lock(a->lock);
      f.in_use += a->in_use;
      for (int cls = 0; cls < kClasses; ++cls)
        for (const Chunk* c = a->heads[cls]; c; c = c->free_next) {
          (c->prev || c->next ? f.free_pieces : f.free_whole) += c->size;
          uint64_t& largest = a.get() == &own ? largest_own : largest_other;
          largest = std::max<uint64_t>(largest, c->size);
        }
    }
  }
  f.largest_free = std::max(largest_own, largest_other);
  choose_way_out(f, largest_other, largest_pending);
  std::string remedy;
  switch (f.cause) {
    case GPUMEM_OOM_OTHER_STREAM:
      remedy = format("%s: another stream's arena has %s bytes free in one piece",
                      !order_   ? "the allocation on that stream (arenas over memory no stream uses do not lend)"
                      : lending ? "a stream that may borrow (not the per-thread default stream) from one that "
                                  "may lend (not destroyed)"
                                : "lending between streams (gpumem_pool_set_stream_reuse)",
                      grouped(largest_other).c_str());
      break;
    case GPUMEM_OOM_PENDING:
      remedy = "the end of the work on the streams that hold its pending frees";
      break;
    case GPUMEM_OOM_FRAGMENTED:
      remedy = format("free memory in one piece: %s bytes are free, the largest piece %s",
                      grouped(f.would_serve).c_str(), grouped(f.largest_free).c_str());
      break;
    case GPUMEM_OOM_LIMIT:
      remedy = "a limit of at least " + grouped(f.would_serve) + " bytes";
      break;
    default:
      remedy = "freeing " + grouped(f.would_serve) + " more bytes of what is in use";
  }
  const std::string where = device() >= 0 ? format("on device %d", device()) : std::string("of host memory");
  const std::string limit_text = f.limit ? "limit " + grouped(f.limit) : std::string("no limit");
  throw Error(GPUMEM_ERROR_OUT_OF_MEMORY,
              format("out of memory allocating %s (rounded to %s) from the pool %s: %s bytes in use, pool holds %s "
                     "bytes, %s; refused by %s. Of what the pool holds: %s in use, %s free in pieces of split "
                     "blocks, %s in whole free blocks, %s pending on other streams' work; it would have taken %s",
                     bytes(size).c_str(), grouped(rounded).c_str(), where.c_str(), grouped(f.in_use).c_str(),
                     grouped(f.pool_bytes).c_str(), limit_text.c_str(), why.c_str(), grouped(f.in_use).c_str(),
                     grouped(f.free_pieces).c_str(), grouped(f.free_whole).c_str(), grouped(f.pending).c_str(),
                     remedy.c_str()));
}

void Pool::collect_whole_blocks(Arena& arena, std::vector<Block>& out) {
  merge_deferred(arena);
  out.reserve(out.size() + arena.free_blocks);  // so that nothing below can throw half way
  for (int w = 0; w < kWords; ++w) {
    for (uint64_t bits = arena.words[w]; bits; bits &= bits - 1) {
      Chunk* c = arena.heads[(w << 6) + __builtin_ctzll(bits)];
      while (c) {
        Chunk* next = c->free_next;
        if (!c->prev && !c->next) {
          remove_free(arena, c);
          out.push_back(Block{c->ptr, c->size, &arena, arena.stream()});
          arena.chunks.erase(c->ptr);
          delete_chunk(arena, c);
        }
        c = next;
      }
    }
  }
}

uint64_t Pool::give_back(std::vector<Block>& blocks) {
  std::exception_ptr first;
  uint64_t returned = 0;
  for (const Block& b : blocks) {
    // Out of the segments' map before the upstream has it back: it may hand the same addresses
    // to another thread's growth at once.
    decltype(segments_)::node_type segment;
    {
      std::lock_guard<SpinLock> lock(mutex_);
      segment = segments_.extract(b.ptr);
    }
    const uint64_t t0 = now_ns();
    try {
      upstream_->deallocate(reinterpret_cast<void*>(b.ptr), b.stream);
      record(trace::Event::kUpstreamFree, b.size, b.size, reinterpret_cast<void*>(b.ptr), b.stream);
      returned += b.size;
      std::lock_guard<SpinLock> lock(mutex_);
      stats_.on_unreserve(b.size);
      growth_.returned_bytes += b.size;
      growth_.driver_ns += now_ns() - t0;
    } catch (...) {
      if (!first) first = std::current_exception();
      {
        std::lock_guard<SpinLock> lock(mutex_);
        segments_.insert(std::move(segment));  // its node: no allocation
      }
      // Still the pool's: cache it again rather than lose track of it.
      std::lock_guard<SpinLock> lock(b.arena->lock);
      Chunk* c = new_chunk(*b.arena);
      c->ptr = b.ptr;
      c->size = b.size;
      b.arena->chunks.emplace(c->ptr, c);
      insert_free(*b.arena, c, size_class(c->size));
    }
  }
  if (first) std::rethrow_exception(first);
  return returned;
}

uint64_t Pool::return_cached_blocks(const uintptr_t* key) {
  // The arenas are pinned while their blocks are in transit, so that a failure's re-caching finds
  // them still the same streams'; an arena left with nothing is retired after.
  std::vector<Arena*> arenas;
  {
    std::lock_guard<SpinLock> lock(mutex_);
    if (key) {
      if (Arena* a = find_arena(*key)) arenas.push_back(a);  // under mutex_: the key's own
    } else {
      arenas.reserve(arenas_.size());
      for (auto& a : arenas_) arenas.push_back(a.get());
    }
    for (Arena* a : arenas) {
      std::lock_guard<SpinLock> own(a->lock);
      ++a->pins;
    }
  }
  std::exception_ptr first;
  uint64_t returned = 0;
  for (Arena* a : arenas) {
    std::vector<Block> blocks;
    try {
      if (ranges_) {
        returned += unmap_free(*a);
      } else {
        {
          std::lock_guard<SpinLock> lock(a->lock);
          collect_whole_blocks(*a, blocks);
        }
        returned += give_back(blocks);
      }
    } catch (...) {
      if (!first) first = std::current_exception();
    }
    unpin(*a);
  }
  if (first) std::rethrow_exception(first);
  return returned;
}

void Pool::release(gpumem_stream_t stream, bool all_streams) {
  // Frees whose other streams have finished are free memory to the caller, so they go back too;
  // the host does not wait for the others. A fence the driver cannot answer for keeps its chunk
  // pending and is reported after the rest is returned.
  std::exception_ptr unsettled;
  try {
    settle_pending(false);
  } catch (const Error&) {
    unsettled = std::current_exception();
  }
  const uintptr_t key = stream_key(stream);
  return_cached_blocks(all_streams ? nullptr : &key);
  if (unsettled) std::rethrow_exception(unsettled);
}

}  // namespace gpumem::pool
