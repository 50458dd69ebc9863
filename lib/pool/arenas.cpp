// The pool's arenas and segments: finding an arena, making one, retiring one that holds nothing;
// the map of the blocks (or ranges) taken from the upstream; and which pool holds a block of an
// upstream's, so that the upstream refuses to take it back from anyone else.
#include <algorithm>
#include <mutex>

#include "pool/pool_parts.hpp"
#include "pool/tenant.hpp"

namespace gpumem::pool {
namespace {

// Every live pool, for holder_of(). Pools are made and destroyed rarely; the list is read only
// when memory is freed through an allocator that something is built on.
std::mutex pools_mutex;
std::vector<Pool*>& all_pools() {
  static auto* list = new std::vector<Pool*>;  // never destroyed: pools may outlive static destructors
  return *list;
}

}  // namespace

void Pool::enlist(Pool* pool) {
  std::lock_guard<std::mutex> lock(pools_mutex);
  all_pools().push_back(pool);
}

void Pool::delist(Pool* pool) {
  std::lock_guard<std::mutex> lock(pools_mutex);
  auto& list = all_pools();
  list.erase(std::remove(list.begin(), list.end(), pool), list.end());
}

Pool* Pool::holder_of(const alloc::Allocator* upstream, const void* p) {
  std::lock_guard<std::mutex> lock(pools_mutex);
  for (Pool* pool : all_pools())
    if (pool->upstream_ == upstream && pool->holds(p)) return pool;
  return nullptr;
}

void Pool::refuse_if_held_above(const alloc::Allocator* a, const void* p) {
  if (a->tenants() > 0) Tenant::refuse_if_held(a, p);
  if (a->pools() > 0)
    if (const Pool* pool = holder_of(a, p))
      fail(GPUMEM_ERROR_NOT_OWNED,
           "%p is held by the pool %p built on this %s allocator (in use or cached there): free it through that pool, "
           "which returns it when it no longer needs it",
           p, static_cast<const void*>(static_cast<const gpumem_allocator_s*>(pool)), a->kind());
}

void Pool::free_from_caller(alloc::Allocator* a, void* p, gpumem_stream_t stream) {
  refuse_if_held_above(a, p);
  if (alloc::FreeHold hold = alloc::free_hold.load(std::memory_order_acquire); hold && hold(a, p, stream)) return;
  a->deallocate(p, stream);
}

alloc::SharedExtent Pool::shared_extent(uintptr_t p) {
  uintptr_t base;
  {
    std::lock_guard<SpinLock> lock(mutex_);
    auto it = segments_.upper_bound(p);
    if (it == segments_.begin() || p - std::prev(it)->first >= std::prev(it)->second.size)
      fail(GPUMEM_ERROR_NOT_OWNED, "%p is not memory of this pool", reinterpret_cast<void*>(p));
    base = std::prev(it)->first;
  }
  return upstream_->shared_extent(ranges_ ? p : base);
}

bool Pool::holds(const void* p) { return segment_arena(reinterpret_cast<uintptr_t>(p)) != nullptr; }

Pool::Arena* Pool::segment_arena(uintptr_t p) {
  std::lock_guard<SpinLock> lock(mutex_);
  auto it = segments_.upper_bound(p);
  if (it == segments_.begin()) return nullptr;
  --it;
  return p - it->first < it->second.size ? it->second.arena : nullptr;
}

void Pool::add_segment(uintptr_t base, size_t size, Arena* arena) {
  if (size > UINTPTR_MAX - base)
    fail(GPUMEM_ERROR_INTERNAL,
         "the upstream %s allocator returned %s bytes at %p, which run past the end of the address space",
         upstream_->kind(), grouped(size).c_str(), reinterpret_cast<void*>(base));
  const auto next = segments_.lower_bound(base);
  const bool below = next != segments_.begin() && std::prev(next)->first + std::prev(next)->second.size > base;
  const bool above = next != segments_.end() && next->first < base + size;
  if (below || above) {
    const auto& [other, seg] = below ? *std::prev(next) : *next;
    fail(GPUMEM_ERROR_INTERNAL,
         "the upstream %s allocator returned [%p, +%s), which overlaps [%p, +%s) that the pool already holds",
         upstream_->kind(), reinterpret_cast<void*>(base), grouped(size).c_str(), reinterpret_cast<void*>(other),
         grouped(seg.size).c_str());
  }
  segments_.emplace(base, Segment{size, arena});
}

Pool::Arena* Pool::make_arena(uintptr_t key, gpumem_stream_t stream) {
  for (Arena* a : emptied_) {
    {
      std::lock_guard<SpinLock> own(a->lock);
      a->noted = false;
    }
    retire_locked(*a);  // a spare for this one, perhaps
  }
  emptied_.clear();
  // Everything that can fail comes first: a failed call leaves no half-made arena.
  room_for_one(arenas_);
  ArenaTable* t = table_.load(std::memory_order_relaxed);
  // A table half full of arenas and tombstones is rebuilt: in place, or into one twice the size
  // when a quarter of it is arenas, so that at least a quarter of it is free after either.
  if (2 * (t->used + 1) > t->mask + 1 && 4 * (t->live + 1) > t->mask + 1) {
    room_for_one(tables_);
    auto bigger = std::make_unique<ArenaTable>(2 * (t->mask + 1));
    for (auto& a : arenas_) bigger->insert(a.get());
    t = bigger.get();
    tables_.push_back(std::move(bigger));
    table_.store(t, std::memory_order_release);
  } else if (2 * (t->used + 1) > t->mask + 1) {
    t->rebuild(arenas_);  // cleared in place, which readers survive
  }
  std::unique_ptr<Arena> arena;
  if (spare_arenas_.empty()) {
    arena = std::make_unique<Arena>(key, stream);
  } else {
    arena = std::move(spare_arenas_.back());
    spare_arenas_.pop_back();
    std::lock_guard<SpinLock> lock(arena->lock);  // threads that found it under its old key check it so
    arena->assign(key, stream);
    arena->retired = false;
    arena->noted = false;
    arena->allocs_seen = kNeverSeen;  // other streams may have looked at it since it retired
  }
  if (!arenas_.empty() && !several_arenas_.load(std::memory_order_relaxed)) {
    // From now on a lone thread's frees publish at once (see publish()), so the first arena's
    // count must be exact first.
    std::lock_guard<SpinLock> first(arenas_.front()->lock);
    several_arenas_.store(true, std::memory_order_relaxed);
    publish(*arenas_.front());
  }
  Arena* a = arena.get();
  a->index = arenas_.size();
  arenas_.push_back(std::move(arena));
  t->insert(a);
  return a;
}

Pool::Arena& Pool::pin_arena(gpumem_stream_t stream) {
  const uintptr_t key = stream_key(stream);
  std::lock_guard<SpinLock> lock(mutex_);
  Arena* a = find_arena(key);  // under mutex_, no slot changes: what it finds is the key's
  if (!a) a = make_arena(key, stream);
  std::lock_guard<SpinLock> own(a->lock);
  ++a->pins;
  return *a;
}

void Pool::unpin(Arena& arena) {
  bool empty;
  {
    std::lock_guard<SpinLock> lock(arena.lock);
    empty = --arena.pins == 0 && arena.chunks.empty();
  }
  if (empty) retire_if_empty(arena);
}

void Pool::retire_if_empty(Arena& arena) noexcept {
  std::lock_guard<SpinLock> lock(mutex_);
  retire_locked(arena);
}

void Pool::retire_later(Arena& arena) noexcept {
  {
    std::lock_guard<SpinLock> own(arena.lock);
    if (arena.noted || !arena.chunks.empty()) return;
    arena.noted = true;
  }
  try {
    emptied_.push_back(&arena);
  } catch (...) {
    retire_locked(arena);  // no room to note it: now, then
  }
}

void Pool::retire_locked(Arena& arena) noexcept {
  ArenaLock own(arena.lock);
  if (arena.retired || arena.pins || !arena.chunks.empty()) return;
  try {
    room_for_one(spare_arenas_);  // the object must be kept: readers may hold it
  } catch (...) {
    return;  // no memory to list it as spare: it stays, empty, for its stream
  }
  publish(arena);  // nothing in use: what it published goes back to 0
  retired_allocs_ += arena.allocs;
  retired_frees_ += arena.frees;
  arena.allocs = arena.frees = 0;
  arena.allocs_seen = kNeverSeen;
  arena.unfenceable = false;
  drop_fences(arena);
  arena.retired = true;
  table_.load(std::memory_order_relaxed)->remove(&arena);
  // Its chunk objects are all spare now: their memory goes, and the map's.
  arena.spare_chunks = nullptr;
  std::vector<std::unique_ptr<Chunk[]>>().swap(arena.chunk_slabs);
  decltype(arena.chunks)().swap(arena.chunks);
  own.unlock();
  // Out of the list at once: the last arena takes its place.
  const size_t i = arena.index;
  std::swap(arenas_[i], arenas_.back());
  arenas_[i]->index = i;
  std::unique_ptr<Arena> kept = std::move(arenas_.back());
  arenas_.pop_back();
  spare_arenas_.push_back(std::move(kept));
}

std::vector<Pool::Arena*> Pool::all_arenas() {
  std::vector<Arena*> out;
  std::lock_guard<SpinLock> lock(mutex_);
  out.reserve(arenas_.size());
  for (auto& a : arenas_) out.push_back(a.get());
  return out;
}

}  // namespace gpumem::pool
