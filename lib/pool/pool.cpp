#include "pool/pool.hpp"

#include <algorithm>
#include <atomic>
#include <cstring>

#include "gpumem/pool.h"
#include "pool/pool_parts.hpp"

namespace gpumem::pool {
namespace {

// The chunks scanned in the request's own class for the best fit, before moving up a class.
constexpr int kScan = 16;

// How far an arena's bytes in use may drop before it tells the peak counter; see publish().
constexpr uint64_t kPublishSlack = uint64_t{16} << 20;

// The thread's identity for last_publisher_.
thread_local char publisher_tag;

// Frees an arena keeps unmerged (see Pool::merge_deferred).
constexpr uint32_t kDeferred = 2;

// Chunk objects come in slabs, the first small (most streams need few), doubling up to kMaxSlab.
constexpr size_t kFirstSlab = 16, kMaxSlab = 256;

}  // namespace

Pool::Pool(alloc::Allocator* upstream, uint64_t limit) : Pool(upstream, limit, upstream->stream_order()) {}

Pool::Pool(alloc::Allocator* upstream, uint64_t limit, alloc::StreamOrder* order)
    : alloc::Allocator(upstream->device(), "pool"),
      upstream_(upstream),
      order_(order),
      ranges_(upstream->ranges()),
      reuse_(order ? StreamReuse::kFenceWait : StreamReuse::kNever),
      limit_(limit) {
  tables_.push_back(std::make_unique<ArenaTable>(16));
  table_.store(tables_.back().get(), std::memory_order_release);
  enlist(this);
  upstream_->retain();
  upstream_->add_pool();
}

Pool::~Pool() {
  try {
    settle_pending(true);
  } catch (...) {
    // A fence that cannot be waited for keeps its chunk; its block stays with the upstream.
  }
  try {
    return_cached_blocks(nullptr);
  } catch (...) {
    // The upstream refused some blocks back; nothing more can be done for them now.
  }
  for (auto& a : arenas_) drop_fences(*a);
  delist(this);
  upstream_->remove_pool();
  upstream_->unretain();
}

Pool::Chunk* Pool::new_chunk(Arena& arena) {
  if (!arena.spare_chunks) {
    const size_t n = std::min(kMaxSlab, kFirstSlab << std::min<size_t>(arena.chunk_slabs.size(), 8));
    auto slab = std::make_unique<Chunk[]>(n);
    room_for_one(arena.chunk_slabs);
    for (size_t i = 0; i < n; ++i) {
      slab[i].free_next = arena.spare_chunks;
      arena.spare_chunks = &slab[i];
    }
    arena.chunk_slabs.push_back(std::move(slab));
  }
  Chunk* c = arena.spare_chunks;
  arena.spare_chunks = c->free_next;
  std::memset(static_cast<void*>(c), 0, sizeof *c);
  c->arena = &arena;
  return c;
}

void Pool::delete_chunk(Arena& arena, Chunk* c) {
  c->free_next = arena.spare_chunks;
  arena.spare_chunks = c;
}

void Pool::insert_free(Arena& arena, Chunk* c, int cls) {
  c->cls = cls;
  c->free_prev = nullptr;
  c->free_next = arena.heads[cls];
  if (c->free_next) c->free_next->free_prev = c;
  arena.heads[cls] = c;
  arena.words[cls >> 6] |= uint64_t{1} << (cls & 63);
  arena.summary |= uint64_t{1} << (cls >> 6);
  ++arena.free_blocks;
  arena.free_bytes += c->size;
}

void Pool::remove_free(Arena& arena, Chunk* c) {
  if (c->deferred) {
    c->deferred = false;
    (c->defer_prev ? c->defer_prev->defer_next : arena.deferred) = c->defer_next;
    (c->defer_next ? c->defer_next->defer_prev : arena.deferred_last) = c->defer_prev;
    --arena.deferred_count;
  }
  const int cls = c->cls;
  if (c->free_prev) {
    c->free_prev->free_next = c->free_next;
  } else {
    arena.heads[cls] = c->free_next;
    if (!c->free_next) {
      arena.words[cls >> 6] &= ~(uint64_t{1} << (cls & 63));
      if (!arena.words[cls >> 6]) arena.summary &= ~(uint64_t{1} << (cls >> 6));
    }
  }
  if (c->free_next) c->free_next->free_prev = c->free_prev;
  --arena.free_blocks;
  arena.free_bytes -= c->size;
}

Pool::Chunk* Pool::take(Arena& arena, size_t rounded) {
  const int cls = size_class(rounded);
  Chunk* best = cls < kExactClasses ? arena.heads[cls] : nullptr;  // an exact class holds one size
  int scanned = 0;
  for (Chunk* c = best ? nullptr : arena.heads[cls]; c && scanned < kScan; c = c->free_next, ++scanned) {
    if (c->size >= rounded && (!best || c->size < best->size)) {
      best = c;
      if (c->size == rounded) break;
    }
  }
  if (!best) {
    // Every chunk of a higher class fits; the head of the lowest is the best-fitting class.
    const int higher = arena.find_from(cls + 1);
    if (higher >= 0) {
      best = arena.heads[higher];
    } else {
      // Nothing bigger: a fitting chunk may still lie deeper in the request's own class.
      for (Chunk* c = arena.heads[cls]; c; c = c->free_next)
        if (c->size >= rounded && (!best || c->size < best->size)) best = c;
      if (!best) return nullptr;
    }
  }
  if (best->deferred && best->size > rounded) {
    // Split, its remainder would lie unmerged beside a free neighbour: merged first, then looked
    // for again (the merged chunk fits, so this happens once).
    merge_one(arena, best);
    return take(arena, rounded);
  }
  Chunk* rest = nullptr;
  if (best->size > rounded) {  // the remainder is made and registered before any change: both may throw
    rest = new_chunk(arena);
    rest->ptr = best->ptr + rounded;
    rest->freed_seq = best->freed_seq;
    try {
      arena.chunks.emplace(rest->ptr, rest);
    } catch (...) {
      delete_chunk(arena, rest);
      throw;
    }
  }
  remove_free(arena, best);
  if (rest) {
    rest->size = best->size - rounded;
    rest->prev = best;
    rest->next = best->next;
    if (rest->next) rest->next->prev = rest;
    best->next = rest;
    best->size = rounded;
    insert_free(arena, rest, size_class(rest->size));
  }
  best->cls = cls;  // its size is now the request's: the class to free it into
  return best;
}

// The peak of bytes in use without a counter that every thread writes on every call: each arena
// adds to published_in_use_ when its bytes in use rise above what it last published, and takes
// away when they fall more than kPublishSlack below it, or at once when the thread that
// published last frees (with one arena, never: it publishes only values it had). The sum is never
// below the bytes in use, so the peak taken from it never is either. While a single thread uses
// the pool it is exact; with more threads, even taking turns, it may be over by up to
// kPublishSlack for each arena. Only the thread that published last writes the counter on every
// call; the others, none.
void Pool::publish(Arena& a) {
  const uint64_t delta = a.in_use - a.published;  // wraps for a drop: the atomic add wraps back
  a.published = a.in_use;
  const uint64_t total = published_in_use_.fetch_add(delta, std::memory_order_relaxed) + delta;
  if (last_publisher_.load(std::memory_order_relaxed) != &publisher_tag)
    last_publisher_.store(&publisher_tag, std::memory_order_relaxed);
  uint64_t peak = peak_in_use_.load(std::memory_order_relaxed);
  while (total > peak && !peak_in_use_.compare_exchange_weak(peak, total, std::memory_order_relaxed)) {
  }
}

void Pool::on_alloc(Arena& a, uint64_t mem_size, uint64_t asked) {
  a.in_use += mem_size;
  a.requested += asked;
  ++a.live;
  ++a.allocs;
  if (a.in_use > a.published) publish(a);
}

void Pool::on_free(Arena& a, uint64_t mem_size, uint64_t asked) {
  a.in_use -= mem_size;
  a.requested -= asked;
  --a.live;
  ++a.frees;
  if (a.published - a.in_use > kPublishSlack || (several_arenas_.load(std::memory_order_relaxed) &&
                                                 last_publisher_.load(std::memory_order_relaxed) == &publisher_tag))
    publish(a);
}

void* Pool::hand_out(Chunk* c, size_t size, gpumem_stream_t stream) {
  c->in_use = true;
  c->stream = stream;
  c->requested = size;
  on_alloc(*c->arena, c->size, size);
  return reinterpret_cast<void*>(c->ptr);
}

// The fast paths, do_allocate and do_deallocate, live here beside take() and finish_free(), so
// that the compiler inlines them.
void* Pool::do_allocate(size_t size, gpumem_stream_t stream, size_t& mem_size) {
  if (size > SIZE_MAX - (kRound - 1))
    fail(GPUMEM_ERROR_INVALID_ARGUMENT, "%s overflows rounding to %zu bytes", bytes(size).c_str(), kRound);
  const size_t rounded = (size + kRound - 1) / kRound * kRound;
  mem_size = rounded;
  const uintptr_t key = stream_key(stream);
  if (Arena* a = find_arena(key)) {
    std::lock_guard<SpinLock> lock(a->lock);
    // Found without a lock: it may have been retired, or serve another stream now.
    if (a->key() == key)
      if (Chunk* c = take(*a, rounded)) return hand_out(c, size, stream);
  }
  Arena& arena = pin_arena(stream);
  try {
    void* p = allocate_slow(arena, size, rounded, stream);
    unpin(arena);
    return p;
  } catch (...) {
    unpin(arena);  // a failed call leaves no arena behind for a new stream
    throw;
  }
}

Pool::Chunk* Pool::find_live(uintptr_t p, Arena* hint, ArenaLock& lock) {
  const auto not_owned = [p] [[noreturn]] {
    fail(GPUMEM_ERROR_NOT_OWNED, "%p was not allocated by this pool, or is freed already (out-of-pool memory)",
         reinterpret_cast<void*>(p));
  };
  const auto look = [&](Arena* a) -> Chunk* {
    lock = ArenaLock(a->lock);
    const auto it = a->chunks.find(p);
    if (it != a->chunks.end()) {
      if (it->second->in_use && !it->second->pending) return it->second;
      lock.unlock();
      not_owned();
    }
    lock.unlock();
    return nullptr;
  };
  if (hint)
    if (Chunk* c = look(hint)) return c;
  // Memory freed on another stream than the one it came from, or asked about without a stream:
  // the arena its segment belongs to. A live chunk's segment does not move meanwhile (only whole
  // free blocks do).
  if (Arena* a = segment_arena(p); a && a != hint)
    if (Chunk* c = look(a)) return c;
  not_owned();
}

void* Pool::grow(Arena& arena, size_t size, size_t rounded, gpumem_stream_t stream, bool& over_limit) {
  if (ranges_) return grow_in_place(arena, size, rounded, stream, over_limit);
  {
    std::lock_guard<SpinLock> lock(mutex_);
    if (!within_limit(rounded)) {
      over_limit = true;
      return nullptr;
    }
    growing_ += rounded;
  }
  const auto done_growing = [&] {
    std::lock_guard<SpinLock> lock(mutex_);
    growing_ -= rounded;
  };
  void* block = nullptr;
  try {
    block = from_upstream(rounded, stream, [&](uint64_t& bytes, uint64_t& calls) {
      void* b = upstream_->allocate(rounded, stream);
      bytes = rounded;
      calls = 1;
      return b;
    });
  } catch (...) {
    done_growing();
    throw;
  }
  record(trace::Event::kUpstreamAlloc, rounded, rounded, block, stream);
  const auto base = reinterpret_cast<uintptr_t>(block);
  bool refused = false;  // the upstream's block overlaps one the pool holds: not the pool's to give back
  void* p = nullptr;
  try {
    // The bytes count as held in the same step as they are handed out, so that info() never sees
    // more in use than held.
    std::lock_guard<SpinLock> lock(mutex_);
    ArenaLock own(arena.lock);
    try {
      add_segment(base, rounded, &arena);
    } catch (const Error&) {
      refused = true;
      throw;
    }
    Chunk* c = nullptr;
    try {
      c = new_chunk(arena);
      arena.chunks.emplace(base, c);
    } catch (...) {
      if (c) delete_chunk(arena, c);
      segments_.erase(base);
      throw;
    }
    c->ptr = base;
    c->size = rounded;
    c->cls = size_class(rounded);
    // In use on its stream again: a new stream at a destroyed one's address, which may lend.
    if (stream_key(stream) == arena.key()) arena.unfenceable = false;
    growing_ -= rounded;
    stats_.on_reserve(rounded);
    p = hand_out(c, size, stream);
  } catch (...) {
    done_growing();
    if (!refused) upstream_->deallocate(block, stream);
    throw;
  }
  return p;
}

void Pool::do_deallocate(void* p, gpumem_stream_t stream) {
  ArenaLock lock;
  Chunk* c = find_live(reinterpret_cast<uintptr_t>(p), find_arena(stream_key(stream)), lock);
  Arena& arena = *c->arena;
  // Work on the arena's own stream runs in order before its next user's: only other streams'
  // work needs a fence. Memory no stream's work touches (no order_) needs none.
  const bool foreign_free = order_ && stream_key(stream) != arena.key();
  // Handed out across streams. Never so on the per-thread stream, which only its arena uses.
  const bool foreign_alloc = order_ && c->stream != GPUMEM_STREAM_PER_THREAD && stream_key(c->stream) != arena.key();
  if (!foreign_free && !foreign_alloc && !(order_ && c->uses)) {
    // Over ranges every allocation splits what is free: deferred, a size freed and asked for again
    // costs what a block of its own size would. Blocks of their own sizes need no deferral.
    finish_free(c, false, ranges_ != nullptr);
    return;
  }
  std::vector<gpumem_stream_t> others;  // streams whose work may still use the memory
  if (foreign_free) others.push_back(stream);
  if (foreign_alloc && stream_key(c->stream) != stream_key(stream)) others.push_back(c->stream);
  if (c->uses)
    for (gpumem_stream_t u : *c->uses)
      if (stream_key(u) != arena.key() && stream_key(u) != stream_key(stream)) others.push_back(u);
  c->pending = true;  // a second free of it is refused from here on
  lock.unlock();
  Fences fences;
  try {
    fences.reserve(others.size());
    for (gpumem_stream_t other : others) fences.push_back(order_->record(other));
    std::lock_guard<SpinLock> shared(mutex_);
    room_for_one(pending_frees_);  // before fences move: a failure keeps them to release
    pending_frees_.push_back(Pending{c, std::move(fences)});
    // Counted as freed before a settler, which needs mutex_ to see it, can finish it.
    std::lock_guard<SpinLock> own(arena.lock);
    on_free(arena, c->size, c->requested);
    delete c->uses;
    c->uses = nullptr;
  } catch (...) {
    for (auto f : fences) order_->release(f);
    std::lock_guard<SpinLock> own(arena.lock);
    c->pending = false;  // still the caller's, as before the call
    throw;
  }
}

void Pool::absorb(Arena& arena, Chunk* keep, Chunk* gone) {
  keep->size += gone->size;
  keep->next = gone->next;
  if (keep->next) keep->next->prev = keep;
  arena.chunks.erase(gone->ptr);
  delete_chunk(arena, gone);
}

void Pool::finish_free(Chunk* c, bool undo, bool defer) {
  Arena& arena = *c->arena;
  if (!c->pending) {
    on_free(arena, c->size, c->requested);
    if (undo) {  // the allocation never reached its caller: it counts as neither
      --arena.allocs;
      --arena.frees;
    }
  }
  delete c->uses;
  c->uses = nullptr;
  c->in_use = false;
  c->pending = false;
  if (defer) {
    c->freed_at = arena.allocs;
    c->freed_seq = ++arena.free_seq;
    insert_free(arena, c, c->cls);
    c->deferred = true;
    c->defer_prev = nullptr;
    c->defer_next = arena.deferred;
    (c->defer_next ? c->defer_next->defer_prev : arena.deferred_last) = c;
    arena.deferred = c;
    // Only the last few stay unmerged: enough for a size freed and asked for again, few enough
    // that best fit still sees the merged memory (more left the replays' peaks measurably higher).
    if (++arena.deferred_count > kDeferred) merge_one(arena, arena.deferred_last);
    return;
  }
  c->freed_at = arena.allocs;
  c->freed_seq = ++arena.free_seq;
  merge_and_list(arena, c);
}

void Pool::merge_deferred(Arena& arena) {
  while (arena.deferred) merge_one(arena, arena.deferred);
}

void Pool::merge_one(Arena& arena, Chunk* c) {
  remove_free(arena, c);  // and out of the deferred list
  merge_and_list(arena, c);
}

Pool::Chunk* Pool::merge_and_list(Arena& arena, Chunk* c) {
  // Every free neighbour on either side (deferred ones may follow one another); the whole is as
  // recently used as the most recent of its parts.
  for (Chunk* n = c->next; n && !n->in_use && !n->hole; n = c->next) {
    remove_free(arena, n);
    c->freed_at = std::max(c->freed_at, n->freed_at);
    c->freed_seq = std::max(c->freed_seq, n->freed_seq);
    absorb(arena, c, n);
  }
  for (Chunk* pv = c->prev; pv && !pv->in_use && !pv->hole; pv = c->prev) {
    remove_free(arena, pv);
    pv->freed_at = std::max(pv->freed_at, c->freed_at);
    pv->freed_seq = std::max(pv->freed_seq, c->freed_seq);
    absorb(arena, pv, c);
    c = pv;
  }
  insert_free(arena, c, size_class(c->size));
  return c;
}

void Pool::sizes_of(void* p, size_t& size, size_t& mem_size) {
  size = mem_size = 0;
  try {
    ArenaLock lock;
    const Chunk* c = find_live(reinterpret_cast<uintptr_t>(p), nullptr, lock);
    size = c->requested;
    mem_size = c->size;
  } catch (const Error&) {
    // Not a live allocation of this pool: the free that follows says so.
  }
}

void Pool::set_limit(uint64_t limit) {
  std::lock_guard<SpinLock> lock(mutex_);
  limit_ = limit;
}

void Pool::set_soft_limit(uint64_t soft_limit) {
  std::lock_guard<SpinLock> lock(mutex_);
  if (limit_ && soft_limit > limit_)
    fail(GPUMEM_ERROR_INVALID_ARGUMENT, "soft_limit (%s) is above the pool's limit (%s)", bytes(soft_limit).c_str(),
         bytes(limit_).c_str());
  soft_limit_ = soft_limit;
}

}  // namespace gpumem::pool
