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

std::atomic<Pool::ReclaimRunner> reclaim_runner{nullptr};

// How far an arena's bytes in use may drop before it tells the peak counter; see publish().
constexpr uint64_t kPublishSlack = uint64_t{16} << 20;

// A free block its stream did not take again in this many of its allocations is spare.
constexpr uint64_t kStaleAllocs = 16;

// The thread's identity for last_publisher_.
thread_local char publisher_tag;

}  // namespace

// Arenas by key, open addressing, read without a lock: a slot is written once, under mutex_, and a
// half-full table is replaced by a copy twice its size while readers may still use the old one.
struct Pool::ArenaTable {
  // The key is kept beside the arena so that a probe never reads another arena's cache lines,
  // which their owners write all the time.
  struct Slot {
    std::atomic<uintptr_t> key{0};
    std::atomic<Arena*> arena{nullptr};  // written after key, with release
  };
  explicit ArenaTable(size_t capacity) : mask(capacity - 1), slots(new Slot[capacity]) {}
  const size_t mask;
  const std::unique_ptr<Slot[]> slots;
  size_t used = 0;

  void insert(Arena* a) {
    size_t i = alloc::AddressHash{}(a->key) & mask;
    while (slots[i].arena.load(std::memory_order_relaxed)) i = (i + 1) & mask;
    slots[i].key.store(a->key, std::memory_order_relaxed);
    slots[i].arena.store(a, std::memory_order_release);
    ++used;
  }
};

void Pool::set_reclaim_runner(ReclaimRunner runner) { reclaim_runner.store(runner); }

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
  upstream_->retain();
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
  upstream_->unretain();
}

