#include "pool/pool.hpp"

#include <atomic>
#include <cstring>

namespace gpumem::pool {
namespace {

// Size classes: exact below 64 units of kRound (32 KiB), then 32 classes per power of two, so a
// class is at most 1/32 of its sizes wide. A bitmap over the classes finds the next non-empty one.
constexpr int kExactClasses = 64;
constexpr int kSubClasses = 32;
constexpr int kClasses = kExactClasses + 49 * kSubClasses;  // units below 2^55: sizes below 2^64
constexpr int kWords = (kClasses + 63) / 64;

int size_class(size_t rounded) {
  const uint64_t units = rounded / kRound;
  if (units < kExactClasses) return static_cast<int>(units);
  const int top = 63 - __builtin_clzll(units);
  const int sub = static_cast<int>((units >> (top - 5)) & (kSubClasses - 1));
  return kExactClasses + (top - 6) * kSubClasses + sub;
}

// The chunks scanned in the request's own class for the best fit, before moving up a class.
constexpr int kScan = 16;

std::atomic<Pool::ReclaimRunner> reclaim_runner{nullptr};

// The per-thread default stream is a different stream on every thread: its arena key is an
// address no stream object can have.
thread_local char per_thread_stream_tag;

uintptr_t stream_key(gpumem_stream_t stream) {
  const auto value = reinterpret_cast<uintptr_t>(stream);
  if (value == 0 || value == 1) return 1;  // NULL is the legacy stream
  if (value == 2) return reinterpret_cast<uintptr_t>(&per_thread_stream_tag);
  return value;
}

}  // namespace

struct Pool::Chunk {
  uintptr_t ptr;
  size_t size;
  size_t requested;
  Chunk* prev;  // neighbours in the same upstream block
  Chunk* next;
  Chunk* free_prev;  // in its class's free list
  Chunk* free_next;
  Arena* arena;
  gpumem_stream_t stream;              // in use: the stream it was handed out on
  std::vector<gpumem_stream_t>* uses;  // in use: other streams it is used on (record_stream); usually NULL
  int cls;                             // the size class of its size (kept while in use, for the free)
  bool in_use;                         // handed out, or freed and pending: never merged
  bool pending;                        // freed, waiting for fences in pending_frees_
};

struct Pool::Arena {
  Arena(uintptr_t k, gpumem_stream_t s) : key(k), stream(s) {}
  uintptr_t key;
  gpumem_stream_t stream;
  uint64_t summary = 0;  // bit w set: words[w] is not 0
  std::array<uint64_t, kWords> words{};
  std::array<Chunk*, kClasses> heads{};
  uint64_t free_blocks = 0;
  uint64_t free_bytes = 0;
  bool unfenceable = false;  // recording on its stream failed (destroyed by its owner): lend nothing

