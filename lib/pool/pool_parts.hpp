// The pool's parts, shared by its files: size classes, chunks and arenas.
#pragma once

#include <chrono>

#include "pool/pool.hpp"

namespace gpumem::pool {

// Size classes: exact below 64 units of kRound (32 KiB), then 32 classes per power of two, so a
// class is at most 1/32 of its sizes wide. A bitmap over the classes finds the next non-empty one.
constexpr int kExactClasses = 64;
constexpr int kSubClasses = 32;
constexpr int kClasses = kExactClasses + 49 * kSubClasses;  // units below 2^55: sizes below 2^64
constexpr int kWords = (kClasses + 63) / 64;

inline int size_class(size_t rounded) {
  const uint64_t units = rounded / kRound;
  if (units < kExactClasses) return static_cast<int>(units);
  const int top = 63 - __builtin_clzll(units);
  const int sub = static_cast<int>((units >> (top - 5)) & (kSubClasses - 1));
  return kExactClasses + (top - 6) * kSubClasses + sub;
}

// The per-thread default stream is a different stream on every thread: its arena key is an
// address no stream object can have.
inline thread_local char per_thread_stream_tag;

inline uintptr_t stream_key(gpumem_stream_t stream) {
  const auto value = reinterpret_cast<uintptr_t>(stream);
  if (value == 0 || value == 1) return 1;  // NULL is the legacy stream
  if (value == 2) return reinterpret_cast<uintptr_t>(&per_thread_stream_tag);
  return value;
}

// Makes room for one more element, growing geometrically: reserve(size() + 1) would reallocate
// exactly that much every time, which makes n insertions cost n^2. Throws before any change.
template <typename Vector>
void room_for_one(Vector& v) {
  if (v.size() == v.capacity()) v.reserve(v.capacity() < 8 ? 8 : 2 * v.capacity());
}

// Over ranges: an address rounded down and up to a unit (a power of two).
inline uintptr_t align_down(uintptr_t x, size_t unit) { return x & ~(uintptr_t{unit} - 1); }
inline uintptr_t align_up(uintptr_t x, size_t unit) { return align_down(x + unit - 1, unit); }

// Nanoseconds on a steady clock, for the driver time of growth.
inline uint64_t now_ns() {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
          .count());
}

// Arena::allocs_seen of an arena no other stream has looked into yet.
constexpr uint64_t kNeverSeen = UINT64_MAX;

// The status of the exception being handled, as the C boundary reports it.
inline gpumem_status_t current_status() {
  try {
    throw;
  } catch (const Error& e) {
    return e.status();
  } catch (const std::bad_alloc&) {
    return GPUMEM_ERROR_OUT_OF_MEMORY;
  } catch (...) {
    return GPUMEM_ERROR_INTERNAL;
  }
}

struct Pool::Chunk {
  uintptr_t ptr;
  size_t size;
  size_t requested;
  Chunk* prev;  // neighbours in the same upstream block
  Chunk* next;
  Chunk* free_prev;  // in its class's free list, or in its arena's holes
  Chunk* free_next;
  Arena* arena;
  gpumem_stream_t stream;              // in use: the stream it was handed out on
  std::vector<gpumem_stream_t>* uses;  // in use: other streams it is used on (record_stream); usually NULL
  int cls;                             // the size class of its size (kept while in use, for the free)
  bool in_use;                         // handed out, or freed and pending: never merged
  bool pending;                        // freed, waiting for fences in pending_frees_; or in transit
  bool hole;                           // addresses with nothing mapped (over ranges): in the holes list
  bool deferred;                       // free, not merged with its free neighbours yet: in the arena's deferred list
  Chunk* defer_prev;                   // in that list
  Chunk* defer_next;
  uint64_t freed_at;   // free: its arena's allocation count when it was freed
  uint64_t freed_seq;  // free: its arena's free_seq when it was last freed into (0: never used)
};

