// Giving memory back over ranges (see grow_in_place.cpp): the whole units inside free chunks are
// unmapped, their addresses kept as holes, and a range with nothing mapped any more is unreserved.
#include "pool/pool_parts.hpp"

namespace gpumem::pool {

uint64_t Pool::unmap_free(Arena& arena) {
  const size_t unit = ranges_->unit();
  std::vector<Chunk*> parts;     // in transit: the whole units inside free chunks
  std::vector<size_t> unmapped;  // of each part, the bytes from its start that the upstream unmapped
  std::vector<Chunk*> fresh;     // one for each part, to split it where an unmap stopped
  {
    std::lock_guard<SpinLock> lock(arena.lock);
    merge_deferred(arena);
    std::vector<Chunk*> candidates;
    candidates.reserve(arena.free_blocks);
    for (int w = 0; w < kWords; ++w)
      for (uint64_t bits = arena.words[w]; bits; bits &= bits - 1)
        for (Chunk* c = arena.heads[(w << 6) + __builtin_ctzll(bits)]; c; c = c->free_next)
          if (align_up(c->ptr, unit) < align_down(c->ptr + c->size, unit)) candidates.push_back(c);
    parts.reserve(candidates.size());
    unmapped.resize(candidates.size());
    fresh = fresh_chunks(arena, 3 * candidates.size());
    for (Chunk* c : candidates) {
      Chunk* middle = cut_out(arena, c, align_up(c->ptr, unit), align_down(c->ptr + c->size, unit), fresh);
      parts.push_back(middle);
    }
  }
  // Outside the locks.
  std::exception_ptr first;
  uint64_t unmapped_bytes = 0, unmaps = 0;
  const uint64_t t0 = now_ns();
  for (size_t i = 0; i < parts.size(); ++i) {
    Chunk* c = parts[i];
    try {
      ranges_->unmap(c->ptr, c->size, unmapped[i]);
    } catch (...) {
      if (!first) first = std::current_exception();  // what is still mapped is cached again below
    }
    if (unmapped[i]) {
      record(trace::Event::kUpstreamFree, unmapped[i], unmapped[i], reinterpret_cast<void*>(c->ptr), arena.stream());
      unmapped_bytes += unmapped[i];
      ++unmaps;
    }
  }
  uint64_t lost = 0;  // still mapped, but listed as unmapped: see below
  {
    std::lock_guard<SpinLock> lock(arena.lock);
    for (size_t i = 0; i < parts.size(); ++i) {
      Chunk* c = parts[i];
      const size_t done = unmapped[i];
      if (done == 0 || done == c->size) {
        settle_chunk(arena, c, done != 0);
        continue;
      }
      // Unmapped up to where the upstream stopped; mapped and free from there.
      try {
        arena.chunks.reserve(arena.chunks.size() + 1);
      } catch (...) {
        // No host memory to list the mapped rest: it is taken as unmapped, never handed out.
        // The upstream still has it mapped, refuses to map it again, and unmaps it with its range.
        lost += c->size - done;
        settle_chunk(arena, c, true);
        continue;
      }
      Chunk* rest = split(arena, c, done, fresh.back());
      fresh.pop_back();
      settle_chunk(arena, c, true);
      settle_chunk(arena, rest, false);
    }
    for (Chunk* c : fresh) delete_chunk(arena, c);
  }
  {
    std::lock_guard<SpinLock> lock(mutex_);
    stats_.reserved -= unmapped_bytes + lost;
    stats_.upstream_frees += unmaps;
    growth_.returned_bytes += unmapped_bytes;
    growth_.driver_ns += now_ns() - t0;
  }
  try {
    unreserve_empty_ranges(arena);
  } catch (...) {
    if (!first) first = std::current_exception();
  }
  if (first) std::rethrow_exception(first);
  return unmapped_bytes;
}

void Pool::unreserve_empty_ranges(Arena& arena) {
  std::exception_ptr first;
  std::vector<Block> empty;
  {
    std::lock_guard<SpinLock> lock(arena.lock);
    for (Chunk* h = arena.holes; h; h = h->free_next)
      if (!h->prev && !h->next) empty.push_back(Block{h->ptr, h->size, &arena, arena.stream()});
    for (const Block& b : empty) {
      Chunk* h = arena.chunks.at(b.ptr);
      remove_hole(arena, h);
      arena.chunks.erase(b.ptr);
      delete_chunk(arena, h);
    }
  }
  for (const Block& b : empty) {
    decltype(segments_)::node_type segment;  // out of the map first, as in give_back()
    {
      std::lock_guard<SpinLock> lock(mutex_);
      segment = segments_.extract(b.ptr);
    }
    try {
      ranges_->unreserve(b.ptr, b.size);
      std::lock_guard<SpinLock> lock(mutex_);
      addresses_ -= b.size;
    } catch (...) {
      if (!first) first = std::current_exception();
      // Still the pool's: listed again, so that a later release tries again.
      bool listed = true;
      {
        std::lock_guard<SpinLock> lock(arena.lock);
        try {
          Chunk* h = fresh_chunks(arena, 1).front();
          h->ptr = b.ptr;
          h->size = b.size;
          h->hole = true;
          arena.chunks.emplace(h->ptr, h);
          insert_hole(arena, h);
        } catch (...) {
          listed = false;
        }
      }
      std::lock_guard<SpinLock> lock(mutex_);
      if (listed) {
        segments_.insert(std::move(segment));
      } else {
        // No host memory to list it: the addresses stay reserved, unused, for the process's life,
        // and are no longer the pool's.
        addresses_ -= b.size;
      }
    }
  }
  if (first) std::rethrow_exception(first);
}

}  // namespace gpumem::pool