  // The first non-empty class at or above c, or -1.
  int find_from(int c) const {
    if (c >= kClasses) return -1;
    int w = c >> 6;
    uint64_t bits = words[w] & (~uint64_t{0} << (c & 63));
    if (bits) return (w << 6) + __builtin_ctzll(bits);
    const uint64_t rest = w + 1 < 64 ? summary & (~uint64_t{0} << (w + 1)) : 0;
    if (!rest) return -1;
    w = __builtin_ctzll(rest);
    return (w << 6) + __builtin_ctzll(words[w]);
  }
};

void Pool::set_reclaim_runner(ReclaimRunner runner) { reclaim_runner.store(runner); }

Pool::Pool(alloc::Allocator* upstream, uint64_t limit) : Pool(upstream, limit, upstream->stream_order()) {}

Pool::Pool(alloc::Allocator* upstream, uint64_t limit, alloc::StreamOrder* order)
    : alloc::Allocator(upstream->device(), "pool"),
      upstream_(upstream),
      order_(order),
      reuse_(order ? StreamReuse::kFenceWait : StreamReuse::kNever),
      limit_(limit) {
  upstream_->retain();
}

Pool::~Pool() {
  try {
    settle_pending(true);
  } catch (...) {
    // A fence that cannot be waited for keeps its chunk; its block stays with the upstream.
  }
  std::vector<Block> blocks;
  {
    std::lock_guard<SpinLock> lock(mutex_);
    reserve_blocks(blocks, nullptr, true);
    for (auto& arena : arenas_) collect_whole_blocks(*arena, blocks);
  }
  try {
    give_back(blocks);
  } catch (...) {
    // The upstream refused some blocks back; nothing more can be done for them now.
  }
  upstream_->unretain();
}

Pool::Chunk* Pool::new_chunk() {
  if (!spare_chunks_) {
    constexpr size_t kSlab = 256;
    auto slab = std::make_unique<Chunk[]>(kSlab);
    chunk_slabs_.reserve(chunk_slabs_.size() + 1);
    for (size_t i = 0; i < kSlab; ++i) {
      slab[i].free_next = spare_chunks_;
      spare_chunks_ = &slab[i];
    }
    chunk_slabs_.push_back(std::move(slab));
  }
  Chunk* c = spare_chunks_;
  spare_chunks_ = c->free_next;
  std::memset(static_cast<void*>(c), 0, sizeof *c);
  return c;
}

void Pool::delete_chunk(Chunk* c) {
  c->free_next = spare_chunks_;
  spare_chunks_ = c;
}

Pool::Arena& Pool::arena_for(gpumem_stream_t stream) {
  // The per-thread stream's key differs by thread, so only other streams can skip the key.
  if (last_arena_ && stream == last_arena_->stream && stream != GPUMEM_STREAM_PER_THREAD) return *last_arena_;
  const uintptr_t key = stream_key(stream);
  if (last_arena_ && last_arena_->key == key) return *last_arena_;
  for (auto& arena : arenas_)
    if (arena->key == key) return *(last_arena_ = arena.get());
  arenas_.reserve(arenas_.size() + 1);
  arenas_.push_back(std::make_unique<Arena>(key, stream));
  return *(last_arena_ = arenas_.back().get());
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
    rest = new_chunk();
    rest->ptr = best->ptr + rounded;
    try {
      chunks_.emplace(rest->ptr, rest);
    } catch (...) {
      delete_chunk(rest);
      throw;
    }
  }
  remove_free(arena, best);
  if (rest) {
    rest->size = best->size - rounded;
    rest->prev = best;
    rest->next = best->next;
    if (rest->next) rest->next->prev = rest;
    rest->arena = &arena;
    best->next = rest;
    best->size = rounded;
    insert_free(arena, rest, size_class(rest->size));
  }
  best->cls = cls;  // its size is now the request's: the class to free it into
  return best;
}

void* Pool::hand_out(Chunk* c, size_t size, gpumem_stream_t stream) {
  c->in_use = true;
  c->stream = stream;
  c->requested = size;
  ++live_count_;
  stats_.on_alloc(c->size, size);
  return reinterpret_cast<void*>(c->ptr);
}

