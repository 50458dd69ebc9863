// The pool's parts, shared by its files: size classes, chunks and arenas.
#pragma once

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
  uint64_t freed_at;                   // free: its arena's allocation count when it was freed
};

// Aligned to a cache line so that one thread's arena shares no line with another's.
struct alignas(64) Pool::Arena {
  Arena(uintptr_t k, gpumem_stream_t s) : key(k), stream(s) {}
  const uintptr_t key;
  const gpumem_stream_t stream;  // read by other streams' allocations looking for memory to borrow
  alignas(64) SpinLock lock;     // guards everything below
  uint64_t summary = 0;          // bit w set: words[w] is not 0
  std::array<uint64_t, kWords> words{};
  std::array<Chunk*, kClasses> heads{};
  uint64_t free_blocks = 0;
  uint64_t free_bytes = 0;
  Chunk* holes = nullptr;             // over ranges: the chunks of unmapped addresses, in no order
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

}  // namespace gpumem::pool