// A fence recorded on an arena's stream, and the arena's free_seq then: once it completes, the GPU
// is done with every chunk freed up to that count.
struct FencePoint {
  alloc::StreamOrder::Fence fence;  // NULL: none in flight
  uint64_t seq;
};

// Aligned to a cache line so that one thread's arena shares no line with another's. An arena that
// holds nothing is retired and its object kept for the next new stream: threads that found it
// without a lock check its key under its lock (see Pool::allocate_fast), so the object must stay.
struct alignas(64) Pool::Arena {
  Arena(uintptr_t k, gpumem_stream_t s) : key_(k), stream_(s) {}
  // Written only while retired, under the pool's mutex_ and the arena's lock; read anywhere.
  uintptr_t key() const { return key_.load(std::memory_order_relaxed); }
  gpumem_stream_t stream() const { return stream_.load(std::memory_order_relaxed); }
  void assign(uintptr_t k, gpumem_stream_t s) {
    key_.store(k, std::memory_order_relaxed);
    stream_.store(s, std::memory_order_relaxed);
  }
  alignas(64) SpinLock lock;  // guards everything below but key_ and stream_

 private:
  std::atomic<uintptr_t> key_;  // beside the lock: the fast path checks it under the lock
  std::atomic<gpumem_stream_t> stream_;

 public:
  uint32_t pins = 0;     // calls working on the arena outside its lock: it is not retired meanwhile
  bool retired = false;  // held nothing, and is kept for reuse (in spare_arenas_)
  bool noted = false;    // in the pool's emptied_
  size_t index = 0;      // in the pool's arenas_, while not retired
  uint64_t summary = 0;  // bit w set: words[w] is not 0
  std::array<uint64_t, kWords> words{};
  std::array<Chunk*, kClasses> heads{};
  uint64_t free_blocks = 0;
  uint64_t free_bytes = 0;
  Chunk* holes = nullptr;          // over ranges: the chunks of unmapped addresses, in no order
  Chunk* deferred = nullptr;       // chunks freed without merging, newest first (see Pool::merge_deferred)
  Chunk* deferred_last = nullptr;  // the oldest of them
  uint32_t deferred_count = 0;
  bool unfenceable = false;           // recording on its stream failed (destroyed by its owner): lend nothing
  uint64_t allocs_seen = kNeverSeen;  // allocs when another stream last looked for a block to take
  // Every chunk of the arena's blocks, free or in use, by address: a chunk enters when a block
  // arrives or is split and leaves when it is merged or returned, so a cached allocation and its
  // free touch no map entry.
  tsl::robin_map<uintptr_t, Chunk*, alloc::AddressHash> chunks;
  std::vector<std::unique_ptr<Chunk[]>> chunk_slabs;
  Chunk* spare_chunks = nullptr;
  // What was handed out from the arena's blocks and not yet freed.
  uint64_t in_use = 0, requested = 0, live = 0, allocs = 0, frees = 0;
  uint64_t published = 0;  // in_use as last added to the pool's published_in_use_
  // Page reclaim (reclaim.cpp): frees into the lists are counted, and the GPU is known to be done
  // with each free chunk whose freed_seq is at most done_seq, which fences on the stream advance.
  uint64_t free_seq = 0, done_seq = 0;
  // One fence in flight at a time, so that growth on a busy GPU records an event only once the
  // last completed, rather than on every growth (a GPT-style step spent 5.5 ms in growth's driver
  // calls with up to four).
  FencePoint fence{};

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

// Arenas by key, open addressing, read without a lock. Slots are written under the pool's mutex_;
// a reader may see a slot half written or a table being rebuilt in place, so what it finds is a
// hint: it takes the arena's lock and checks the key (a wrong arena), and looks again under mutex_
// when it finds none. A table only ever grows into a new one while readers may use the old one;
// retired arenas leave tombstones, and a table full of them is rebuilt in place.
struct Pool::ArenaTable {
  static constexpr uintptr_t kGone = 0;  // a tombstone's key, with its arena left in place: stream_key() is never 0
  // The key is kept beside the arena so that a probe never reads another arena's cache lines,
  // which their owners write all the time.
  struct Slot {
    std::atomic<uintptr_t> key{0};
    std::atomic<Arena*> arena{nullptr};  // written after key, with release
  };
  explicit ArenaTable(size_t capacity) : mask(capacity - 1), slots(new Slot[capacity]) {}
  const size_t mask;
  const std::unique_ptr<Slot[]> slots;
  size_t used = 0;  // slots with an arena or a tombstone
  size_t live = 0;  // slots with an arena

