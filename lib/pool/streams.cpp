// Streams: frees fenced on other streams' work, and memory lent between streams' arenas.
#include "pool/pool.hpp"

#include <algorithm>
#include <atomic>
#include <cstring>

#include "gpumem/pool.h"
#include "pool/pool_parts.hpp"

namespace gpumem::pool {
namespace {

constexpr uint64_t kStaleAllocs = 16;

}  // namespace

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

bool Pool::may_borrow(gpumem_stream_t stream) const {
  return order_ && reuse_.load(std::memory_order_relaxed) != StreamReuse::kNever && stream != GPUMEM_STREAM_PER_THREAD;
}

bool Pool::may_lend(const Arena& source, const Arena& own, gpumem_stream_t stream) const {
  return may_borrow(stream) && &source != &own && source.stream() != GPUMEM_STREAM_PER_THREAD;
}

bool Pool::fence_after(Arena& source, gpumem_stream_t stream) {
  alloc::StreamOrder::Fence fence = nullptr;
  try {
    fence = order_->record(source.stream());
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
  if (!may_borrow(stream)) return nullptr;  // before the walk: its cost grows with the streams
  Arena* source = nullptr;
  Chunk* c = nullptr;
  for (Arena* other : all_arenas()) {
    if (!may_lend(*other, own, stream)) continue;
    std::lock_guard<SpinLock> lock(other->lock);
    // Again under the lock: the arena may have been retired and reused for another stream since.
    if (other->unfenceable || other->retired || !may_lend(*other, own, stream)) continue;
    merge_deferred(*other);
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
  // The block moves under a chunk object of its new arena's: an arena's chunk objects go with it
  // when it retires.
  Chunk* n = nullptr;
  if (moved) {
    std::lock_guard<SpinLock> lock(own.lock);
    try {
      n = new_chunk(own);
      n->ptr = c->ptr;
      n->size = c->size;
      n->in_use = n->pending = true;  // in transit
      own.chunks.emplace(n->ptr, n);
    } catch (...) {
      if (n) delete_chunk(own, n);
      moved = false;  // no room to list it: it stays where it was
    }
  }
  {
    std::lock_guard<SpinLock> lock(source->lock);
    if (!moved) {
      c->in_use = c->pending = false;
      insert_free(*source, c, size_class(c->size));
      return nullptr;
    }
    source->chunks.erase(c->ptr);
    delete_chunk(*source, c);
  }
  {
    std::lock_guard<SpinLock> lock(mutex_);
    segments_.at(n->ptr).arena = &own;
    retire_later(*source);
  }
  std::lock_guard<SpinLock> lock(own.lock);
  n->in_use = n->pending = false;
  // Freed anew in this arena, as far as page reclaim goes: the source stream's work on it is done
  // once this stream's, which waits for it, is.
  n->freed_at = own.allocs;
  n->freed_seq = ++own.free_seq;
  insert_free(own, n, size_class(n->size));
  Chunk* taken = take(own, rounded);  // the block fits, so only a failure to split leaves it cached
  return hand_out(taken, size, stream);
}

void* Pool::take_across(Arena& own, size_t rounded, size_t size, gpumem_stream_t stream) {
  if (!may_borrow(stream)) return nullptr;
  Arena* source = nullptr;
  Chunk* c = nullptr;
  void* p = nullptr;
  for (Arena* other : all_arenas()) {
    if (!may_lend(*other, own, stream)) continue;
    std::lock_guard<SpinLock> lock(other->lock);
    // Again under the lock: the arena may have been retired and reused for another stream since.
    if (other->unfenceable || other->retired || !may_lend(*other, own, stream)) continue;
    merge_deferred(*other);
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
  if (!order_ || stream_key(stream) == c->arena->key()) return;  // nothing to fence
  if (c->uses) {
    for (gpumem_stream_t u : *c->uses)
      if (stream_key(u) == stream_key(stream)) return;
    c->uses->push_back(stream);
  } else {
    c->uses = new std::vector<gpumem_stream_t>{stream};
  }
}

}  // namespace gpumem::pool
