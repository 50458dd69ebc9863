// The pool's ordering of memory between streams, without a GPU: a stream order whose fences are
// positions in per-stream work counters that the test completes by hand, so every case can see
// what the pool recorded, waited for and released, and what it handed out while other streams'
// work was still running. Links the library's objects: the pool's stream order is not in the ABI.
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <new>
#include <set>
#include <string>

#include "alloc/raw.hpp"
#include "pool/pool.hpp"
#include "test_check.hpp"

using gpumem::alloc::StreamOrder;
using gpumem::pool::Pool;
using gpumem::pool::StreamReuse;

namespace {

gpumem_stream_t stream(int n) { return reinterpret_cast<gpumem_stream_t>(uintptr_t(0x1000) * n); }
const gpumem_stream_t kS1 = stream(1), kS2 = stream(2), kS3 = stream(3), kDead = stream(9), kNoHostMemory = stream(10);

// Each stream has work queued and work done; a fence is a stream and a count of queued work.
struct FakeOrder : StreamOrder {
  struct F {
    gpumem_stream_t stream;
    int position;
  };
  std::map<gpumem_stream_t, int> queued, done;
  std::set<F*> live;
  int attempts = 0, records = 0, waits = 0, host_waits = 0, releases = 0;
  std::string log;

  void work(gpumem_stream_t s) { ++queued[s]; }
  void finish(gpumem_stream_t s) { done[s] = queued[s]; }
  Fence record(gpumem_stream_t s) override {
    ++attempts;
    if (s == kDead) gpumem::fail(GPUMEM_ERROR_DRIVER, "the stream was destroyed");
    if (s == kNoHostMemory) throw std::bad_alloc();
    ++records;
    auto* f = new F{s, queued[s]};
    live.insert(f);
    return f;
  }
  void wait(gpumem_stream_t s, Fence fence) override {
    ++waits;
    log += "wait " + std::to_string(reinterpret_cast<uintptr_t>(s)) + " on " +
           std::to_string(reinterpret_cast<uintptr_t>(static_cast<F*>(fence)->stream)) + "; ";
  }
  bool query(Fence fence) override {
    const F* f = static_cast<F*>(fence);
    return done[f->stream] >= f->position;
  }
  void synchronize(Fence fence) override {
    ++host_waits;
    F* f = static_cast<F*>(fence);
    if (done[f->stream] < f->position) done[f->stream] = f->position;
  }
  void release(Fence fence) noexcept override {
    F* f = static_cast<F*>(fence);
    if (!live.erase(f)) {
      std::printf("a fence was released twice or never recorded\n");
      std::abort();
    }
    ++releases;
    delete f;
  }
};

struct Setup {
  FakeOrder order;
  gpumem::alloc::Allocator* host = gpumem::alloc::make_host(512);
  std::unique_ptr<Pool> pool;
  explicit Setup(uint64_t limit = 0, StreamReuse reuse = StreamReuse::kNever) {
    pool = std::make_unique<Pool>(host, limit, &order);
    pool->set_stream_reuse(reuse);
  }
  ~Setup() {
    if (pool) pool->free_all_live();  // as gpumem_allocator_destroy_force(): every block goes back
    pool.reset();
    delete host;
  }
  void* alloc(size_t n, gpumem_stream_t s) { return pool->allocate(n, s); }
  void free(void* p, gpumem_stream_t s) { pool->deallocate(p, s); }
  uint64_t reserved() { return pool->stats().reserved; }
};

gpumem_status_t status_of(void (*f)(Setup&, void*, gpumem_stream_t), Setup& s, void* p, gpumem_stream_t st) {
  try {
    f(s, p, st);
    return GPUMEM_SUCCESS;
  } catch (const gpumem::Error& e) {
    return e.status();
  }
}

void same_stream_needs_no_fence() {
  const char* test = "same_stream_needs_no_fence";
  Setup s;
  void* p = s.alloc(1000, kS1);
  s.order.work(kS1);
  s.free(p, kS1);
  CHECK(s.alloc(1000, kS1) == p);  // reused at once: the stream's own order keeps it safe
  CHECK(s.order.records == 0);
  s.pool->check_invariants();
}

void free_on_another_stream_waits_for_it() {
  const char* test = "free_on_another_stream_waits_for_it";
  Setup s;
  void* p = s.alloc(1000, kS1);
  s.order.work(kS2);  // kernels on S2 still read p
  s.free(p, kS2);
  CHECK(s.order.records == 1);
  CHECK(s.pool->info().pending == 1024);
  CHECK(s.pool->stats().in_use == 0);  // freed, as far as the caller is concerned
  s.pool->check_invariants();
  void* q = s.alloc(1000, kS1);
  CHECK(q != p);  // S2's work has not ended: p may not be handed out yet
  s.order.finish(kS2);
  void* r = s.alloc(1000, kS1);
  CHECK(r == p);  // now it may
  CHECK(s.pool->info().pending == 0);
  CHECK(s.order.releases == 1 && s.order.live.empty());
  CHECK(s.order.host_waits == 0);  // asked, never waited for
  s.free(q, kS1);
  s.free(r, kS1);
  s.pool->check_invariants();
}

void recorded_stream_fences_the_free() {
  const char* test = "recorded_stream_fences_the_free";
  Setup s;
  void* p = s.alloc(4096, kS1);
  s.pool->record_stream(p, kS3);
  s.pool->record_stream(p, kS3);  // once is enough
  s.pool->record_stream(p, kS1);  // its own stream needs nothing
  s.order.work(kS3);
  s.free(p, kS1);
  CHECK(s.order.records == 1);
  CHECK(s.alloc(4096, kS1) != p);
  s.order.finish(kS3);
  CHECK(s.alloc(4096, kS1) == p);
  s.pool->check_invariants();
  try {
    s.pool->record_stream(p, GPUMEM_STREAM_PER_THREAD);
    CHECK(!"the per-thread stream was accepted");
  } catch (const gpumem::Error& e) {
    CHECK(e.status() == GPUMEM_ERROR_INVALID_ARGUMENT);
  }
}

void pending_frees_settle_independently() {
  const char* test = "pending_frees_settle_independently";
  Setup s;
  void* a = s.alloc(1000, kS1);
  void* b = s.alloc(1000, kS1);
  s.order.work(kS2);
  s.order.work(kS3);
  s.free(a, kS2);  // first in, but its stream is slow
  s.free(b, kS3);
  s.order.finish(kS3);
  // b's stream is done: b comes back although a, freed before it, is still waiting.
  CHECK(s.alloc(1000, kS1) == b);
  CHECK(s.pool->info().pending == 1024);
  s.pool->check_invariants();
}

void double_free_while_pending_is_refused() {
  const char* test = "double_free_while_pending_is_refused";
  Setup s;
  void* p = s.alloc(1000, kS1);
  s.order.work(kS2);
  s.free(p, kS2);
  const gpumem_status_t st = status_of([](Setup& x, void* q, gpumem_stream_t t) { x.free(q, t); }, s, p, kS2);
  CHECK(st == GPUMEM_ERROR_NOT_OWNED);
  CHECK(s.order.records == 1);
  s.pool->check_invariants();
}

void failed_fence_leaves_the_allocation_live() {
  const char* test = "failed_fence_leaves_the_allocation_live";
  Setup s;
  void* p = s.alloc(1000, kS1);
  const gpumem_status_t st = status_of([](Setup& x, void* q, gpumem_stream_t t) { x.free(q, t); }, s, p, kDead);
  CHECK(st == GPUMEM_ERROR_DRIVER);
  CHECK(s.pool->stats().in_use == 1024);  // nothing changed
  s.pool->check_invariants();
  s.free(p, kS1);  // and it can still be freed
  CHECK(s.pool->stats().in_use == 0);
  s.pool->check_invariants();
}

void reuse_across_streams_by_policy() {
  const char* test = "reuse_across_streams_by_policy";
  for (StreamReuse reuse : {StreamReuse::kNever, StreamReuse::kFenceWait, StreamReuse::kHostWait}) {
    Setup s(0, reuse);
    void* p = s.alloc(8192, kS1);
    s.order.work(kS1);
    s.free(p, kS1);
    const uint64_t before = s.reserved();
    void* q = s.alloc(8192, kS2);
    if (reuse == StreamReuse::kNever) {
      CHECK(q != p && s.reserved() > before);  // CuPy's rule: S1's memory stays S1's
      CHECK(s.order.records == 0);
    } else {
      CHECK(q == p && s.reserved() == before);  // S1's free block moved to S2 instead of growing
      CHECK(s.order.records == 1 && s.order.releases == 1);
      if (reuse == StreamReuse::kFenceWait) {
        CHECK(s.order.waits == 1 && s.order.host_waits == 0);
        CHECK(s.order.log.find("wait 8192 on 4096") != std::string::npos);  // S2 waits for S1
      } else {
        CHECK(s.order.waits == 0 && s.order.host_waits == 1);
      }
      // The block is S2's now: freed there, S2 has it back at once, with no fence.
      s.order.work(kS2);
      s.free(q, kS2);
      CHECK(s.pool->info().pending == 0);
      CHECK(s.alloc(8192, kS2) == p);
      CHECK(s.order.records == 1);
      s.free(p, kS2);
      // And S1 takes it back after S2's work, as S2 took it.
      CHECK(s.alloc(8192, kS1) == p);
      CHECK(s.order.records == 2 && s.order.releases == 2);
      CHECK(s.reserved() == before);
    }
    s.pool->check_invariants();
  }
}

void a_busy_stream_keeps_its_only_block() {
  const char* test = "a_busy_stream_keeps_its_only_block";
  Setup s(0, StreamReuse::kFenceWait);
  void* p = s.alloc(8192, kS1);
  s.free(p, kS1);
  void* q = s.alloc(8192, kS2);  // S1 seen for the first time: its block moves to S2
  CHECK(q == p && s.order.records == 1);
  void* r = s.alloc(8192, kS1);  // S1 allocates again, and grows: it is busy
  CHECK(r != p);
  s.free(r, kS1);
  void* t = s.alloc(8192, kS2);  // S1's one block stays with it: S2 grows
  CHECK(t != r && s.order.records == 1);
  s.free(t, kS2);
  s.free(q, kS2);                   // S2 has two free blocks now
  s.free(s.alloc(8192, kS1), kS1);  // S1 busy again
  void* x = s.alloc(8192, kS3);     // S1 keeps its one; S2, busy too, has one to spare
  CHECK((x == t || x == q) && s.order.records == 2);
  void* y = s.alloc(8192, kS3);  // S1 has not allocated since it was last seen: idle, so it lends
  CHECK(y == r && s.order.records == 3);
  s.free(x, kS3);
  s.free(y, kS3);
  s.pool->check_invariants();
}

void a_block_left_unused_by_a_busy_stream_is_spare() {
  const char* test = "a_block_left_unused_by_a_busy_stream_is_spare";
  Setup s(0, StreamReuse::kFenceWait);
  void* big = s.alloc(65536, kS1);
  s.free(s.alloc(512, kS1), kS1);   // a block of its own for the small allocations below
  s.free(s.alloc(8192, kS2), kS2);  // S2 has looked at S1 once (it had nothing free then)
  s.free(big, kS1);
  for (int i = 0; i < 15; ++i) s.free(s.alloc(512, kS1), kS1);  // busy, but not with big
  void* kept = s.alloc(40000, kS2);                             // within 16 allocations of its free: S1 keeps it
  CHECK(kept != big);
  for (int i = 0; i < 16; ++i) s.free(s.alloc(512, kS1), kS1);
  void* taken = s.alloc(40000, kS2);
  CHECK(taken == big);  // 16 of S1's allocations went by without it: it is spare
  s.free(taken, kS2);
  s.free(kept, kS2);
  s.pool->check_invariants();
}

void a_fence_that_cannot_be_made_keeps_the_block_where_it_was() {
  const char* test = "a_fence_that_cannot_be_made_keeps_the_block_where_it_was";
  Setup s(0, StreamReuse::kFenceWait);
  void* p = s.alloc(8192, kNoHostMemory);
  s.free(p, kNoHostMemory);
  void* q = s.alloc(8192, kS2);  // taking p needs a fence, which fails for want of host memory
  CHECK(q != p && s.reserved() == 2 * 8192 && s.order.attempts == 1);
  s.pool->check_invariants();    // p is free in its own arena again, neither lost nor in transit
  void* r = s.alloc(8192, kS3);  // not taken for a destroyed stream: tried again, fails again
  CHECK(r != p && r != q && s.order.attempts == 2);
  CHECK(s.alloc(8192, kNoHostMemory) == p);
  s.free(p, kNoHostMemory);
  s.free(q, kS2);
  s.free(r, kS3);
  s.pool->release(nullptr, true);
  CHECK(s.reserved() == 0 && s.order.live.empty());
}

void a_block_much_bigger_than_asked_stays_with_its_stream() {
  const char* test = "a_block_much_bigger_than_asked_stays_with_its_stream";
  Setup s(0, StreamReuse::kFenceWait);
  void* big = s.alloc(65536, kS1);
  s.free(big, kS1);
  void* small = s.alloc(8192, kS2);  // S1's 64 KiB block is 8 times too big to split for it
  CHECK(small != big && s.reserved() == 65536 + 8192 && s.order.records == 0);
  s.free(small, kS2);
  void* near = s.alloc(40000, kS2);  // within twice: S1's block moves to S2
  CHECK(near == big && s.reserved() == 65536 + 8192 && s.order.records == 1);
  s.free(near, kS2);
  s.pool->check_invariants();
}

void pieces_are_lent_only_when_the_pool_cannot_grow() {
  const char* test = "pieces_are_lent_only_when_the_pool_cannot_grow";
  Setup s(0, StreamReuse::kFenceWait);
  void* whole = s.alloc(16384, kS1);
  s.free(whole, kS1);
  void* half = s.alloc(8192, kS1);  // S1's block is split: 8 KiB in use, 8 KiB free
  CHECK(half == whole);
  void* grown = s.alloc(8192, kS2);  // no whole block to move: S2 grows rather than borrow
  CHECK(s.reserved() == 16384 + 8192 && s.order.records == 0);
  s.free(grown, kS2);
  s.pool->release(kS2, false);
  s.pool->set_limit(16384);
  void* lent = s.alloc(8192, kS2);  // at the limit: S1's free piece is lent, fenced
  CHECK(lent == static_cast<char*>(whole) + 8192);
  CHECK(s.reserved() == 16384 && s.order.records == 1 && s.order.waits == 1);
  s.order.work(kS2);
  s.free(lent, kS2);  // the piece goes back to S1's arena once S2's work is done
  CHECK(s.pool->info().pending == 8192);
  s.order.finish(kS2);
  s.free(half, kS1);
  s.pool->release(nullptr, true);
  CHECK(s.reserved() == 0);  // settled, merged whole again and returned
  CHECK(s.order.live.empty());
  s.pool->check_invariants();
}

void per_thread_stream_lends_and_borrows_nothing() {
  const char* test = "per_thread_stream_lends_and_borrows_nothing";
  Setup s(0, StreamReuse::kFenceWait);
  void* p = s.alloc(8192, GPUMEM_STREAM_PER_THREAD);
  s.free(p, GPUMEM_STREAM_PER_THREAD);
  CHECK(s.alloc(8192, kS2) != p);
  void* q = s.alloc(8192, kS2);
  s.free(q, kS2);
  CHECK(s.alloc(8192, GPUMEM_STREAM_PER_THREAD) != q);
  CHECK(s.order.records == 0);
  s.pool->check_invariants();
}

void destroyed_stream_lends_nothing() {
  const char* test = "destroyed_stream_lends_nothing";
  Setup s(0, StreamReuse::kFenceWait);
  void* p = s.alloc(8192, kDead);
  s.free(p, kDead);
  const uint64_t allocs = s.pool->stats().allocs;
  void* q = s.alloc(8192, kS2);
  CHECK(q != p);                                // recording on its stream failed: the pool grew instead
  CHECK(s.pool->stats().allocs == allocs + 1);  // the attempt that was taken back does not count
  void* r = s.alloc(8192, kS3);
  CHECK(r != p);  // and it is not tried again
  s.pool->check_invariants();
}

void out_of_memory_waits_for_pending_frees_only() {
  const char* test = "out_of_memory_waits_for_pending_frees_only";
  Setup s(8192);  // room for 8 KiB in all
  void* p = s.alloc(8192, kS1);
  s.order.work(kS2);
  s.free(p, kS2);
  void* q = s.alloc(8192, kS1);  // nothing else fits under the limit: the host waits for S2's fence
  CHECK(q != nullptr);
  CHECK(s.order.host_waits == 1);  // that fence alone
  CHECK(s.pool->stats().reserved == 8192);
  CHECK(s.pool->info().pending == 0);
  s.pool->check_invariants();
}

void release_and_destroy_with_pending_frees() {
  const char* test = "release_and_destroy_with_pending_frees";
  {
    Setup s;
    void* p = s.alloc(8192, kS1);
    s.order.work(kS2);
    s.free(p, kS2);
    s.pool->release(nullptr, true);
    CHECK(s.reserved() == 8192);  // still pending: not given back
    CHECK(s.order.host_waits == 0);
    s.pool->check_invariants();
    s.order.finish(kS2);
    s.pool->release(nullptr, true);
    CHECK(s.reserved() == 0);  // the work ended: settled and given back
    CHECK(s.order.live.empty() && s.order.host_waits == 0);
    s.pool->check_invariants();
  }
  Setup s;  // the pool's destruction waits for the fence and releases it (FakeOrder aborts otherwise)
  void* p = s.alloc(8192, kS1);
  s.order.work(kS2);
  s.free(p, kS2);
  s.pool.reset();
  CHECK(s.order.live.empty() && s.order.host_waits == 1);
}

void memory_without_order_needs_no_fences() {
  const char* test = "memory_without_order_needs_no_fences";
  gpumem::alloc::Allocator* host = gpumem::alloc::make_host(512);
  {
    Pool pool(host, 0);
    pool.set_stream_reuse(StreamReuse::kFenceWait);
    void* p = pool.allocate(1000, kS1);
    pool.deallocate(p, kS2);  // plain host memory: no stream's work touches it
    CHECK(pool.info().pending == 0);
    CHECK(pool.allocate(1000, kS1) == p);
    pool.check_invariants();
    pool.deallocate(p, kS1);
  }
  delete host;
}

}  // namespace

int main() {
  same_stream_needs_no_fence();
  free_on_another_stream_waits_for_it();
  recorded_stream_fences_the_free();
  pending_frees_settle_independently();
  double_free_while_pending_is_refused();
  failed_fence_leaves_the_allocation_live();
  reuse_across_streams_by_policy();
  a_busy_stream_keeps_its_only_block();
  a_block_left_unused_by_a_busy_stream_is_spare();
  a_block_much_bigger_than_asked_stays_with_its_stream();
  a_fence_that_cannot_be_made_keeps_the_block_where_it_was();
  pieces_are_lent_only_when_the_pool_cannot_grow();
  per_thread_stream_lends_and_borrows_nothing();
  destroyed_stream_lends_nothing();
  out_of_memory_waits_for_pending_frees_only();
  release_and_destroy_with_pending_frees();
  memory_without_order_needs_no_fences();
  std::printf("%s\n", failures ? "FAILED" : "all stream-order cases passed");
  return failures ? 1 : 0;
}
