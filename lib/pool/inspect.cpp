// What the pool holds: statistics, info, snapshots and the invariant walk.
#include "pool/pool.hpp"

#include <algorithm>
#include <atomic>
#include <cstring>

#include "gpumem/pool.h"
#include "pool/pool_parts.hpp"

namespace gpumem::pool {

alloc::Stats Pool::stats() {
  // Under mutex_, so that no arena retires (moving its counts) while they are added up.
  std::lock_guard<SpinLock> lock(mutex_);
  alloc::Stats s = stats_;
  s.allocs += retired_allocs_;
  s.frees += retired_frees_;
  for (auto& a : arenas_) {
    std::lock_guard<SpinLock> own(a->lock);
    s.in_use += a->in_use;
    s.requested += a->requested;
    s.allocs += a->allocs;
    s.frees += a->frees;
  }
  s.peak_in_use = std::max(peak_in_use_.load(std::memory_order_relaxed), s.in_use);
  return s;
}

void Pool::reset_peaks() {
  std::lock_guard<SpinLock> lock(mutex_);
  stats_.peak_reserved = stats_.reserved;
  // Every arena held at once, so that no allocation raises the peak between the publishing and
  // the store that would overwrite it.
  std::vector<ArenaLock> locks;
  locks.reserve(arenas_.size());
  uint64_t in_use = 0;
  for (auto& a : arenas_) {
    locks.emplace_back(a->lock);
    publish(*a);  // exact again, for the new peak to start from
    in_use += a->in_use;
  }
  peak_in_use_.store(in_use, std::memory_order_relaxed);
}

Info Pool::info() {
  Info i;
  std::lock_guard<SpinLock> lock(mutex_);
  i.total = stats_.reserved;
  i.addresses = ranges_ ? addresses_ : stats_.reserved;
  i.limit = limit_;
  i.arenas = static_cast<uint32_t>(arenas_.size());
  for (const Pending& p : pending_frees_) i.pending += p.chunk->size;
  // Every arena held at once: a block moving between two arenas is counted once, and used, free
  // and pending never add up to more than the total (memory is counted as held before it is
  // handed out or listed free, and after it leaves).
  std::vector<ArenaLock> locks;
  locks.reserve(arenas_.size());
  for (auto& a : arenas_) {
    locks.emplace_back(a->lock);
    i.used += a->in_use;
    i.free += a->free_bytes;
    i.free_blocks += a->free_blocks;
  }
  return i;
}

std::vector<BlockInfo> Pool::snapshot() {
  std::vector<BlockInfo> out;
  std::lock_guard<SpinLock> lock(mutex_);
  std::vector<ArenaLock> locks;  // every arena at once: one moment
  locks.reserve(arenas_.size());
  size_t chunks = 0;
  for (auto& a : arenas_) {
    locks.emplace_back(a->lock);
    chunks += a->chunks.size();
  }
  out.reserve(chunks);
  for (auto& a : arenas_)
    for (const auto& [ptr, first] : a->chunks) {
      if (first->prev) continue;  // segments are walked from their first chunk
      size_t segment_size = 0;
      for (const Chunk* c = first; c; c = c->next) segment_size += c->size;
      for (const Chunk* c = first; c; c = c->next) {
        const int state = c->pending  ? GPUMEM_BLOCK_PENDING
                          : c->in_use ? GPUMEM_BLOCK_IN_USE
                          : c->hole   ? GPUMEM_BLOCK_UNMAPPED
                                      : GPUMEM_BLOCK_FREE;
        out.push_back(BlockInfo{first->ptr, c->ptr, segment_size, c->size,
                                state == GPUMEM_BLOCK_IN_USE ? c->requested : 0, state,
                                state == GPUMEM_BLOCK_IN_USE ? c->stream : a->stream()});
      }
    }
  std::sort(out.begin(), out.end(), [](const BlockInfo& x, const BlockInfo& y) { return x.address < y.address; });
  return out;
}

void Pool::live(uint64_t& count, uint64_t& bytes) {
  count = bytes = 0;
  for (Arena* a : all_arenas()) {
    std::lock_guard<SpinLock> lock(a->lock);
    count += a->live;
    bytes += a->in_use;
  }
}

void Pool::free_all_live() {
  for (Arena* a : all_arenas()) {
    std::lock_guard<SpinLock> lock(a->lock);
    std::vector<uintptr_t> live;
    live.reserve(a->live);
    for (const auto& [ptr, chunk] : a->chunks)
      if (chunk->in_use && !chunk->pending) live.push_back(ptr);
    // forced: no stream's work counts any more. Looked up again: merging erases neighbours.
    for (uintptr_t p : live) finish_free(a->chunks.at(p), false);
  }
}

void Pool::check_invariants() {
  std::lock_guard<SpinLock> lock(mutex_);
  std::vector<ArenaLock> locks;  // every arena held at once, for one consistent picture
  for (auto& a : arenas_) locks.emplace_back(a->lock);
  const auto broken = [](const char* what) { fail(GPUMEM_ERROR_INTERNAL, "pool invariant broken: %s", what); };
  uint64_t free_total = 0, used_total = 0, block_total = 0, pending_total = 0, pending_chunks = 0;
  uint64_t published_total = 0, arenas_in_table = 0, hole_total = 0;
  const ArenaTable* table = table_.load(std::memory_order_relaxed);
  uint64_t slots_used = 0;
  for (size_t i = 0; i <= table->mask; ++i) {
    const bool tombstone = table->slots[i].key.load() == ArenaTable::kGone;
    arenas_in_table += table->slots[i].arena.load() != nullptr && !tombstone;
    slots_used += table->slots[i].arena.load() != nullptr;
  }
  if (arenas_in_table != arenas_.size() || table->live != arenas_.size()) broken("the arena table misses an arena");
  if (slots_used != table->used || 2 * table->used > table->mask + 1) broken("the arena table is over half full");
  for (auto& spare : spare_arenas_) {
    if (!spare->retired || !spare->chunks.empty() || spare->in_use || spare->live || spare->free_blocks || spare->pins)
      broken("a retired arena holds something");
    if (find_arena(spare->key()) == spare.get()) broken("a retired arena can be found by its key");
  }
  std::map<uintptr_t, Segment> segments;  // what the chunks say the segments are
  for (size_t i = 0; i < arenas_.size(); ++i) {
    auto& arena = arenas_[i];
    if (arena->retired || arena->index != i) broken("a listed arena is retired or misplaced");
    for (const auto& [ptr, c] : arena->chunks)
      if (!c->prev) {
        size_t size = 0;
        for (const Chunk* k = c; k; k = k->next) size += k->size;
        segments.emplace(ptr, Segment{size, arena.get()});
      }
  }
  if (segments.size() != segments_.size()) broken("the segments map disagrees with the arenas' blocks");
  for (auto it = segments.begin(), at = segments_.begin(); it != segments.end(); ++it, ++at)
    if (it->first != at->first || it->second.size != at->second.size || it->second.arena != at->second.arena)
      broken("the segments map disagrees with the arenas' blocks");
  for (auto& arena : arenas_) {
    if (find_arena(arena->key()) != arena.get()) broken("an arena cannot be found by its key");
    uint64_t blocks = 0, bytes_free = 0;
    for (int cls = 0; cls < kClasses; ++cls) {
      const bool bit = arena->words[cls >> 6] >> (cls & 63) & 1;
      if (bit != (arena->heads[cls] != nullptr)) broken("a class's bitmap bit disagrees with its list");
      for (Chunk* c = arena->heads[cls]; c; c = c->free_next) {
        if (c->in_use) broken("a chunk in a free list is in use");
        if (c->hole) broken("a hole is in a free list");
        if (c->arena != arena.get()) broken("a free chunk is listed in another arena");
        if (size_class(c->size) != cls) broken("a free chunk is in the wrong class");
        if (c->free_next && c->free_next->free_prev != c) broken("a free list's back link is wrong");
        const auto it = arena->chunks.find(c->ptr);
        if (it == arena->chunks.end() || it->second != c) broken("a free chunk is not in its arena's chunk map");
        ++blocks;
        bytes_free += c->size;
      }
    }
    for (int w = 0; w < kWords; ++w)
      if (bool(arena->words[w]) != bool(arena->summary >> w & 1)) broken("the summary bitmap disagrees");
    if (blocks != arena->free_blocks || bytes_free != arena->free_bytes) broken("an arena's free counts are wrong");
    uint64_t deferred = 0, flagged = 0;
    for (Chunk* c = arena->deferred; c; c = c->defer_next) {
      if (!c->deferred || c->in_use || c->hole) broken("a chunk in the deferred list is not a deferred free chunk");
      if (c->defer_next && c->defer_next->defer_prev != c) broken("the deferred list's back link is wrong");
      if (++deferred > blocks) broken("the deferred list is longer than the free lists");
    }
    for (int cls = 0; cls < kClasses; ++cls)
      for (Chunk* c = arena->heads[cls]; c; c = c->free_next) flagged += c->deferred;
    if (flagged != deferred) broken("a free chunk marked deferred is not in the deferred list");
    if (deferred != arena->deferred_count || (deferred == 0) != (arena->deferred_last == nullptr))
      broken("the deferred list's count or end is wrong");
    uint64_t holes = 0;
    for (Chunk* h = arena->holes; h; h = h->free_next) {
      if (!ranges_) broken("a pool without ranges has a hole");
      if (!h->hole || h->in_use) broken("a chunk in the holes list is not a hole");
      if (h->free_next && h->free_next->free_prev != h) broken("the holes list's back link is wrong");
      if ((h->ptr | h->size) & (ranges_->unit() - 1)) broken("a hole does not begin and end on a unit");
      const auto it = arena->chunks.find(h->ptr);
      if (it == arena->chunks.end() || it->second != h) broken("a hole is not in its arena's chunk map");
      ++holes;
    }
    free_total += bytes_free;
    uint64_t live = 0, used = 0, requested = 0, free_chunks = 0, walked = 0;
    std::vector<Chunk*> starts;
    for (const auto& [ptr, c] : arena->chunks) {
      if (c->ptr != ptr) broken("the chunk map disagrees with its chunk");
      if (c->arena != arena.get()) broken("a chunk is in another arena's map");
      if (c->pending) {
        if (!c->in_use) broken("a pending chunk is not kept from merging");
        if (c->uses) broken("a pending chunk still lists streams");
        pending_total += c->size;
        ++pending_chunks;
      } else if (c->in_use) {
        if (c->cls != size_class(c->size)) broken("a chunk in use has a stale size class");
        ++live;
        used += c->size;
        requested += c->requested;
      } else if (c->hole) {
        hole_total += c->size;
        --holes;
      } else {
        if (c->uses) broken("a free chunk lists streams");
        ++free_chunks;
      }
      if (!c->prev) starts.push_back(c);
    }
    if (live != arena->live) broken("an arena's count of live allocations is wrong");
    if (used != arena->in_use) broken("an arena's bytes in use disagree with its chunks");
    if (requested != arena->requested) broken("an arena's bytes requested disagree with its chunks");
    if (arena->allocs - arena->frees != live) broken("an arena's allocation and free counts disagree with its chunks");
    if (free_chunks != arena->free_blocks) broken("a free chunk is missing from the free lists");
    if (holes != 0) broken("a hole is missing from the holes list");
    if (arena->published < arena->in_use) broken("an arena published fewer bytes in use than it has");
    published_total += arena->published;
    for (Chunk* c : starts) {
      for (; c; c = c->next) {
        ++walked;
        if (c->size == 0 || c->size % kRound) broken("a chunk's size is not a positive multiple of the rounding");
        block_total += c->size;
        if (c->next) {
          if (c->next->prev != c) broken("a block's back link is wrong");
          if (c->ptr + c->size != c->next->ptr) broken("neighbours in a block are not contiguous");
          if (!c->in_use && !c->next->in_use && c->hole == c->next->hole && !c->deferred && !c->next->deferred)
            broken("two free neighbours were not merged");
          if (c->next->arena != c->arena) broken("a block spans two arenas");
        }
      }
    }
    if (walked != arena->chunks.size()) broken("a chunk is in the map but in no block");
    used_total += used;
  }
  if (published_total != published_in_use_.load()) broken("the published bytes in use disagree with the arenas'");
  if (peak_in_use_.load() < used_total) broken("the peak of bytes in use is below the bytes in use");
  if (block_total - hole_total != stats_.reserved) broken("bytes held disagree with the upstream blocks");
  if (ranges_ && block_total != addresses_) broken("the addresses reserved disagree with the segments");
  if (pending_chunks != pending_frees_.size()) broken("the pending frees disagree with their chunks");
  if (free_total + used_total + pending_total != stats_.reserved)
    broken("used, free and pending do not add up to the total");
}

}  // namespace gpumem::pool