void* Pool::do_allocate(size_t size, gpumem_stream_t stream, size_t& mem_size) {
  if (size > SIZE_MAX - (kRound - 1))
    fail(GPUMEM_ERROR_INVALID_ARGUMENT, "%s overflows rounding to %zu bytes", bytes(size).c_str(), kRound);
  const size_t rounded = (size + kRound - 1) / kRound * kRound;
  mem_size = rounded;
  Arena* arena;
  bool has_pending;
  {
    std::lock_guard<SpinLock> lock(mutex_);
    arena = &arena_for(stream);
    if (Chunk* c = take(*arena, rounded)) return hand_out(c, size, stream);
    has_pending = !pending_frees_.empty();
  }
  // The slow path: frees whose other streams have finished, then another stream's free memory,
  // before the upstream.
  bool settled = false;
  try {
    settled = has_pending && settle_pending(false);
  } catch (const Error&) {
    // A fence the driver could not answer for keeps its chunk pending; this allocation goes on.
  }
  if (settled) {
    std::lock_guard<SpinLock> lock(mutex_);
    if (Chunk* c = take(*arena, rounded)) return hand_out(c, size, stream);
  }
  if (void* p = take_across(*arena, rounded, size, stream)) return p;
  bool beyond_limit;
  {
    std::lock_guard<SpinLock> lock(mutex_);
    beyond_limit = limit_ && rounded > limit_;
    if (beyond_limit) ++stats_.ooms;
  }
  // Nothing could make room for it: refused before the cache is given back.
  if (beyond_limit) fail_out_of_memory(size, rounded, "the pool's limit, which the request alone exceeds");
  // Nothing cached fits: grow; when that fails, return cached blocks and retry, then ask the
  // reclaim callbacks and retry once more.
  std::string why;
  bool reclaimed = false;
  for (int attempt = 0; attempt < 3; ++attempt) {
    if (attempt == 1) {
      // Out of memory: the host waits for the pending frees' fences (only those: no device-wide
      // synchronize), then cached blocks go back.
      try {
        settle_pending(true);
      } catch (const Error&) {
        // A fence that cannot be waited for keeps its chunk pending; the retry goes on.
      }
      std::vector<Block> blocks;
      {
        std::lock_guard<SpinLock> lock(mutex_);
        ++stats_.retries;
        reserve_blocks(blocks, nullptr, true);
        for (auto& a : arenas_) collect_whole_blocks(*a, blocks);
      }
      try {
        give_back(blocks);
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
    if (attempt > 0) {
      std::lock_guard<SpinLock> lock(mutex_);
      if (Chunk* c = take(*arena, rounded)) return hand_out(c, size, stream);
    }
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
                                      : "; after returning cached blocks"));
}

void* Pool::grow(Arena*& arena, size_t size, size_t rounded, gpumem_stream_t stream, bool& over_limit) {
  {
    std::lock_guard<SpinLock> lock(mutex_);
    if (limit_ && (stats_.reserved + pending_ + rounded > limit_ || rounded > limit_)) {
      over_limit = true;
      return nullptr;
    }
    pending_ += rounded;
  }
  if (hooked(GPUMEM_HOOK_UPSTREAM_ALLOC_PRE))
    run_hooks(GPUMEM_HOOK_UPSTREAM_ALLOC_PRE, rounded, rounded, nullptr, stream, GPUMEM_SUCCESS);
  void* block = nullptr;
  try {
    block = upstream_->allocate(rounded, stream);
  } catch (...) {
    {
      std::lock_guard<SpinLock> lock(mutex_);
      pending_ -= rounded;
    }
    gpumem_status_t status = GPUMEM_ERROR_OUT_OF_MEMORY;  // what a bad_alloc means
    try {
      throw;
    } catch (const Error& e) {
      status = e.status();
    } catch (...) {
    }
    if (hooked(GPUMEM_HOOK_UPSTREAM_ALLOC_POST))
      run_hooks(GPUMEM_HOOK_UPSTREAM_ALLOC_POST, rounded, rounded, nullptr, stream, status);
    throw;
  }
  if (hooked(GPUMEM_HOOK_UPSTREAM_ALLOC_POST))
    run_hooks(GPUMEM_HOOK_UPSTREAM_ALLOC_POST, rounded, rounded, block, stream, GPUMEM_SUCCESS);
  std::unique_lock<SpinLock> lock(mutex_);
  pending_ -= rounded;
  Chunk* c = nullptr;
  try {
    c = new_chunk();
    if (!chunks_.emplace(reinterpret_cast<uintptr_t>(block), c).second) {
      delete_chunk(c);
      lock.unlock();
      fail(GPUMEM_ERROR_INTERNAL, "the upstream %s allocator returned %p, which the pool already holds",
           upstream_->kind(), block);
    }
  } catch (...) {
    if (c) delete_chunk(c);
    lock.unlock();
    upstream_->deallocate(block, stream);
    throw;
  }
  stats_.on_reserve(rounded);
  c->ptr = reinterpret_cast<uintptr_t>(block);
  c->size = rounded;
  c->cls = size_class(rounded);
  c->arena = arena;
  return hand_out(c, size, stream);
}

void Pool::fail_out_of_memory(size_t size, size_t rounded, const std::string& why) {
  alloc::Stats s;
  uint64_t limit;
  {
    std::lock_guard<SpinLock> lock(mutex_);
    s = stats_;
    limit = limit_;
  }
  const std::string where = device() >= 0 ? format("on device %d", device()) : std::string("of host memory");
  const std::string limit_text = limit ? "limit " + grouped(limit) : std::string("no limit");
  throw Error(GPUMEM_ERROR_OUT_OF_MEMORY,
              format("out of memory allocating %s (rounded to %s) from the pool %s: %s bytes in use, pool holds %s "
                     "bytes, %s; refused by %s",
                     bytes(size).c_str(), grouped(rounded).c_str(), where.c_str(), grouped(s.in_use).c_str(),
                     grouped(s.reserved).c_str(), limit_text.c_str(), why.c_str()));
}

void Pool::do_deallocate(void* p, gpumem_stream_t stream) {
  std::vector<gpumem_stream_t> others;  // streams whose work may still use the memory
  Chunk* c;
  {
    std::lock_guard<SpinLock> lock(mutex_);
    const auto it = chunks_.find(reinterpret_cast<uintptr_t>(p));
    if (it == chunks_.end() || !it->second->in_use || it->second->pending)
      fail(GPUMEM_ERROR_NOT_OWNED, "%p was not allocated by this pool, or is freed already (out-of-pool memory)", p);
    c = it->second;
    const Arena& arena = *c->arena;
    // Work on the arena's own stream runs in order before its next user's: only other streams'
    // work needs a fence. Memory no stream's work touches (no order_) needs none.
    if (!order_) {
      finish_free(c, false);
      return;
    }
    const bool foreign_free = stream_key(stream) != arena.key;
    // Handed out across streams. Never so on the per-thread stream, which only its arena uses.
    const bool foreign_alloc = c->stream != GPUMEM_STREAM_PER_THREAD && stream_key(c->stream) != arena.key;
    if (!foreign_free && !foreign_alloc && !c->uses) {
      finish_free(c, false);
      return;
    }
    if (foreign_free) others.push_back(stream);
    if (foreign_alloc && stream_key(c->stream) != stream_key(stream)) others.push_back(c->stream);
    if (c->uses)
      for (gpumem_stream_t u : *c->uses)
        if (stream_key(u) != arena.key && stream_key(u) != stream_key(stream)) others.push_back(u);
    pending_frees_.reserve(pending_frees_.size() + 1);  // so that queueing it below cannot fail
    c->pending = true;                                  // a second free of it is refused from here on
  }
  Fences fences;
  try {
    fences.reserve(others.size());
    for (gpumem_stream_t other : others) fences.push_back(order_->record(other));
  } catch (...) {
    for (auto f : fences) order_->release(f);
    std::lock_guard<SpinLock> lock(mutex_);
    c->pending = false;  // still the caller's, as before the call
    throw;
  }
  std::lock_guard<SpinLock> lock(mutex_);
  --live_count_;
  stats_.on_free(c->size, c->requested);
  delete c->uses;
  c->uses = nullptr;
  pending_frees_.push_back(Pending{c, std::move(fences)});
}

void Pool::finish_free(Chunk* c, bool undo) {
  if (!c->pending) {
    --live_count_;
    stats_.on_free(c->size, c->requested);
    if (undo) {  // the allocation never reached its caller: it counts as neither
      --stats_.allocs;
      --stats_.frees;
    }
  }
  delete c->uses;
  c->uses = nullptr;
  c->in_use = false;
  c->pending = false;
  Arena& arena = *c->arena;
  // keep takes in its next neighbour gone, which leaves the block.
  const auto absorb = [this](Chunk* keep, Chunk* gone) {
    keep->size += gone->size;
    keep->next = gone->next;
    if (keep->next) keep->next->prev = keep;
    chunks_.erase(gone->ptr);
    delete_chunk(gone);
  };
  bool merged = false;
  if (Chunk* n = c->next; n && !n->in_use) {
    merged = true;
    remove_free(arena, n);
    absorb(c, n);
  }
  if (Chunk* pv = c->prev; pv && !pv->in_use) {
    merged = true;
    remove_free(arena, pv);
    absorb(pv, c);
    c = pv;
  }
  insert_free(arena, c, merged ? size_class(c->size) : c->cls);
}

bool Pool::settle_pending(bool wait) {
  // One settler at a time: the fences it asks about stay unreleased until it is done. Frees may
  // still queue new pending chunks meanwhile; they wait for the next settler.
  std::lock_guard<std::mutex> settling(settle_mutex_);
  std::vector<Pending> snapshot;
  {
    std::lock_guard<SpinLock> lock(mutex_);
    if (pending_frees_.empty()) return false;
    snapshot = pending_frees_;
  }
  std::vector<Chunk*> done;
  done.reserve(snapshot.size());
  std::exception_ptr failure;
  for (const Pending& p : snapshot) {  // the driver is asked outside the pool's lock
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
  finished.reserve(fence_count);  // so that nothing below, under the lock, can throw
  {
    std::lock_guard<SpinLock> lock(mutex_);
    for (Chunk* c : done) {
      for (size_t i = 0; i < pending_frees_.size(); ++i) {
        if (pending_frees_[i].chunk != c) continue;
        finished.insert(finished.end(), pending_frees_[i].fences.begin(), pending_frees_[i].fences.end());
        pending_frees_[i] = std::move(pending_frees_.back());
        pending_frees_.pop_back();
        finish_free(c, false);
        break;
      }
    }
  }
  for (auto f : finished) order_->release(f);
  if (failure) std::rethrow_exception(failure);
  return !done.empty();
}

Pool::Chunk* Pool::take_from_other_stream(Arena& own, size_t rounded, Arena*& source) {
  for (auto& other : arenas_) {
    // Another thread's per-thread default stream cannot be named from this thread to fence it.
    if (other.get() == &own || other->unfenceable || other->stream == GPUMEM_STREAM_PER_THREAD) continue;
    if (Chunk* c = take(*other, rounded)) {
      source = other.get();
      return c;
    }
  }
  return nullptr;
}

void* Pool::take_across(Arena& own, size_t rounded, size_t size, gpumem_stream_t stream) {
  // The per-thread default stream is kept to its own memory: a chunk it took could not be fenced
  // from the thread that frees it.
  if (!order_ || stream == GPUMEM_STREAM_PER_THREAD) return nullptr;
  Arena* source = nullptr;
  void* p = nullptr;
  StreamReuse reuse;
  {
    std::lock_guard<SpinLock> lock(mutex_);
    reuse = reuse_;
    if (reuse == StreamReuse::kNever) return nullptr;
    Chunk* c = take_from_other_stream(own, rounded, source);
    if (!c) return nullptr;
    p = hand_out(c, size, stream);
  }
  // Everything the source stream did with the memory was queued there before now.
  alloc::StreamOrder::Fence fence = nullptr;
  try {
    fence = order_->record(source->stream);
    if (reuse == StreamReuse::kHostWait)
      order_->synchronize(fence);
    else
      order_->wait(stream, fence);
  } catch (const Error&) {
    if (fence) order_->release(fence);
    std::lock_guard<SpinLock> lock(mutex_);
    if (!fence) source->unfenceable = true;  // its stream is gone: lend none of its memory again
    finish_free(chunks_.at(reinterpret_cast<uintptr_t>(p)), true);
    return nullptr;
  }
  order_->release(fence);
  return p;
}

void Pool::set_stream_reuse(StreamReuse reuse) {
  std::lock_guard<SpinLock> lock(mutex_);
  reuse_ = reuse;
}

void Pool::record_stream(void* p, gpumem_stream_t stream) {
  if (stream == GPUMEM_STREAM_PER_THREAD)
    fail(GPUMEM_ERROR_INVALID_ARGUMENT,
         "the per-thread default stream names another stream on every thread, so the free could not fence it; "
         "record the stream's handle or use another stream");
  std::lock_guard<SpinLock> lock(mutex_);
  const auto it = chunks_.find(reinterpret_cast<uintptr_t>(p));
  if (it == chunks_.end() || !it->second->in_use || it->second->pending)
    fail(GPUMEM_ERROR_NOT_OWNED, "%p is not a live allocation of this pool", p);
  Chunk* c = it->second;
  if (!order_ || stream_key(stream) == c->arena->key) return;  // nothing to fence
  if (!c->uses) c->uses = new std::vector<gpumem_stream_t>;
  for (gpumem_stream_t u : *c->uses)
    if (stream_key(u) == stream_key(stream)) return;
  c->uses->push_back(stream);
}

void Pool::sizes_of(void* p, size_t& size, size_t& mem_size) {
  std::lock_guard<SpinLock> lock(mutex_);
  const auto it = chunks_.find(reinterpret_cast<uintptr_t>(p));
  const bool live = it != chunks_.end() && it->second->in_use && !it->second->pending;
  size = live ? it->second->requested : 0;
  mem_size = live ? it->second->size : 0;
}

void Pool::collect_whole_blocks(Arena& arena, std::vector<Block>& out) {
  // The caller reserved room for every free block of the arenas it collects from, so nothing
  // below can throw half way.
  for (int w = 0; w < kWords; ++w) {
    for (uint64_t bits = arena.words[w]; bits; bits &= bits - 1) {
      Chunk* c = arena.heads[(w << 6) + __builtin_ctzll(bits)];
      while (c) {
        Chunk* next = c->free_next;
        if (!c->prev && !c->next) {
          remove_free(arena, c);
          out.push_back(Block{c->ptr, c->size, &arena});
          chunks_.erase(c->ptr);
          delete_chunk(c);
        }
        c = next;
      }
    }
  }
}

void Pool::reserve_blocks(std::vector<Block>& blocks, const uintptr_t* key, bool all_streams) {
  size_t count = 0;
  for (auto& arena : arenas_)
    if (all_streams || arena->key == *key) count += arena->free_blocks;
  blocks.reserve(count);
}

void Pool::give_back(std::vector<Block>& blocks) {
  std::exception_ptr first;
  for (const Block& b : blocks) {
    try {
      upstream_->deallocate(reinterpret_cast<void*>(b.ptr), b.arena->stream);
      std::lock_guard<SpinLock> lock(mutex_);
      stats_.on_unreserve(b.size);
    } catch (...) {
      if (!first) first = std::current_exception();
      // Still the pool's: cache it again rather than lose track of it.
      std::lock_guard<SpinLock> lock(mutex_);
      Chunk* c = new_chunk();
      c->ptr = b.ptr;
      c->size = b.size;
      c->arena = b.arena;
      chunks_.emplace(c->ptr, c);
      insert_free(*b.arena, c, size_class(c->size));
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
  std::vector<Block> blocks;
  {
    std::lock_guard<SpinLock> lock(mutex_);
    const uintptr_t key = stream_key(stream);
    reserve_blocks(blocks, &key, all_streams);
    for (auto& arena : arenas_)
      if (all_streams || arena->key == key) collect_whole_blocks(*arena, blocks);
  }
  give_back(blocks);
  if (unsettled) std::rethrow_exception(unsettled);
}

Info Pool::info() {
  std::lock_guard<SpinLock> lock(mutex_);
  Info i;
  i.used = stats_.in_use;
  i.total = stats_.reserved;
  i.limit = limit_;
  i.arenas = static_cast<uint32_t>(arenas_.size());
  for (const Pending& p : pending_frees_) i.pending += p.chunk->size;
  for (auto& arena : arenas_) {
    i.free += arena->free_bytes;
    i.free_blocks += arena->free_blocks;
  }
  return i;
}

void Pool::set_limit(uint64_t limit) {
  std::lock_guard<SpinLock> lock(mutex_);
  limit_ = limit;
}

void Pool::live(uint64_t& count, uint64_t& bytes) {
  std::lock_guard<SpinLock> lock(mutex_);
  count = live_count_;
  bytes = stats_.in_use;
}

void Pool::free_all_live() {
  std::vector<uintptr_t> live;
  {
    std::lock_guard<SpinLock> lock(mutex_);
    live.reserve(live_count_);
    for (const auto& [ptr, chunk] : chunks_)
      if (chunk->in_use && !chunk->pending) live.push_back(ptr);
  }
  for (uintptr_t p : live) {
    std::lock_guard<SpinLock> lock(mutex_);
    finish_free(chunks_.at(p), false);  // forced: no stream's work counts any more
  }
}

void Pool::check_invariants() {
  std::lock_guard<SpinLock> lock(mutex_);
  const auto broken = [](const char* what) { fail(GPUMEM_ERROR_INTERNAL, "pool invariant broken: %s", what); };
  uint64_t free_total = 0, used_total = 0, requested_total = 0, block_total = 0;
  std::vector<Chunk*> starts;
  for (auto& arena : arenas_) {
    uint64_t blocks = 0, bytes_free = 0;
    for (int cls = 0; cls < kClasses; ++cls) {
      const bool bit = arena->words[cls >> 6] >> (cls & 63) & 1;
      if (bit != (arena->heads[cls] != nullptr)) broken("a class's bitmap bit disagrees with its list");
      for (Chunk* c = arena->heads[cls]; c; c = c->free_next) {
        if (c->in_use) broken("a chunk in a free list is in use");
        if (c->arena != arena.get()) broken("a free chunk is listed in another arena");
        if (size_class(c->size) != cls) broken("a free chunk is in the wrong class");
        if (c->free_next && c->free_next->free_prev != c) broken("a free list's back link is wrong");
        if (chunks_.count(c->ptr) == 0 || chunks_.at(c->ptr) != c) broken("a free chunk is not in the chunk map");
        ++blocks;
        bytes_free += c->size;
      }
    }
    for (int w = 0; w < kWords; ++w)
      if (bool(arena->words[w]) != bool(arena->summary >> w & 1)) broken("the summary bitmap disagrees");
    if (blocks != arena->free_blocks || bytes_free != arena->free_bytes) broken("an arena's free counts are wrong");
    free_total += bytes_free;
  }
  uint64_t live = 0, free_chunks = 0, walked = 0, pending_total = 0, pending_chunks = 0;
  for (const auto& [ptr, c] : chunks_) {
    if (c->ptr != ptr) broken("the chunk map disagrees with its chunk");
    if (c->pending) {
      if (!c->in_use) broken("a pending chunk is not kept from merging");
      if (c->uses) broken("a pending chunk still lists streams");
      pending_total += c->size;
      ++pending_chunks;
    } else if (c->in_use) {
      if (c->cls != size_class(c->size)) broken("a chunk in use has a stale size class");
      ++live;
      used_total += c->size;
      requested_total += c->requested;
    } else {
      if (c->uses) broken("a free chunk lists streams");
      ++free_chunks;
    }
    if (!c->prev) starts.push_back(c);
  }
  uint64_t listed = 0;
  for (auto& arena : arenas_) listed += arena->free_blocks;
  if (live != live_count_) broken("the count of live allocations is wrong");
  if (free_chunks != listed) broken("a free chunk is missing from the free lists");
  for (Chunk* c : starts) {
    for (; c; c = c->next) {
      ++walked;
      if (c->size == 0 || c->size % kRound) broken("a chunk's size is not a positive multiple of the rounding");
      block_total += c->size;
      if (c->next) {
        if (c->next->prev != c) broken("a block's back link is wrong");
        if (c->ptr + c->size != c->next->ptr) broken("neighbours in a block are not contiguous");
        if (!c->in_use && !c->next->in_use) broken("two free neighbours were not merged");
        if (c->next->arena != c->arena) broken("a block spans two arenas");
      }
    }
  }
  if (walked != chunks_.size()) broken("a chunk is in the map but in no block");
  if (used_total != stats_.in_use) broken("bytes in use disagree with the statistics");
  if (requested_total != stats_.requested) broken("bytes requested disagree with the statistics");
  if (block_total != stats_.reserved) broken("bytes held disagree with the upstream blocks");
  if (pending_chunks != pending_frees_.size()) broken("the pending frees disagree with their chunks");
  if (free_total + used_total + pending_total != stats_.reserved)
    broken("used, free and pending do not add up to the total");
}

}  // namespace gpumem::pool