  Arena* find(uintptr_t key) const {
    for (size_t i = alloc::AddressHash{}(key)&mask;; i = (i + 1) & mask) {
      Arena* a = slots[i].arena.load(std::memory_order_acquire);
      if (!a || slots[i].key.load(std::memory_order_relaxed) == key) return a;
    }
  }
  void insert(Arena* a) {
    size_t i = alloc::AddressHash{}(a->key()) & mask;
    while (slots[i].arena.load(std::memory_order_relaxed) && slots[i].key.load(std::memory_order_relaxed) != kGone)
      i = (i + 1) & mask;
    if (!slots[i].arena.load(std::memory_order_relaxed)) ++used;
    slots[i].key.store(a->key(), std::memory_order_relaxed);
    slots[i].arena.store(a, std::memory_order_release);
    ++live;
  }
  void remove(const Arena* a) {
    for (size_t i = alloc::AddressHash{}(a->key()) & mask;; i = (i + 1) & mask)
      if (slots[i].arena.load(std::memory_order_relaxed) == a &&
          slots[i].key.load(std::memory_order_relaxed) == a->key()) {
        slots[i].key.store(kGone, std::memory_order_relaxed);  // the arena pointer stays: probes go on past it
        --live;
        return;
      }
  }
  // Empties the table and lists the arenas again, without their tombstones.
  void rebuild(const std::vector<std::unique_ptr<Arena>>& arenas) {
    for (size_t i = 0; i <= mask; ++i) {
      slots[i].arena.store(nullptr, std::memory_order_relaxed);
      slots[i].key.store(0, std::memory_order_relaxed);
    }
    used = live = 0;
    for (auto& a : arenas) insert(a.get());
  }
};

// Growth from the upstream, told to the hooks and counted in one place: work() takes memory from
// the upstream (one allocation, or maps), adds the bytes and calls it made to bytes and calls, and
// returns the first address taken; it throws what the upstream threw, after which the hooks are told
// of the failure. asked is what the hooks are told is asked for. The driver time counted is work()'s.
template <class Work>
void* Pool::from_upstream(uint64_t asked, gpumem_stream_t stream, Work&& work) {
  if (hooked(GPUMEM_HOOK_UPSTREAM_ALLOC_PRE))
    run_hooks(GPUMEM_HOOK_UPSTREAM_ALLOC_PRE, asked, asked, nullptr, stream, GPUMEM_SUCCESS);
  uint64_t bytes = 0, calls = 0;
  void* first = nullptr;
  gpumem_status_t status = GPUMEM_SUCCESS;
  std::exception_ptr failure;
  const uint64_t t0 = now_ns();
  try {
    first = work(bytes, calls);
  } catch (...) {
    failure = std::current_exception();
    status = current_status();
  }
  const uint64_t ns = now_ns() - t0;
  {
    std::lock_guard<SpinLock> lock(mutex_);
    growth_.mapped_bytes += bytes;
    growth_.map_calls += calls;
    growth_.driver_ns += ns;
  }
  if (hooked(GPUMEM_HOOK_UPSTREAM_ALLOC_POST))
    run_hooks(GPUMEM_HOOK_UPSTREAM_ALLOC_POST, asked, asked, failure ? nullptr : first, stream, status);
  if (failure) std::rethrow_exception(failure);
  return first;
}

inline Pool::Arena* Pool::find_arena(uintptr_t key) const { return table_.load(std::memory_order_acquire)->find(key); }

}  // namespace gpumem::pool
