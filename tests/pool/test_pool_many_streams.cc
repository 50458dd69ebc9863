// Many streams on one pool: arenas that hold nothing are retired, so streams that come and go cost
// no memory once their memory is gone, and out of memory does not walk idle streams; and info()
// read while threads move memory between streams is one consistent picture. Links the library's
// objects, for a stream order the test controls (every fence already complete) and the pool's
// invariant walk.
#include <malloc.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <memory>
#include <thread>
#include <vector>

#include "alloc/raw.hpp"
#include "pool/pool.hpp"
#include "test_check.hpp"

using gpumem::pool::Pool;
using gpumem::pool::StreamReuse;

namespace {

constexpr int kStreams = 20000;

gpumem_stream_t stream(int n) { return reinterpret_cast<gpumem_stream_t>(uintptr_t(0x10000) + 16 * uintptr_t(n)); }

// Every stream's work is done at once: fences complete as they are recorded.
struct DoneOrder : gpumem::alloc::StreamOrder {
  std::atomic<int> live{0};
  Fence record(gpumem_stream_t) override {
    ++live;
    return this;
  }
  void wait(gpumem_stream_t, Fence) override {}
  bool query(Fence) override { return true; }
  void synchronize(Fence) override {}
  void release(Fence) noexcept override { --live; }
};

struct Setup {
  DoneOrder order;
  gpumem::alloc::Allocator* host = gpumem::alloc::make_host(512);
  std::unique_ptr<Pool> pool;
  Setup(uint64_t limit, StreamReuse reuse, bool ordered) {
    pool = std::make_unique<Pool>(host, limit, ordered ? &order : nullptr);
    if (ordered) pool->set_stream_reuse(reuse);
  }
  ~Setup() {
    pool->free_all_live();
    pool.reset();
    delete host;
  }
};

#if defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define GPUMEM_SANITIZER_HEAP 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define GPUMEM_SANITIZER_HEAP 1
#endif

#ifdef GPUMEM_SANITIZER_HEAP
extern "C" size_t __sanitizer_get_current_allocated_bytes();  // the sanitizers' allocator interface
#endif

// Bytes of host memory allocated, from the sanitizer's allocator where one replaces malloc's.
size_t heap_in_use() {
#ifdef GPUMEM_SANITIZER_HEAP
  return __sanitizer_get_current_allocated_bytes();
#else
  return mallinfo2().uordblks;
#endif
}

// A new stream for every allocation, each freed on its stream; the next stream takes the last one's
// block (lending by fence), so every arena but the newest is left with nothing.
void streams_that_come_and_go_cost_nothing() {
  const char* test = "streams_that_come_and_go_cost_nothing";
  Setup s(0, StreamReuse::kFenceWait, true);
  size_t heap_after_warmup = 0;
  uint32_t most_arenas = 0;
  for (int i = 0; i < kStreams; ++i) {
    void* p = s.pool->allocate(4096, stream(i));
    s.pool->deallocate(p, stream(i));
    most_arenas = std::max(most_arenas, s.pool->info().arenas);
    if (i == 100) heap_after_warmup = heap_in_use();
  }
  CHECK(most_arenas <= 2);
  CHECK(s.pool->stats().upstream_allocs == 1);  // one block, passed from stream to stream
  // No host memory for the 19,900 streams since (the arena table and spare objects stay).
  CHECK(heap_in_use() < heap_after_warmup + 64 * 1024);
  const auto stats = s.pool->stats();
  CHECK(stats.allocs == kStreams && stats.frees == kStreams);  // counts of retired arenas kept
  s.pool->check_invariants();
}

// Without lending (memory no stream's work touches), each stream caches its block; out of memory
// returns them all, and then the idle streams' arenas are gone.
void out_of_memory_retires_idle_streams() {
  const char* test = "out_of_memory_retires_idle_streams";
  Setup s(uint64_t{kStreams} * 4096, StreamReuse::kNever, false);
  for (int i = 0; i < kStreams; ++i) s.pool->deallocate(s.pool->allocate(4096, stream(i)), stream(i));
  CHECK(s.pool->info().arenas == kStreams);
  const size_t heap_full = heap_in_use();
  // Over the limit with everything cached: the ladder returns every stream's block, then grows.
  const auto start = std::chrono::steady_clock::now();
  void* big = s.pool->allocate(8192, stream(kStreams));
  const double first_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  CHECK(big != nullptr);
  CHECK(s.pool->info().arenas == 1);
  CHECK(heap_in_use() < heap_full);
  // Out of memory now walks one arena, whatever the idle streams were.
  s.pool->set_limit(8192);
  const auto again = std::chrono::steady_clock::now();
  int refused = 0;
  for (int i = 0; i < 1000; ++i) {
    try {
      s.pool->allocate(4096, stream(i));
    } catch (const gpumem::Error& e) {
      refused += e.status() == GPUMEM_ERROR_OUT_OF_MEMORY;
    }
  }
  const double per_oom_us =
      std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - again).count() / 1000;
  CHECK(refused == 1000);
  CHECK(s.pool->info().arenas == 1);  // a failed allocation on a new stream leaves no arena
  std::printf("  %d idle streams: the first out of memory took %.1f ms, later ones %.1f us each\n", kStreams, first_ms,
              per_oom_us);
  s.pool->deallocate(big, stream(kStreams));
  s.pool->check_invariants();
}

// Threads allocate on their own streams and free on each other's, so blocks move between arenas,
// while another reads info(): used + free + pending never exceeds the total.
void info_is_one_picture() {
  const char* test = "info_is_one_picture";
  Setup s(0, StreamReuse::kFenceWait, true);
  std::atomic<bool> stop{false};
  std::atomic<int> over{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      std::vector<void*> held;
      for (int i = 0; i < 20000; ++i) {
        held.push_back(s.pool->allocate(size_t{512} << (i % 9), stream(t + (i & 1) * 4)));
        if (held.size() > 8) {
          s.pool->deallocate(held.front(), stream((t + i) % 8));
          held.erase(held.begin());
        }
        if (i % 64 == 0) s.pool->release(stream(t), false);
      }
      for (void* p : held) s.pool->deallocate(p, stream(t));
    });
  std::thread reader([&] {
    while (!stop.load()) {
      const auto i = s.pool->info();
      if (i.used + i.free + i.pending > i.total) ++over;
    }
  });
  for (auto& t : threads) t.join();
  stop = true;
  reader.join();
  CHECK(over.load() == 0);
  s.pool->check_invariants();
}

}  // namespace

int main() {
  streams_that_come_and_go_cost_nothing();
  out_of_memory_retires_idle_streams();
  info_is_one_picture();
  if (failures) {
    std::printf("FAILED: %d checks\n", failures);
    return 1;
  }
  std::printf("PASSED\n");
  return 0;
}