Pool::Chunk* Pool::new_chunk(Arena& arena) {
  if (!arena.spare_chunks) {
    constexpr size_t kSlab = 256;
    auto slab = std::make_unique<Chunk[]>(kSlab);
    arena.chunk_slabs.reserve(arena.chunk_slabs.size() + 1);
    for (size_t i = 0; i < kSlab; ++i) {
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

Pool::Arena* Pool::find_arena(uintptr_t key) const {
  const ArenaTable* t = table_.load(std::memory_order_acquire);
  for (size_t i = alloc::AddressHash{}(key)&t->mask;; i = (i + 1) & t->mask) {
    Arena* a = t->slots[i].arena.load(std::memory_order_acquire);
    if (!a || t->slots[i].key.load(std::memory_order_relaxed) == key) return a;
  }
}

Pool::Arena& Pool::arena_for(gpumem_stream_t stream) {
  const uintptr_t key = stream_key(stream);
  if (Arena* a = find_arena(key)) return *a;
  std::lock_guard<SpinLock> lock(mutex_);
  if (Arena* a = find_arena(key)) return *a;  // another thread made it meanwhile
  ArenaTable* t = table_.load(std::memory_order_relaxed);
  // Everything that can fail comes first: a failed call leaves no half-made arena.
  arenas_.reserve(arenas_.size() + 1);
  auto arena = std::make_unique<Arena>(key, stream);
  if (2 * (t->used + 1) > t->mask + 1) {  // keep the table at most half full
    tables_.reserve(tables_.size() + 1);
    auto bigger = std::make_unique<ArenaTable>(2 * (t->mask + 1));
    for (auto& a : arenas_) bigger->insert(a.get());
    t = bigger.get();
    tables_.push_back(std::move(bigger));
    table_.store(t, std::memory_order_release);
  }
  if (!arenas_.empty() && !several_arenas_.load(std::memory_order_relaxed)) {
    // From now on a lone thread's frees publish at once (see publish()), so the first arena's
    // count must be exact first.
    std::lock_guard<SpinLock> first(arenas_.front()->lock);
    several_arenas_.store(true, std::memory_order_relaxed);
    publish(*arenas_.front());
  }
  Arena* a = arena.get();
  arenas_.push_back(std::move(arena));
  t->insert(a);
  return *a;
}

std::vector<Pool::Arena*> Pool::all_arenas() {
  std::vector<Arena*> out;
  std::lock_guard<SpinLock> lock(mutex_);
  out.reserve(arenas_.size());
  for (auto& a : arenas_) out.push_back(a.get());
  return out;
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
  // Memory freed on another stream than the one it came from, or asked about without a stream.
  for (Arena* a : all_arenas())
    if (a != hint)
      if (Chunk* c = look(a)) return c;
  not_owned();
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
  Chunk* rest = nullptr;
  if (best->size > rounded) {  // the remainder is made and registered before any change: both may throw
    rest = new_chunk(arena);
    rest->ptr = best->ptr + rounded;
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

void* Pool::do_allocate(size_t size, gpumem_stream_t stream, size_t& mem_size) {
  if (size > SIZE_MAX - (kRound - 1))
    fail(GPUMEM_ERROR_INVALID_ARGUMENT, "%s overflows rounding to %zu bytes", bytes(size).c_str(), kRound);
  const size_t rounded = (size + kRound - 1) / kRound * kRound;
  mem_size = rounded;
  Arena& arena = arena_for(stream);
  const auto take_own = [&]() -> void* {
    std::lock_guard<SpinLock> lock(arena.lock);
    Chunk* c = take(arena, rounded);
    return c ? hand_out(c, size, stream) : nullptr;
  };
  if (void* p = take_own()) return p;
  // The slow path: frees whose other streams have finished, then another stream's free memory,
  // before the upstream.
  bool has_pending;
  {
    std::lock_guard<SpinLock> lock(mutex_);
    has_pending = !pending_frees_.empty();
  }
  bool settled = false;
  try {
    settled = has_pending && settle_pending(false);
  } catch (const Error&) {
    // A fence the driver could not answer for keeps its chunk pending; this allocation goes on.
  }
  if (settled)
    if (void* p = take_own()) return p;
  if (void* p = take_block_across(arena, rounded, size, stream)) return p;
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
  // Nothing cached fits: grow; when that fails, return cached blocks and retry, then ask the
  // reclaim callbacks and retry once more.
  std::string why;
  bool reclaimed = false;
  for (int attempt = 0; attempt < 3; ++attempt) {
    if (attempt == 1) {
      // The pool cannot grow: a free piece of another stream's block may serve.
      if (void* p = take_across(arena, rounded, size, stream)) return p;
      // Out of memory: the host waits for the pending frees' fences (only those: no device-wide
      // synchronize), then cached blocks go back.
      try {
        settle_pending(true);
      } catch (const Error&) {
        // A fence that cannot be waited for keeps its chunk pending; the retry goes on.
      }
      {
        std::lock_guard<SpinLock> lock(mutex_);
        ++stats_.retries;
      }
      try {
        return_cached_blocks(nullptr);
      } catch (const Error&) {
        // What the upstream would not take back stays cached; the retry goes on regardless.
      }
    } else if (attempt == 2) {
      const ReclaimRunner runner = reclaim_runner.load();
      if (!runner) break;
      reclaimed = true;
      {
        std::lock_guard<SpinLock> lock(mutex_);
        ++stats_.retries;
      }
      runner(device(), size);
    }
    if (attempt > 0)
      if (void* p = take_own()) return p;
    bool over_limit = false;
    try {
      if (void* p = grow(arena, size, rounded, stream, over_limit)) return p;
      why = "the pool's limit";
    } catch (const Error& e) {
      if (e.status() != GPUMEM_ERROR_OUT_OF_MEMORY) throw;
      why = e.what();
    }
  }
  {
    std::lock_guard<SpinLock> lock(mutex_);
    ++stats_.ooms;
  }
  fail_out_of_memory(size, rounded,
                     why + (reclaimed ? "; after returning cached blocks and running the reclaim callbacks"
                                      : "; after returning cached blocks"),
                     arena);
}

void* Pool::grow(Arena& arena, size_t size, size_t rounded, gpumem_stream_t stream, bool& over_limit) {
  if (ranges_) return grow_in_place(arena, size, rounded, stream, over_limit);
  {
    std::lock_guard<SpinLock> lock(mutex_);
    if (limit_ && (stats_.reserved + growing_ + rounded > limit_ || rounded > limit_)) {
      over_limit = true;
      return nullptr;
    }
    growing_ += rounded;
  }
  const auto done_growing = [&](bool reserved) {
    std::lock_guard<SpinLock> lock(mutex_);
    growing_ -= rounded;
    if (reserved) stats_.on_reserve(rounded);
  };
  if (hooked(GPUMEM_HOOK_UPSTREAM_ALLOC_PRE))
    run_hooks(GPUMEM_HOOK_UPSTREAM_ALLOC_PRE, rounded, rounded, nullptr, stream, GPUMEM_SUCCESS);
  void* block = nullptr;
  try {
    block = upstream_->allocate(rounded, stream);
  } catch (...) {
    done_growing(false);
    if (hooked(GPUMEM_HOOK_UPSTREAM_ALLOC_POST))
      run_hooks(GPUMEM_HOOK_UPSTREAM_ALLOC_POST, rounded, rounded, nullptr, stream, current_status());
    throw;
  }
  record(trace::Event::kUpstreamAlloc, rounded, rounded, block, stream);
  if (hooked(GPUMEM_HOOK_UPSTREAM_ALLOC_POST))
    run_hooks(GPUMEM_HOOK_UPSTREAM_ALLOC_POST, rounded, rounded, block, stream, GPUMEM_SUCCESS);
  ArenaLock lock(arena.lock);
  Chunk* c = nullptr;
  try {
    c = new_chunk(arena);
    if (!arena.chunks.emplace(reinterpret_cast<uintptr_t>(block), c).second) {
      delete_chunk(arena, c);
      lock.unlock();
      done_growing(false);
      fail(GPUMEM_ERROR_INTERNAL, "the upstream %s allocator returned %p, which the pool already holds",
           upstream_->kind(), block);
    }
  } catch (const Error&) {
    throw;  // the duplicate above: the block is not the pool's to give back
  } catch (...) {
    if (c) delete_chunk(arena, c);
    lock.unlock();
    done_growing(false);
    upstream_->deallocate(block, stream);
    throw;
  }
  c->ptr = reinterpret_cast<uintptr_t>(block);
  c->size = rounded;
  c->cls = size_class(rounded);
  // In use on its stream again: a new stream at a destroyed one's address, which may lend.
  if (stream_key(stream) == arena.key) arena.unfenceable = false;
  void* p = hand_out(c, size, stream);
  lock.unlock();
  done_growing(true);
  return p;
}

void Pool::fail_out_of_memory(size_t size, size_t rounded, const std::string& why, const Arena& own) {
  // Where the bytes the pool holds are, for the caller to see why they could not serve.
  uint64_t limit, reserved, in_use = 0, pending = 0, largest_pending = 0, whole = 0, pieces = 0;
  uint64_t largest_own = 0, largest_other = 0;
  bool lending = false;
  {
    std::lock_guard<SpinLock> lock(mutex_);
    limit = limit_;
    reserved = stats_.reserved;
    for (const Pending& p : pending_frees_) {
      pending += p.chunk->size;
      largest_pending = std::max<uint64_t>(largest_pending, p.chunk->size);
    }
    lending = order_ && reuse_.load(std::memory_order_relaxed) != StreamReuse::kNever;
    for (auto& a : arenas_) {
      std::lock_guard<SpinLock> arena_lock(a->lock);
      in_use += a->in_use;
      for (int cls = 0; cls < kClasses; ++cls)
        for (const Chunk* c = a->heads[cls]; c; c = c->free_next) {
          (c->prev || c->next ? pieces : whole) += c->size;
          uint64_t& largest = a.get() == &own ? largest_own : largest_other;
          largest = std::max<uint64_t>(largest, c->size);
        }
    }
  }
  std::string remedy;
  if (largest_other >= rounded)
    remedy = format("%s: another stream's arena has %s bytes free in one piece",
                    !order_   ? "the allocation on that stream (arenas over memory no stream uses do not lend)"
                    : lending ? "a stream that may borrow (not the per-thread default stream) from one that "
                                "may lend (not destroyed)"
                              : "lending between streams (gpumem_pool_set_stream_reuse)",
                    grouped(largest_other).c_str());
  else if (largest_pending >= rounded)
    remedy = "the end of the work on the streams that hold its pending frees";
  else if (pieces + whole >= rounded)
    remedy = format("free memory in one piece: %s bytes are free, the largest piece %s",
                    grouped(pieces + whole).c_str(), grouped(std::max(largest_own, largest_other)).c_str());
  else if (limit && reserved - whole + rounded > limit)
    remedy = "a limit of at least " + grouped(reserved - whole + rounded) + " bytes";
  else
    remedy = "freeing " + grouped(rounded - pieces - whole) + " more bytes of what is in use";
  const std::string where = device() >= 0 ? format("on device %d", device()) : std::string("of host memory");
  const std::string limit_text = limit ? "limit " + grouped(limit) : std::string("no limit");
  throw Error(GPUMEM_ERROR_OUT_OF_MEMORY,
              format("out of memory allocating %s (rounded to %s) from the pool %s: %s bytes in use, pool holds %s "
                     "bytes, %s; refused by %s. Of what the pool holds: %s in use, %s free in pieces of split "
                     "blocks, %s in whole free blocks, %s pending on other streams' work; it would have taken %s",
                     bytes(size).c_str(), grouped(rounded).c_str(), where.c_str(), grouped(in_use).c_str(),
                     grouped(reserved).c_str(), limit_text.c_str(), why.c_str(), grouped(in_use).c_str(),
                     grouped(pieces).c_str(), grouped(whole).c_str(), grouped(pending).c_str(), remedy.c_str()));
}

void Pool::do_deallocate(void* p, gpumem_stream_t stream) {
  ArenaLock lock;
  Chunk* c = find_live(reinterpret_cast<uintptr_t>(p), find_arena(stream_key(stream)), lock);
  Arena& arena = *c->arena;
  // Work on the arena's own stream runs in order before its next user's: only other streams'
  // work needs a fence. Memory no stream's work touches (no order_) needs none.
  const bool foreign_free = order_ && stream_key(stream) != arena.key;
  // Handed out across streams. Never so on the per-thread stream, which only its arena uses.
  const bool foreign_alloc = order_ && c->stream != GPUMEM_STREAM_PER_THREAD && stream_key(c->stream) != arena.key;
  if (!foreign_free && !foreign_alloc && !(order_ && c->uses)) {
    finish_free(c, false);
    return;
  }
  std::vector<gpumem_stream_t> others;  // streams whose work may still use the memory
  if (foreign_free) others.push_back(stream);
  if (foreign_alloc && stream_key(c->stream) != stream_key(stream)) others.push_back(c->stream);
  if (c->uses)
    for (gpumem_stream_t u : *c->uses)
      if (stream_key(u) != arena.key && stream_key(u) != stream_key(stream)) others.push_back(u);
  c->pending = true;  // a second free of it is refused from here on
  lock.unlock();
  Fences fences;
  try {
    fences.reserve(others.size());
    for (gpumem_stream_t other : others) fences.push_back(order_->record(other));
    std::lock_guard<SpinLock> shared(mutex_);
    pending_frees_.reserve(pending_frees_.size() + 1);  // before fences move: a failure keeps them to release
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

void Pool::finish_free(Chunk* c, bool undo) {
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
  bool merged = false;
  if (Chunk* n = c->next; n && !n->in_use && !n->hole) {
    merged = true;
    remove_free(arena, n);
    absorb(arena, c, n);
  }
  if (Chunk* pv = c->prev; pv && !pv->in_use && !pv->hole) {
    merged = true;
    remove_free(arena, pv);
    absorb(arena, pv, c);
    c = pv;
  }
  c->freed_at = arena.allocs;
  insert_free(arena, c, merged ? size_class(c->size) : c->cls);
}

bool Pool::settle_pending(bool wait) {
  // One settler at a time: the fences it asks about stay unreleased until it is done. Frees may
  // still queue new pending chunks meanwhile; they wait for the next settler.
  std::unique_lock<std::mutex> settling(settle_mutex_, std::defer_lock);
  if (wait) {
    settling.lock();
  } else if (!settling.try_lock()) {
    return false;  // another thread is settling, perhaps waiting on the GPU: this one goes on
  }
  std::vector<Pending> snapshot;
  {
    std::lock_guard<SpinLock> lock(mutex_);
    if (pending_frees_.empty()) return false;
    snapshot = pending_frees_;
  }
  std::vector<Chunk*> done;
  done.reserve(snapshot.size());
  std::exception_ptr failure;
  for (const Pending& p : snapshot) {  // the driver is asked outside the pool's locks
    bool complete = true;
    try {
      for (auto f : p.fences) {
        if (wait) order_->synchronize(f);
        if (!order_->query(f)) complete = false;
      }
    } catch (...) {
      if (!failure) failure = std::current_exception();
      complete = false;
    }
    if (complete) done.push_back(p.chunk);
  }
  Fences finished;
  size_t fence_count = 0;
  for (const Pending& p : snapshot) fence_count += p.fences.size();
  finished.reserve(fence_count);  // so that nothing below, under the locks, can throw
  {
    std::lock_guard<SpinLock> lock(mutex_);
    for (Chunk* c : done) {
      for (size_t i = 0; i < pending_frees_.size(); ++i) {
        if (pending_frees_[i].chunk != c) continue;
        finished.insert(finished.end(), pending_frees_[i].fences.begin(), pending_frees_[i].fences.end());
        pending_frees_[i] = std::move(pending_frees_.back());
        pending_frees_.pop_back();
        std::lock_guard<SpinLock> own(c->arena->lock);
        finish_free(c, false);
        break;
      }
    }
  }
  for (auto f : finished) order_->release(f);
  if (failure) std::rethrow_exception(failure);
  return !done.empty();
}

bool Pool::may_lend(const Arena& source, const Arena& own, gpumem_stream_t stream) const {
  return order_ && reuse_.load(std::memory_order_relaxed) != StreamReuse::kNever && &source != &own &&
         stream != GPUMEM_STREAM_PER_THREAD && source.stream != GPUMEM_STREAM_PER_THREAD;
}

bool Pool::fence_after(Arena& source, gpumem_stream_t stream) {
  alloc::StreamOrder::Fence fence = nullptr;
  try {
    fence = order_->record(source.stream);
    if (reuse_.load(std::memory_order_relaxed) == StreamReuse::kHostWait)
      order_->synchronize(fence);
    else
      order_->wait(stream, fence);
  } catch (...) {
    // The caller takes its memory back whatever went wrong; only a driver's refusal to record
    // says the stream is gone (no host memory for an event says nothing about it).
    if (fence) {
      order_->release(fence);
    } else if (const gpumem_status_t st = current_status();
               st != GPUMEM_ERROR_OUT_OF_MEMORY && st != GPUMEM_ERROR_INTERNAL) {
      std::lock_guard<SpinLock> lock(source.lock);
      source.unfenceable = true;  // its stream is gone: lend none of its memory again
    }
    return false;
  }
  order_->release(fence);
  return true;
}

void* Pool::take_block_across(Arena& own, size_t rounded, size_t size, gpumem_stream_t stream) {
  Arena* source = nullptr;
  Chunk* c = nullptr;
  for (Arena* other : all_arenas()) {
    if (!may_lend(*other, own, stream)) continue;
    std::lock_guard<SpinLock> lock(other->lock);
    if (other->unfenceable) continue;
    // A busy stream that frees a block often takes it again at once: taking its only fitting
    // block would make it take one back in turn, each time through a fence. So a block is taken
    // from a stream seen for the first time, or idle since last seen (no allocation), or that
    // has another fitting block to spare, or that left this one unused for kStaleAllocs of its
    // own allocations.
    const bool first_seen = other->allocs_seen == kNeverSeen;
    const bool idle = other->allocs == other->allocs_seen;
    other->allocs_seen = other->allocs;
    // A bounded look for a whole block of up to twice the size: a bigger one stays with its
    // stream, which is likely to want it back, rather than be split for a small request.
    const size_t most = rounded <= SIZE_MAX / 2 ? 2 * rounded : SIZE_MAX;
    const int last = size_class(most);
    int budget = 64, fitting = 0;
    Chunk* found = nullptr;
    for (int cls = other->find_from(size_class(rounded)); cls >= 0 && cls <= last && budget > 0 && fitting < 2;
         cls = other->find_from(cls + 1))
      for (Chunk* f = other->heads[cls]; f && budget > 0 && fitting < 2; f = f->free_next, --budget)
        if (!f->prev && !f->next && f->size >= rounded && f->size <= most && !fitting++) found = f;
    if (found && (first_seen || idle || fitting > 1 || other->allocs - found->freed_at >= kStaleAllocs)) {
      c = found;
      remove_free(*other, c);
      c->in_use = c->pending = true;  // in transit: neither free nor anyone's, so a free of it is refused
      source = other;
      break;
    }
  }
  if (!c) return nullptr;
  // Everything the source stream did with the block was queued there before now.
  bool moved = fence_after(*source, stream);
  if (moved) {
    std::lock_guard<SpinLock> lock(own.lock);
    try {
      own.chunks.emplace(c->ptr, c);
    } catch (...) {
      moved = false;  // no room to list it: it stays where it was
    }
  }
  {
    std::lock_guard<SpinLock> lock(source->lock);
    if (moved) {
      source->chunks.erase(c->ptr);
    } else {
      c->in_use = c->pending = false;
      insert_free(*source, c, size_class(c->size));
      return nullptr;
    }
  }
  std::lock_guard<SpinLock> lock(own.lock);
  c->arena = &own;  // its chunk object comes along: chunks are never freed before the pool
  c->in_use = c->pending = false;
  insert_free(own, c, size_class(c->size));
  Chunk* taken = take(own, rounded);  // the block fits, so only a failure to split leaves it cached
  return hand_out(taken, size, stream);
}

void* Pool::take_across(Arena& own, size_t rounded, size_t size, gpumem_stream_t stream) {
  Arena* source = nullptr;
  Chunk* c = nullptr;
  void* p = nullptr;
  for (Arena* other : all_arenas()) {
    if (!may_lend(*other, own, stream)) continue;
    std::lock_guard<SpinLock> lock(other->lock);
    if (other->unfenceable) continue;
    if ((c = take(*other, rounded))) {
      source = other;
      p = hand_out(c, size, stream);
      break;
    }
  }
  if (!p) return nullptr;
  // Everything the source stream did with the memory was queued there before now.
  if (!fence_after(*source, stream)) {
    std::lock_guard<SpinLock> lock(source->lock);
    finish_free(c, true);
    return nullptr;
  }
  return p;
}

void Pool::set_stream_reuse(StreamReuse reuse) { reuse_.store(reuse, std::memory_order_relaxed); }

void Pool::record_stream(void* p, gpumem_stream_t stream) {
  if (stream == GPUMEM_STREAM_PER_THREAD)
    fail(GPUMEM_ERROR_INVALID_ARGUMENT,
         "the per-thread default stream names another stream on every thread, so the free could not fence it; "
         "record the stream's handle or use another stream");
  ArenaLock lock;
  Chunk* c = find_live(reinterpret_cast<uintptr_t>(p), nullptr, lock);
  if (!order_ || stream_key(stream) == c->arena->key) return;  // nothing to fence
  if (c->uses) {
    for (gpumem_stream_t u : *c->uses)
      if (stream_key(u) == stream_key(stream)) return;
    c->uses->push_back(stream);
  } else {
    c->uses = new std::vector<gpumem_stream_t>{stream};
  }
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

void Pool::collect_whole_blocks(Arena& arena, std::vector<Block>& out) {
  out.reserve(out.size() + arena.free_blocks);  // so that nothing below can throw half way
  for (int w = 0; w < kWords; ++w) {
    for (uint64_t bits = arena.words[w]; bits; bits &= bits - 1) {
      Chunk* c = arena.heads[(w << 6) + __builtin_ctzll(bits)];
      while (c) {
        Chunk* next = c->free_next;
        if (!c->prev && !c->next) {
          remove_free(arena, c);
          out.push_back(Block{c->ptr, c->size, &arena});
          arena.chunks.erase(c->ptr);
          delete_chunk(arena, c);
        }
        c = next;
      }
    }
  }
}

void Pool::give_back(std::vector<Block>& blocks) {
  std::exception_ptr first;
  for (const Block& b : blocks) {
    try {
      upstream_->deallocate(reinterpret_cast<void*>(b.ptr), b.arena->stream);
      record(trace::Event::kUpstreamFree, b.size, b.size, reinterpret_cast<void*>(b.ptr), b.arena->stream);
      std::lock_guard<SpinLock> lock(mutex_);
      stats_.on_unreserve(b.size);
    } catch (...) {
      if (!first) first = std::current_exception();
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
}

void Pool::return_cached_blocks(const uintptr_t* key) {
  std::exception_ptr first;
  for (Arena* a : all_arenas()) {
    if (key && a->key != *key) continue;
    std::vector<Block> blocks;
    try {
      if (ranges_) {
        unmap_free(*a);
        continue;
      }
      {
        std::lock_guard<SpinLock> lock(a->lock);
        collect_whole_blocks(*a, blocks);
      }
      give_back(blocks);
    } catch (...) {
      if (!first) first = std::current_exception();
    }
  }
  if (first) std::rethrow_exception(first);
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

alloc::Stats Pool::stats() {
  alloc::Stats s;
  std::vector<Arena*> arenas;
  {
    std::lock_guard<SpinLock> lock(mutex_);
    s = stats_;
    arenas.reserve(arenas_.size());
    for (auto& a : arenas_) arenas.push_back(a.get());
  }
  for (Arena* a : arenas) {
    std::lock_guard<SpinLock> lock(a->lock);
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
  for (auto& a : arenas_) {
    std::lock_guard<SpinLock> own(a->lock);
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
                                state == GPUMEM_BLOCK_IN_USE ? c->stream : a->stream});
      }
    }
  std::sort(out.begin(), out.end(), [](const BlockInfo& x, const BlockInfo& y) { return x.address < y.address; });
  return out;
}

void Pool::set_limit(uint64_t limit) {
  std::lock_guard<SpinLock> lock(mutex_);
  limit_ = limit;
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
  for (size_t i = 0; i <= table->mask; ++i) arenas_in_table += table->slots[i].arena.load() != nullptr;
  if (arenas_in_table != arenas_.size() || table->used != arenas_.size()) broken("the arena table misses an arena");
  for (auto& arena : arenas_) {
    if (find_arena(arena->key) != arena.get()) broken("an arena cannot be found by its key");
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
          if (!c->in_use && !c->next->in_use && c->hole == c->next->hole) broken("two free neighbours were not merged");
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
