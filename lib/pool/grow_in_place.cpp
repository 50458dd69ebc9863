// Segments that grow in place, over an upstream with address ranges (alloc::Ranges). Each arena's
// segments are ranges of addresses; the parts with nothing mapped are hole chunks, kept in the
// arena's holes list and never in a free list. Free chunks and holes alternate, so free memory
// always merges with its free neighbours, and growing maps the holes next to free memory: a
// request larger than any free chunk costs only the bytes it lacks, not a new segment. Releasing
// cached memory unmaps the whole units inside free chunks, keeping their addresses.
#include <algorithm>

#include "pool/pool_parts.hpp"

namespace gpumem::pool {

struct Pool::Placement {
  Chunk* run;       // the run's first chunk
  uintptr_t start;  // where the allocation would lie: [start, start + rounded)
  uint64_t to_map;  // bytes of holes to map for it, in whole units
};

void Pool::insert_hole(Arena& arena, Chunk* c) {
  c->free_prev = nullptr;
  c->free_next = arena.holes;
  if (c->free_next) c->free_next->free_prev = c;
  arena.holes = c;
}

void Pool::remove_hole(Arena& arena, Chunk* c) {
  (c->free_prev ? c->free_prev->free_next : arena.holes) = c->free_next;
  if (c->free_next) c->free_next->free_prev = c->free_prev;
}

std::vector<Pool::Chunk*> Pool::fresh_chunks(Arena& arena, size_t count) {
  std::vector<Chunk*> out;
  try {
    out.reserve(count);
    arena.chunks.reserve(arena.chunks.size() + count);
    while (out.size() < count) out.push_back(new_chunk(arena));
  } catch (...) {
    for (Chunk* c : out) delete_chunk(arena, c);
    throw;
  }
  return out;
}

Pool::Chunk* Pool::split(Arena& arena, Chunk* c, size_t offset, Chunk* fresh) {
  Chunk* upper = fresh;
  upper->ptr = c->ptr + offset;
  upper->size = c->size - offset;
  upper->in_use = c->in_use;
  upper->pending = c->pending;
  upper->hole = c->hole;
  upper->freed_at = c->freed_at;
  upper->freed_seq = c->freed_seq;
  arena.chunks.emplace(upper->ptr, upper);
  upper->prev = c;
  upper->next = c->next;
  if (upper->next) upper->next->prev = upper;
  c->next = upper;
  c->size = offset;
  return upper;
}

Pool::Chunk* Pool::cut_out(Arena& arena, Chunk* c, uintptr_t lo, uintptr_t hi, std::vector<Chunk*>& fresh) {
  remove_free(arena, c);
  Chunk* middle = c;
  if (lo > c->ptr) {
    middle = split(arena, c, lo - c->ptr, fresh.back());
    fresh.pop_back();
    insert_free(arena, c, size_class(c->size));
  }
  if (hi < middle->ptr + middle->size) {
    Chunk* above = split(arena, middle, hi - middle->ptr, fresh.back());
    fresh.pop_back();
    insert_free(arena, above, size_class(above->size));
  }
  middle->in_use = middle->pending = true;  // in transit
  return middle;
}

Pool::Chunk* Pool::settle_chunk(Arena& arena, Chunk* c, bool hole) {
  c->in_use = c->pending = false;
  c->hole = hole;
  if (!hole) {
    Chunk* merged = merge_and_list(arena, c);
    merged->freed_at = arena.allocs;
    return merged;
  }
  c->freed_seq = 0;  // memory mapped here later is new to the GPU
  for (Chunk* n = c->next; n && !n->in_use && n->hole; n = c->next) {
    remove_hole(arena, n);
    absorb(arena, c, n);
  }
  for (Chunk* pv = c->prev; pv && !pv->in_use && pv->hole; pv = c->prev) {
    remove_hole(arena, pv);
    absorb(arena, pv, c);
    c = pv;
  }
  insert_hole(arena, c);
  return c;
}

bool Pool::place(Arena& arena, size_t rounded, Placement& out) const {
  const size_t unit = ranges_->unit();
  bool found = false;
  for (Chunk* h = arena.holes; h; h = h->free_next) {
    // A run of free chunks and holes between chunks in use, looked at once: from its lowest hole.
    Chunk* first = h;
    bool lower_hole = false;
    while (first->prev && !first->prev->in_use && !lower_hole) {
      first = first->prev;
      lower_hole = first->hole;
    }
    if (lower_hole) continue;
    Chunk* last = h;
    while (last->next && !last->next->in_use) last = last->next;
    const uintptr_t run_end = last->ptr + last->size;
    if (run_end - first->ptr < rounded) continue;
    const auto to_map = [&](uintptr_t start) {
      uint64_t bytes = 0;
      for (const Chunk* c = first; c != last->next; c = c->next) {
        if (!c->hole) continue;
        const uintptr_t lo = std::max(c->ptr, start), hi = std::min(c->ptr + c->size, start + rounded);
        if (lo < hi) bytes += align_up(hi, unit) - align_down(lo, unit);  // holes begin and end on units
      }
      return bytes;
    };
    // The least to map lies where the request begins or ends at the run's edge or at a free
    // chunk's: each of those, the lowest winning a tie.
    const auto consider = [&](uintptr_t start) {
      start = std::clamp(start, first->ptr, run_end - rounded);
      const uint64_t bytes = to_map(start);
      if (!found || bytes < out.to_map || (bytes == out.to_map && start < out.start)) {
        found = true;
        out = Placement{first, start, bytes};
      }
    };
    consider(first->ptr);
    consider(run_end - rounded);
    for (const Chunk* c = first; c != last->next; c = c->next)
      if (!c->hole) {
        consider(c->ptr);
        consider(c->ptr + c->size >= rounded ? c->ptr + c->size - rounded : 0);
      }
  }
  return found;
}

std::vector<Pool::Chunk*> Pool::take_for_mapping(Arena& arena, const Placement& at, size_t rounded,
                                                 std::vector<Chunk*>& spares) {
  const size_t unit = ranges_->unit();
  const uintptr_t start = at.start, end = at.start + rounded;
  Chunk* first = at.run;
  while (first->ptr + first->size <= start) first = first->next;
  size_t chunks = 0, holes = 0;
  for (const Chunk* c = first; c && c->ptr < end; c = c->next) {
    ++chunks;
    holes += c->hole;
  }
  // Everything that can fail comes first.
  std::vector<Chunk*> transit;
  transit.reserve(chunks + holes);
  std::vector<Chunk*> fresh = fresh_chunks(arena, 3 * holes);
  spares.assign(fresh.end() - static_cast<std::ptrdiff_t>(holes), fresh.end());
  fresh.resize(fresh.size() - holes);
  for (Chunk* c = first; c && c->ptr < end; c = c->next) {
    if (c->hole) {
      // Only the units the allocation lies in are mapped; the rest of the hole stays one.
      remove_hole(arena, c);
      const uintptr_t lo = align_down(std::max(c->ptr, start), unit);
      const uintptr_t hi = align_up(std::min(c->ptr + c->size, end), unit);
      if (lo > c->ptr) {
        Chunk* below = c;
        c = split(arena, below, lo - below->ptr, fresh.back());
        fresh.pop_back();
        insert_hole(arena, below);
      }
      if (hi < c->ptr + c->size) {
        Chunk* above = split(arena, c, hi - c->ptr, fresh.back());
        fresh.pop_back();
        insert_hole(arena, above);
      }
    } else {
      remove_free(arena, c);
    }
    c->in_use = c->pending = true;  // in transit: neither free nor anyone's, so nothing merges with it
    transit.push_back(c);
  }
  for (Chunk* c : fresh) delete_chunk(arena, c);
  return transit;
}

void Pool::reserve_range(Arena& arena) {
  const size_t size = ranges_->range_size();
  Chunk* c;
  {
    std::lock_guard<SpinLock> lock(arena.lock);
    c = fresh_chunks(arena, 1).front();
  }
  uintptr_t base = 0;
  try {
    base = ranges_->reserve(size);
  } catch (...) {
    std::lock_guard<SpinLock> lock(arena.lock);
    delete_chunk(arena, c);
    throw;
  }
  bool refused = false;  // a range that overlaps one the pool holds, or wraps: not the pool's to give back
  try {
    std::lock_guard<SpinLock> lock(mutex_);
    std::lock_guard<SpinLock> own(arena.lock);
    // Room is made here, under the lock the emplace is made under: other threads' splits may
    // have taken what was made with the chunk.
    arena.chunks.reserve(arena.chunks.size() + 1);
    try {
      add_segment(base, size, &arena);
    } catch (const Error&) {
      refused = true;
      throw;
    }
    c->ptr = base;
    c->size = size;
    c->hole = true;
    arena.chunks.emplace(base, c);
    insert_hole(arena, c);
    addresses_ += size;
  } catch (...) {
    {
      std::lock_guard<SpinLock> lock(arena.lock);
      delete_chunk(arena, c);
    }
    if (!refused) ranges_->unreserve(base, size);
    throw;
  }
}

void Pool::place_in_transit(Arena& arena, size_t rounded, Placement& at, std::vector<Chunk*>& transit,
                            std::vector<Chunk*>& spares, bool& over_limit) {
  for (;;) {
    {
      std::lock_guard<SpinLock> lock(mutex_);
      std::lock_guard<SpinLock> own(arena.lock);
      if (place(arena, rounded, at)) {
        transit = take_for_mapping(arena, at, rounded, spares);
        return;
      }
      // A new range would not be mapped beyond the limit either: no addresses are reserved for
      // it, unless free memory elsewhere may be moved into it.
      if (!reclaim_pages_.load(std::memory_order_relaxed) && !within_limit(align_up(rounded, ranges_->unit()))) {
        over_limit = true;
        return;
      }
    }
    // No run can hold it: a new range, which can (the request is no larger than one). Another
    // thread on the stream may take it first; then this one looks again.
    reserve_range(arena);
  }
}

uint64_t Pool::map_holes(const std::vector<Chunk*>& transit, const std::vector<size_t>& filled_of, uint64_t bytes,
                         gpumem_stream_t stream, std::exception_ptr& failure) {
  // Nothing to map (moved, or another thread's free made room meanwhile): no upstream call to tell
  // of; nor after a failed move, which the allocation fails with.
  if (!bytes || failure) return 0;
  uint64_t mapped_bytes = 0;
  try {
    from_upstream(bytes, stream, [&](uint64_t& mapped, uint64_t& maps) {
      void* first = nullptr;
      for (size_t i = 0; i < transit.size(); ++i) {
        Chunk* c = transit[i];
        if (!c->hole) continue;
        const uintptr_t from = c->ptr + filled_of[i];
        const size_t size = c->size - filled_of[i];
        ranges_->map(from, size);  // what was mapped before a failure stays mapped, as free memory
        record(trace::Event::kUpstreamAlloc, size, size, reinterpret_cast<void*>(from), stream);
        c->hole = false;  // in transit, so no other thread reads it
        mapped_bytes = mapped += size;
        ++maps;
        if (!first) first = reinterpret_cast<void*>(from);
      }
      return first;
    });
  } catch (...) {
    failure = std::current_exception();
  }
  return mapped_bytes;
}

void Pool::settle_region(Arena& arena, const std::vector<Chunk*>& transit, const std::vector<size_t>& filled_of,
                         std::vector<Chunk*>& spares) {
  for (size_t i = 0; i < transit.size(); ++i) {
    Chunk* c = transit[i];
    if (c->hole && filled_of[i]) {
      try {
        arena.chunks.reserve(arena.chunks.size() + 1);
        Chunk* rest = split(arena, c, filled_of[i], spares.back());
        spares.pop_back();
        c->hole = false;
        settle_chunk(arena, rest, true);
      } catch (...) {
        // No host memory to list the mapped part: it is taken as unmapped and never handed out;
        // the upstream still has it mapped, refuses to map it again, and unmaps it with its range.
      }
    }
    settle_chunk(arena, c, c->hole);
  }
  for (Chunk* c : spares) delete_chunk(arena, c);
}

void* Pool::grow_in_place(Arena& arena, size_t size, size_t rounded, gpumem_stream_t stream, bool& over_limit) {
  Placement at{};
  std::vector<Chunk*> transit;  // the region's chunks, in address order
  std::vector<Chunk*> spares;   // the arena's, for splits of its holes
  std::vector<Donor> donors;
  struct GiveBack {  // on every way out, once the region is settled
    Pool* pool;
    std::vector<Donor>& donors;
    ~GiveBack() { pool->return_pages(donors); }
  } give_back{this, donors};
  place_in_transit(arena, rounded, at, transit, spares, over_limit);
  if (over_limit) return nullptr;
  std::vector<size_t> filled_of;
  try {
    filled_of.assign(transit.size(), 0);
  } catch (...) {
    ArenaLock lock(arena.lock);  // back as it was: nothing was moved or mapped
    for (Chunk* c : spares) delete_chunk(arena, c);
    for (Chunk* c : transit) settle_chunk(arena, c, c->hole);
    throw;
  }
  // Steps of the region: free memory anywhere moved in, the rest mapped, the limit counting that rest.
  const uint64_t donated =
      at.to_map && reclaim_pages_.load(std::memory_order_relaxed) ? take_pages(arena, at.to_map, donors) : 0;
  const uint64_t fresh = at.to_map - std::min<uint64_t>(at.to_map, donated);
  {
    std::lock_guard<SpinLock> lock(mutex_);
    over_limit = !within_limit(fresh);
    if (!over_limit) growing_ += fresh;
  }
  std::exception_ptr failure;
  uint64_t mapped_bytes = 0;
  if (!over_limit) {
    const uint64_t left = donors.empty() ? at.to_map : move_pages(donors, transit, filled_of, failure);
    mapped_bytes = map_holes(transit, filled_of, left, stream, failure);
    std::lock_guard<SpinLock> lock(mutex_);
    growing_ -= fresh;
    if (mapped_bytes) stats_.on_reserve(mapped_bytes);
  }
  ArenaLock lock(arena.lock);
  settle_region(arena, transit, filled_of, spares);
  if (over_limit) return nullptr;
  if (failure) {
    lock.unlock();
    std::rethrow_exception(failure);
  }
  Chunk* c = take(arena, rounded);  // the region is free and mapped now, so one fits
  if (!c)
    fail(GPUMEM_ERROR_INTERNAL, "the pool mapped %s bytes for %s but found no room", grouped(at.to_map).c_str(),
         bytes(size).c_str());
  // In use on its stream again: a new stream at a destroyed one's address, which may lend.
  if (stream_key(stream) == arena.key()) arena.unfenceable = false;
  return hand_out(c, size, stream);
}

}  // namespace gpumem::pool
