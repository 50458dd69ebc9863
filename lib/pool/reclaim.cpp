// Page reclaim, over an upstream with address ranges: physical memory is one resource of the
// pool, which every arena's addresses borrow. Before growth maps new memory, it moves the whole
// units that lie inside free chunks — of any stream's arena, the oldest freed first — to where the
// memory is needed, so a pool holds little more than its peak in use, whatever the sizes and
// streams. A unit is moved only once the GPU is done with it (moving unmaps it, and unmapping does
// not wait for kernels): each arena records fences on its stream, and a free chunk is done once a
// fence recorded after its free has completed. Fences are polled, never waited for, so what is
// not done yet is left for a later growth, and growth maps new memory instead.
#include <algorithm>

#include "pool/pool_parts.hpp"

namespace gpumem::pool {

bool Pool::retire_fence(Arena& arena, alloc::StreamOrder::Fence f, bool done) noexcept {
  if (arena.fence.fence != f) return false;
  if (done) arena.done_seq = std::max(arena.done_seq, arena.fence.seq);
  arena.fence = {};
  order_->release(f);  // no driver call: back to the order's own list
  return true;
}

void Pool::poll_fences(Arena& arena) {
  if (!order_) return;  // memory no stream's work touches is done once freed
  FencePoint f;
  {
    std::lock_guard<SpinLock> lock(arena.lock);
    f = arena.fence;
  }
  if (!f.fence) return;
  bool done = false, failed = false;
  const uint64_t t0 = now_ns();
  try {
    done = order_->query(f.fence);
  } catch (...) {
    // Its stream is gone (destroyed by its owner), or its event was captured into a graph: what it
    // covers cannot be told. The fence goes, done_seq stays, and a later growth fences anew.
    failed = true;
  }
  count_driver_time(t0);
  if (done || failed) {
    std::lock_guard<SpinLock> lock(arena.lock);
    retire_fence(arena, f.fence, done);
  }
}

void Pool::count_driver_time(uint64_t t0) noexcept {
  const uint64_t ns = now_ns() - t0;
  std::lock_guard<SpinLock> lock(mutex_);
  growth_.driver_ns += ns;
}

Growth Pool::growth() {
  std::lock_guard<SpinLock> lock(mutex_);
  return growth_;
}

void Pool::drop_fences(Arena& arena) noexcept {
  if (arena.fence.fence) order_->release(arena.fence.fence);
  arena.fence = {};
  arena.done_seq = arena.free_seq;  // it holds no free memory
}

void Pool::fence_free_pages(Arena& arena) {
  if (!order_) return;
  const gpumem_stream_t stream = arena.stream();
  // The per-thread default stream names another stream on every thread: only its own can fence it.
  if (stream_key(stream) != arena.key()) return;
  uint64_t seq;
  {
    std::lock_guard<SpinLock> lock(arena.lock);
    if (arena.fence.fence || arena.unfenceable || arena.free_seq == arena.done_seq ||
        arena.free_bytes < ranges_->unit())
      return;
    seq = arena.free_seq;  // read before the fence is recorded: it covers every free up to here
  }
  alloc::StreamOrder::Fence fence = nullptr;
  const uint64_t t0 = now_ns();
  try {
    fence = order_->record(stream);
  } catch (...) {
    count_driver_time(t0);
    // A destroyed stream: its free memory stays where it is, and its stream is not asked again.
    std::lock_guard<SpinLock> lock(arena.lock);
    if (arena.key() == stream_key(stream)) arena.unfenceable = true;
    return;
  }
  {
    std::lock_guard<SpinLock> lock(mutex_);
    ++growth_.fences_recorded;
    growth_.driver_ns += now_ns() - t0;
  }
  {
    std::lock_guard<SpinLock> lock(arena.lock);
    if (!arena.fence.fence && arena.key() == stream_key(stream)) {
      arena.fence = FencePoint{fence, seq};
      return;
    }
  }
  order_->release(fence);  // another thread fenced as much meanwhile
}

uint64_t Pool::take_pages_from(Arena& arena, uint64_t want, std::vector<Donor>& donors) {
  const size_t unit = ranges_->unit();
  std::lock_guard<SpinLock> lock(arena.lock);
  merge_deferred(arena);
  std::vector<Chunk*> candidates;
  // Only chunks of a unit or more can hold a whole unit: from the unit's class up.
  for (int cls = arena.find_from(size_class(unit)); cls >= 0; cls = arena.find_from(cls + 1)) {
    for (Chunk* c = arena.heads[cls]; c; c = c->free_next)
      if ((!order_ || c->freed_seq <= arena.done_seq) && align_up(c->ptr, unit) < align_down(c->ptr + c->size, unit))
        candidates.push_back(c);
  }
  std::sort(candidates.begin(), candidates.end(),
            [](const Chunk* a, const Chunk* b) { return a->freed_seq < b->freed_seq; });
  uint64_t got = 0;
  size_t used = 0;
  for (const Chunk* c : candidates) {
    if (got >= want) break;
    got += std::min<uint64_t>(align_down(c->ptr + c->size, unit) - align_up(c->ptr, unit), want - got);
    ++used;
  }
  // Everything that can fail comes first: three chunks for each (below, above, and the split
  // between what moves and what does not).
  if (donors.size() + used > donors.capacity()) donors.reserve(std::max(donors.size() + used, 2 * donors.capacity()));
  std::vector<Chunk*> fresh = fresh_chunks(arena, 3 * used);
  got = 0;
  for (size_t i = 0; i < used; ++i) {
    Chunk* c = candidates[i];
    const uintptr_t lo = align_up(c->ptr, unit);
    const uint64_t take = std::min<uint64_t>(align_down(c->ptr + c->size, unit) - lo, want - got);
    Chunk* middle = cut_out(arena, c, lo, lo + take, fresh);
    donors.push_back(Donor{&arena, middle, 0, fresh.back()});
    fresh.pop_back();
    got += take;
  }
  for (Chunk* c : fresh) delete_chunk(arena, c);
  if (used) ++arena.pins;  // until return_pages()
  return got;
}

std::vector<Pool::Arena*> Pool::pin_all() {
  std::vector<Arena*> arenas;
  std::lock_guard<SpinLock> lock(mutex_);
  arenas.reserve(arenas_.size());
  for (auto& a : arenas_) {
    std::lock_guard<SpinLock> pin(a->lock);
    ++a->pins;
    arenas.push_back(a.get());
  }
  return arenas;
}

bool Pool::wait_for_free_pages() {
  if (!order_ || !ranges_ || !page_reclaim()) return false;
  bool advanced = false;
  std::vector<Arena*> arenas;
  try {
    arenas = pin_all();
  } catch (...) {
    return false;  // no host memory for the list: the rest of the ladder goes on
  }
  for (Arena* a : arenas) {
    try {
      fence_free_pages(*a);
      FencePoint f;
      {
        std::lock_guard<SpinLock> lock(a->lock);
        f = a->fence;
      }
      if (f.fence) {
        bool done = true;
        try {
          order_->synchronize(f.fence);  // this stream's work, not the device's
        } catch (...) {
          done = false;  // as in poll_fences: the fence goes, and what it covered stays
        }
        std::lock_guard<SpinLock> lock(a->lock);
        advanced |= retire_fence(*a, f.fence, done) && done;
      }
    } catch (...) {
      // A stream that cannot be waited for (destroyed by its owner): its free memory stays.
    }
    unpin(*a);
  }
  return advanced;
}

uint64_t Pool::take_pages(Arena& own, uint64_t want, std::vector<Donor>& donors) noexcept {
  std::vector<Arena*> arenas;
  try {
    arenas = pin_all();
  } catch (...) {
    return 0;  // no host memory for the list: growth maps new memory instead
  }
  // Other streams' memory first: what their arenas hold beyond their use is what strands memory.
  std::stable_partition(arenas.begin(), arenas.end(), [&](const Arena* a) { return a != &own; });
  uint64_t got = 0;
  for (Arena* a : arenas) {
    try {
      // A fence for what was freed since the last, then every fence that completed: on a GPU that
      // has caught up, the one just recorded may be among them already.
      fence_free_pages(*a);
      poll_fences(*a);
      if (got < want) got += take_pages_from(*a, want - got, donors);
    } catch (...) {
      // No host memory: what was taken is kept, and the rest is mapped anew.
    }
  }
  for (Arena* a : arenas) unpin(*a);
  return got;
}

uint64_t Pool::move_pages(std::vector<Donor>& donors, const std::vector<Chunk*>& transit,
                          std::vector<size_t>& filled_of, std::exception_ptr& failure) {
  uint64_t left = 0, moved_bytes = 0, moves = 0, lost_bytes = 0;
  size_t d = 0;
  const uint64_t t0 = now_ns();
  for (size_t i = 0; i < transit.size(); ++i) {
    Chunk* c = transit[i];
    if (!c->hole) continue;
    size_t filled = 0;
    while (!failure && filled < c->size && d < donors.size()) {
      Donor& from = donors[d];
      const size_t size = std::min(c->size - filled, from.chunk->size - from.moved);
      size_t moved = 0, lost = 0;
      try {
        ranges_->move(from.chunk->ptr + from.moved, c->ptr + filled, size, moved, lost);
      } catch (...) {
        failure = std::current_exception();
      }
      from.moved += moved;
      filled += moved - lost;
      moved_bytes += moved - lost;
      lost_bytes += lost;
      moves += moved != 0;
      if (from.moved == from.chunk->size) ++d;
    }
    left += c->size - filled;
    // Mapped from its start up to filled; the rest is for growth to map. Split under the lock, when
    // the region settles: the chunk map is the arena's.
    filled_of[i] = filled;
    if (filled == c->size) c->hole = false;  // in transit, so no other thread reads it
  }
  std::lock_guard<SpinLock> lock(mutex_);
  growth_.move_calls += moves;
  growth_.moved_bytes += moved_bytes;
  growth_.driver_ns += now_ns() - t0;
  stats_.reserved -= lost_bytes;  // unmapped, and mapped nowhere else
  return left;
}

void Pool::return_pages(std::vector<Donor>& donors) noexcept {
  // Donors come grouped by arena, each arena pinned once for all of its own.
  for (size_t i = 0; i < donors.size(); ++i) {
    Donor& d = donors[i];
    Arena& arena = *d.arena;
    {
      std::lock_guard<SpinLock> lock(arena.lock);
      Chunk* c = d.chunk;
      if (d.moved == 0 || d.moved == c->size) {
        settle_chunk(arena, c, d.moved != 0);
        delete_chunk(arena, d.spare);
      } else {
        try {
          arena.chunks.reserve(arena.chunks.size() + 1);
          Chunk* rest = split(arena, c, d.moved, d.spare);
          settle_chunk(arena, rest, false);
        } catch (...) {
          // No host memory to list what did not move: taken as unmapped and never handed out,
          // as in unmap_free().
          delete_chunk(arena, d.spare);
        }
        settle_chunk(arena, c, true);
      }
    }
    if (i + 1 < donors.size() && donors[i + 1].arena == &arena) continue;
    try {
      unreserve_empty_ranges(arena);  // a range all of whose memory moved away
    } catch (...) {
      // Still listed, as a hole: a later release tries again.
    }
    unpin(arena);
  }
  donors.clear();
}

}  // namespace gpumem::pool
