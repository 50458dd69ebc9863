// Page reclaim: over an upstream with address ranges, growth first moves the whole units inside
// free chunks of any arena — other streams' first, the oldest freed first — to where memory is
// needed, but only units the GPU is done with, as fences polled on each arena's stream tell. The
// upstream is the caller's functions over host address ranges (host_ranges.h: unmapped memory
// faults when touched), wrapped to count and log every map and unmap and to fail chosen maps; the
// stream order is a fake whose fences are positions in per-stream work counters that the test
// completes by hand (as in test_pool_streams.cc). Every step walks the pool's invariants and
// compares what the pool says it has mapped with what the upstream has. Links the library's
// objects: the stream order and Pool::check_invariants() are not in the ABI.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "alloc/allocator.hpp"
#include "alloc/raw.hpp"
#include "gpumem/gpumem.h"
#include "host_ranges.h"
#include "pool/pool.hpp"
#include "test_check.hpp"

using gpumem::alloc::StreamOrder;
using gpumem::pool::Pool;
using gpumem::pool::StreamReuse;

namespace {

constexpr size_t kUnit = 64 << 10;
constexpr size_t kRange = 64 * kUnit;  // 4 MiB of addresses at a time

gpumem_stream_t stream(int n) { return reinterpret_cast<gpumem_stream_t>(uintptr_t(0x1000) * n); }
const gpumem_stream_t kS1 = stream(1), kS2 = stream(2), kS3 = stream(3);

// Each stream has work queued and work done; a fence is a stream and a count of queued work. A
// stream that waits for a fence queues a step that ends only once the fence's stream has reached
// it, as a CUDA stream waiting for an event: its work done by the test counts only up to there.
struct FakeOrder : StreamOrder {
  struct F {
    gpumem_stream_t stream;
    int position;
  };
  struct Wait {
    int position;  // of the waiting step in its stream's work
    gpumem_stream_t on;
    int on_position;
  };
  std::map<gpumem_stream_t, int> queued, done, records_on;
  std::map<gpumem_stream_t, std::vector<Wait>> waits_of;
  std::set<F*> live;
  int records = 0, waits = 0, host_waits = 0, queries = 0, releases = 0;

  void work(gpumem_stream_t s) { ++queued[s]; }
  void finish(gpumem_stream_t s) { done[s] = queued[s]; }
  // How far the stream's work has run: what the test finished, up to a wait not yet satisfied.
  int reached(gpumem_stream_t s) {
    for (const Wait& w : waits_of[s])
      if (w.position <= done[s] && reached(w.on) < w.on_position) return w.position - 1;
    return done[s];
  }
  void complete(gpumem_stream_t s, int position) {
    for (const Wait& w : waits_of[s])
      if (w.position <= position) complete(w.on, w.on_position);
    if (done[s] < position) done[s] = position;
  }
  Fence record(gpumem_stream_t s) override {
    ++records;
    ++records_on[s];
    auto* f = new F{s, queued[s]};
    live.insert(f);
    return f;
  }
  void wait(gpumem_stream_t s, Fence fence) override {
    ++waits;
    const F* f = static_cast<F*>(fence);
    waits_of[s].push_back(Wait{++queued[s], f->stream, f->position});
  }
  bool query(Fence fence) override {
    ++queries;
    const F* f = static_cast<F*>(fence);
    return reached(f->stream) >= f->position;
  }
  void synchronize(Fence fence) override {
    ++host_waits;
    const F* f = static_cast<F*>(fence);
    complete(f->stream, f->position);
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

// A part of a range that one call mapped or unmapped.
struct Call {
  uintptr_t p;
  size_t size;
};

// host_ranges, with every map and unmap logged, and maps that fail on demand: fail_count of them,
// from the fail_at-th map call after arm(), with fail_status.
struct Upstream {
  host_ranges r{};
  std::vector<Call> maps, unmaps, failed_maps;
  int map_calls = 0, fail_at = 0, fail_count = 0;
  gpumem_status_t fail_status = GPUMEM_ERROR_OUT_OF_MEMORY;

  void arm(int at, int count, gpumem_status_t status) {
    map_calls = 0;
    fail_at = at;
    fail_count = count;
    fail_status = status;
  }

  static Upstream* of(void* context) { return static_cast<Upstream*>(context); }
  static gpumem_status_t reserve(void* c, size_t size, int32_t device, void** out) {
    return host_ranges_reserve(&of(c)->r, size, device, out);
  }
  static gpumem_status_t unreserve(void* c, void* p, size_t size, int32_t device) {
    return host_ranges_unreserve(&of(c)->r, p, size, device);
  }
  static gpumem_status_t map(void* c, void* p, size_t size, int32_t device) {
    Upstream* u = of(c);
    const int call = ++u->map_calls;
    if (u->fail_at && call >= u->fail_at && call < u->fail_at + u->fail_count) {
      u->failed_maps.push_back(Call{reinterpret_cast<uintptr_t>(p), size});
      return u->fail_status;
    }
    const gpumem_status_t st = host_ranges_map(&u->r, p, size, device);
    if (st == GPUMEM_SUCCESS) u->maps.push_back(Call{reinterpret_cast<uintptr_t>(p), size});
    return st;
  }
  static gpumem_status_t unmap(void* c, void* p, size_t size, int32_t device) {
    Upstream* u = of(c);
    const gpumem_status_t st = host_ranges_unmap(&u->r, p, size, device);
    if (st == GPUMEM_SUCCESS) u->unmaps.push_back(Call{reinterpret_cast<uintptr_t>(p), size});
    return st;
  }
  static gpumem_status_t alloc(void* c, size_t size, int32_t device, gpumem_stream_t s, void** out) {
    return host_ranges_alloc(&of(c)->r, size, device, s, out);
  }
  static gpumem_status_t free(void* c, void* p, size_t size, int32_t device, gpumem_stream_t s) {
    return host_ranges_free(&of(c)->r, p, size, device, s);
  }

  gpumem::alloc::Allocator* make() {
    r.unit = kUnit;
    r.range_size = kRange;
    gpumem_allocator_functions_t f = host_ranges_functions(&r);
    f.context = this;
    f.reserve = reserve;
    f.unreserve = unreserve;
    f.map = map;
    f.unmap = unmap;
    f.alloc = alloc;
    f.free = free;
    return gpumem::alloc::make_functions(f);
  }
};

struct Setup {
  FakeOrder order;
  Upstream up;
  gpumem::alloc::Allocator* upstream = up.make();
  std::unique_ptr<Pool> pool;
  // ordered: fences from the fake order; otherwise none, as over memory no stream's work touches.
  explicit Setup(bool ordered, uint64_t limit = 0, StreamReuse reuse = StreamReuse::kNever) {
    pool = std::make_unique<Pool>(upstream, limit, ordered ? &order : nullptr);
    if (ordered) pool->set_stream_reuse(reuse);
  }
  ~Setup() {
    if (pool) pool->free_all_live();
    pool.reset();
    delete upstream;
  }
  unsigned char* alloc(size_t n, gpumem_stream_t s) { return static_cast<unsigned char*>(pool->allocate(n, s)); }
  void free(void* p, gpumem_stream_t s) { pool->deallocate(p, s); }
  uint64_t reserved() { return pool->stats().reserved; }
  // After every step: the pool's structures, and what it says is mapped against the upstream.
  void step(const char* test) {
    try {
      pool->check_invariants();
    } catch (const std::exception& e) {
      std::printf("%s: %s\n", test, e.what());
      ++failures;
    }
    CHECK(reserved() == up.r.mapped);
    CHECK(pool->info().addresses == up.r.reserved);
  }
  // Everything freed, the pool destroyed: nothing left mapped, reserved, or fenced.
  void end(const char* test) {
    step(test);
    pool.reset();
    CHECK(up.r.mapped == 0 && up.r.reserved == 0);
    CHECK(order.live.empty());
  }
};

void fill(unsigned char* p, size_t n, unsigned char pattern) { std::memset(p, pattern, n); }  // faults if unmapped

bool intact(const unsigned char* p, size_t n, unsigned char pattern) {
  for (size_t i = 0; i < n; ++i)
    if (p[i] != pattern) return false;
  return true;
}

// Whether every call from the from-th on lies in [lo, lo + bytes).
bool all_inside(const std::vector<Call>& calls, size_t from, const void* lo, size_t bytes) {
  const auto base = reinterpret_cast<uintptr_t>(lo);
  for (size_t i = from; i < calls.size(); ++i)
    if (calls[i].p < base || calls[i].p + calls[i].size > base + bytes) return false;
  return true;
}

bool any_inside(const std::vector<Call>& calls, size_t from, const void* lo, size_t bytes) {
  const auto base = reinterpret_cast<uintptr_t>(lo);
  for (size_t i = from; i < calls.size(); ++i)
    if (calls[i].p < base + bytes && calls[i].p + calls[i].size > base) return true;
  return false;
}

// 1. Units of S1 whose work has not ended stay; once a fence after their frees completes, they
// serve S2 instead of new memory.
void not_done_units_stay_until_their_fence_completes() {
  const char* test = "not_done_units_stay_until_their_fence_completes";
  Setup s(true);
  unsigned char* b[4];
  for (auto& p : b) {
    p = s.alloc(2 * kUnit, kS1);
    fill(p, 2 * kUnit, 0x11);
    s.step(test);
  }
  CHECK(b[1] == b[0] + 2 * kUnit && b[3] == b[0] + 6 * kUnit);  // one run of 8 units
  s.order.work(kS1);                                            // S1's kernels on them, still running
  for (auto* p : b) {
    s.free(p, kS1);
    s.step(test);
  }
  const uint64_t held = s.reserved();
  CHECK(held == 8 * kUnit);
  size_t unmaps = s.up.unmaps.size();
  unsigned char* p = s.alloc(4 * kUnit, kS2);
  s.step(test);
  CHECK(s.reserved() == held + 4 * kUnit);  // mapped anew: S1's work may still use its units
  CHECK(s.up.unmaps.size() == unmaps);      // nothing of S1's was taken away
  CHECK(s.order.records_on[kS1] == 1);      // a fence after S1's frees, for a later growth
  fill(p, 4 * kUnit, 0x22);
  s.order.finish(kS1);
  unmaps = s.up.unmaps.size();
  const size_t maps = s.up.maps.size();
  unsigned char* q = s.alloc(4 * kUnit, kS2);
  s.step(test);
  CHECK(s.reserved() == held + 4 * kUnit);  // moved: nothing new mapped
  CHECK(s.up.r.mapped == held + 4 * kUnit);
  // Over the caller's functions a move is an unmap and a map per unit: 4 of each, no more.
  CHECK(s.up.unmaps.size() - unmaps == 4 && s.up.maps.size() - maps == 4);
  CHECK(all_inside(s.up.unmaps, unmaps, b[0], 8 * kUnit));  // from S1's free units
  CHECK(all_inside(s.up.maps, maps, q, 4 * kUnit));         // to where S2 needed them
  fill(q, 4 * kUnit, 0x33);
  CHECK(intact(p, 4 * kUnit, 0x22));
  CHECK(s.order.host_waits == 0 && s.order.waits == 0);
  s.free(p, kS2);
  s.free(q, kS2);
  s.end(test);
}

// 2. S1 fills and frees 8 units, its work ends, S2 asks for the same bytes: S1's units move to
// S2, and the pool holds no more than its peak, with neither the host nor S2 waiting for anything.
// Lending is off (kNever), so the units can reach S2 only by moving.
void other_streams_units_serve_without_waiting() {
  const char* test = "other_streams_units_serve_without_waiting";
  Setup s(true);
  unsigned char* b[8];
  for (auto& p : b) {
    p = s.alloc(kUnit, kS1);
    fill(p, kUnit, 0x44);
    s.step(test);
  }
  CHECK(b[7] == b[0] + 7 * kUnit);
  s.order.work(kS1);
  for (auto* p : b) {
    s.free(p, kS1);
    s.step(test);
  }
  const uint64_t peak = s.reserved();
  CHECK(peak == 8 * kUnit && s.pool->stats().peak_reserved == peak);
  s.order.finish(kS1);  // S1's work is over: the fence the growth records on S1 completes at once
  unsigned char* big = s.alloc(8 * kUnit, kS2);
  s.step(test);
  fill(big, 8 * kUnit, 0x55);
  CHECK(s.reserved() == peak && s.pool->stats().peak_reserved == peak);
  CHECK(s.order.records_on[kS1] >= 1);  // asked about S1's work,
  CHECK(s.order.host_waits == 0);       // never waited for it
  CHECK(s.order.waits == 0);            // and S2 waits for nothing: the units moved
  CHECK(s.up.unmaps.size() == 8 && all_inside(s.up.unmaps, 0, b[0], 8 * kUnit));
  s.free(big, kS2);
  s.end(test);
}

// 2b. The same under the default policy (kFenceWait), where the pool may lend S1's memory to S2
// in place, fenced, instead of moving it: however it shares, it holds no more than its peak and
// the host waits for nothing.
void other_streams_memory_serves_under_the_default_policy() {
  const char* test = "other_streams_memory_serves_under_the_default_policy";
  Setup s(true, 0, StreamReuse::kFenceWait);
  unsigned char* b[8];
  for (auto& p : b) {
    p = s.alloc(kUnit, kS1);
    s.step(test);
  }
  s.order.work(kS1);
  for (auto* p : b) {
    s.free(p, kS1);
    s.step(test);
  }
  s.order.finish(kS1);
  const uint64_t peak = s.reserved();
  unsigned char* big = s.alloc(8 * kUnit, kS2);
  s.step(test);
  fill(big, 8 * kUnit, 0x56);
  CHECK(s.reserved() == peak && s.pool->stats().peak_reserved == peak);
  CHECK(s.order.host_waits == 0);
  s.free(big, kS2);
  s.end(test);
}

// Live 1-unit blocks L1, L2, L3 with 3-unit free gaps between them, on S1, each live block filled.
struct Gaps {
  unsigned char *l1, *x1, *l2, *x2, *l3;
};

Gaps make_gaps(Setup& s, const char* test) {
  Gaps g{};
  g.l1 = s.alloc(kUnit, kS1);
  g.x1 = s.alloc(3 * kUnit, kS1);
  g.l2 = s.alloc(kUnit, kS1);
  g.x2 = s.alloc(3 * kUnit, kS1);
  g.l3 = s.alloc(kUnit, kS1);
  s.step(test);
  CHECK(g.x1 == g.l1 + kUnit && g.l2 == g.l1 + 4 * kUnit && g.x2 == g.l1 + 5 * kUnit && g.l3 == g.l1 + 8 * kUnit);
  fill(g.l1, kUnit, 0xa1);
  fill(g.l2, kUnit, 0xa2);
  fill(g.l3, kUnit, 0xa3);
  fill(g.x1, 3 * kUnit, 0xee);
  fill(g.x2, 3 * kUnit, 0xee);
  s.free(g.x1, kS1);
  s.step(test);
  s.free(g.x2, kS1);
  s.step(test);
  CHECK(s.reserved() == 9 * kUnit);
  return g;
}

bool live_intact(const Gaps& g) {
  return intact(g.l1, kUnit, 0xa1) && intact(g.l2, kUnit, 0xa2) && intact(g.l3, kUnit, 0xa3);
}

// 3. One stream's own gaps serve its larger request: only what they lack is mapped anew.
void own_gaps_serve_a_larger_request() {
  const char* test = "own_gaps_serve_a_larger_request";
  Setup s(false);  // no stream order: everything freed is done at once
  const Gaps g = make_gaps(s, test);
  const uint64_t held = s.reserved();
  const size_t unmaps = s.up.unmaps.size();
  unsigned char* big = s.alloc(8 * kUnit, kS1);  // larger than either gap
  s.step(test);
  CHECK(s.reserved() == held + 2 * kUnit);  // the gaps' 6 units moved, 2 mapped anew
  CHECK(s.up.unmaps.size() - unmaps == 6);
  // Both gaps gave (the older whole), and nothing of the live blocks was touched.
  CHECK(any_inside(s.up.unmaps, unmaps, g.x1, 3 * kUnit) && any_inside(s.up.unmaps, unmaps, g.x2, 3 * kUnit));
  CHECK(!any_inside(s.up.unmaps, unmaps, g.l1, kUnit) && !any_inside(s.up.unmaps, unmaps, g.l2, kUnit) &&
        !any_inside(s.up.unmaps, unmaps, g.l3, kUnit));
  fill(big, 8 * kUnit, 0x5a);
  CHECK(live_intact(g));
  CHECK(intact(big, 8 * kUnit, 0x5a));
  s.free(g.l1, kS1);
  s.free(g.l2, kS1);
  s.free(g.l3, kS1);
  s.free(big, kS1);
  s.end(test);
}

// 3b. The same under a stream order: the gaps wait for a fence after their frees, even on their
// own stream (moving unmaps, which does not wait for the stream's queued kernels).
void own_gaps_wait_for_their_fence() {
  const char* test = "own_gaps_wait_for_their_fence";
  Setup s(true);
  s.order.work(kS1);
  const Gaps g = make_gaps(s, test);
  const uint64_t held = s.reserved();
  size_t unmaps = s.up.unmaps.size();
  unsigned char* first = s.alloc(8 * kUnit, kS1);
  s.step(test);
  CHECK(s.reserved() == held + 8 * kUnit);  // not done: mapped anew
  CHECK(s.up.unmaps.size() == unmaps);
  CHECK(s.order.records_on[kS1] == 1);
  fill(first, 8 * kUnit, 0x61);
  s.order.finish(kS1);
  unmaps = s.up.unmaps.size();
  unsigned char* second = s.alloc(8 * kUnit, kS1);
  s.step(test);
  CHECK(s.reserved() == held + 8 * kUnit + 2 * kUnit);  // done now: the gaps' 6 units moved
  CHECK(s.up.unmaps.size() - unmaps == 6);
  fill(second, 8 * kUnit, 0x62);
  CHECK(live_intact(g) && intact(first, 8 * kUnit, 0x61));
  CHECK(s.order.host_waits == 0);
  s.free(first, kS1);
  s.free(second, kS1);
  s.free(g.l1, kS1);
  s.free(g.l2, kS1);
  s.free(g.l3, kS1);
  s.end(test);
}

// 4. At a limit equal to what is mapped, a request that moved units can serve succeeds at once:
// only what is mapped anew counts against the limit.
void moved_units_count_nothing_against_the_limit() {
  const char* test = "moved_units_count_nothing_against_the_limit";
  Setup s(false);
  unsigned char* a = s.alloc(8 * kUnit, kS1);
  unsigned char* guard = s.alloc(kUnit, kS1);
  fill(guard, kUnit, 0x71);
  s.free(a, kS1);
  s.step(test);
  const uint64_t held = s.reserved();
  CHECK(held == 9 * kUnit);
  s.pool->set_limit(held);
  const uint64_t retries = s.pool->stats().retries;
  const size_t unmaps = s.up.unmaps.size();
  unsigned char* p = nullptr;
  try {
    p = s.alloc(4 * kUnit, kS2);
  } catch (const gpumem::Error& e) {
    std::printf("%s: %s\n", test, e.what());
  }
  s.step(test);
  CHECK(p != nullptr);
  CHECK(s.reserved() == held);                // at the limit, not beyond
  CHECK(s.pool->stats().retries == retries);  // served at the first try: no cache returned, no retry
  CHECK(s.up.unmaps.size() - unmaps == 4);    // 4 units moved, the other 4 still S1's and mapped
  CHECK(s.pool->info().free >= 4 * kUnit);
  CHECK(all_inside(s.up.unmaps, unmaps, a, 8 * kUnit));
  if (p) fill(p, 4 * kUnit, 0x72);
  // What moved units cannot serve is still held to the limit: 5 units, 4 free to move.
  try {
    s.alloc(5 * kUnit, kS3);
    CHECK(!"a request beyond the limit was served");
  } catch (const gpumem::Error& e) {
    CHECK(e.status() == GPUMEM_ERROR_OUT_OF_MEMORY);
  }
  s.step(test);
  CHECK(s.reserved() <= held);
  CHECK(intact(guard, kUnit, 0x71));
  if (p) CHECK(intact(p, 4 * kUnit, 0x72));
  s.free(guard, kS1);
  if (p) s.free(p, kS2);
  s.end(test);
}

// 5. With page reclaim off, the sequence of 3 maps the whole request anew: the cases above test
// the mechanism, not something else.
void without_reclaim_growth_maps_the_whole_request() {
  const char* test = "without_reclaim_growth_maps_the_whole_request";
  Setup s(false);
  s.pool->set_page_reclaim(false);
  CHECK(!s.pool->page_reclaim());
  const Gaps g = make_gaps(s, test);
  const uint64_t held = s.reserved();
  const size_t unmaps = s.up.unmaps.size();
  unsigned char* big = s.alloc(8 * kUnit, kS1);
  s.step(test);
  CHECK(s.reserved() == held + 8 * kUnit);
  CHECK(s.up.unmaps.size() == unmaps);
  fill(big, 8 * kUnit, 0x5a);
  CHECK(live_intact(g));
  s.free(g.l1, kS1);
  s.free(g.l2, kS1);
  s.free(g.l3, kS1);
  s.free(big, kS1);
  s.end(test);
}

// 6. A move whose map fails: with the device out of memory the pool goes on (returns its cache,
// maps anew); with another error the allocation fails. Either way what the pool says it maps is
// what is mapped, live bytes are intact, and the pool is whole and can be destroyed.
void a_failed_move_leaves_the_pool_whole(int fail_at, int fail_count, gpumem_status_t status) {
  const std::string name = "a_failed_move_leaves_the_pool_whole(map " + std::to_string(fail_at) + " x" +
                           std::to_string(fail_count) + ", " + gpumem_status_name(status) + ")";
  const char* test = name.c_str();
  Setup s(false);
  unsigned char* l = s.alloc(kUnit, kS1);
  unsigned char* a = s.alloc(8 * kUnit, kS1);
  unsigned char* guard = s.alloc(kUnit, kS1);
  unsigned char* mine = s.alloc(kUnit, kS2);
  fill(l, kUnit, 0x81);
  fill(guard, kUnit, 0x82);
  fill(mine, kUnit, 0x83);
  s.free(a, kS1);
  s.step(test);
  const uint64_t held = s.reserved();
  const size_t unmaps = s.up.unmaps.size(), maps = s.up.maps.size();
  s.up.arm(fail_at, fail_count, status);
  unsigned char* p = nullptr;
  gpumem_status_t st = GPUMEM_SUCCESS;
  try {
    p = s.alloc(4 * kUnit, kS2);
  } catch (const gpumem::Error& e) {
    st = e.status();
  }
  s.up.arm(0, 0, GPUMEM_SUCCESS);
  s.step(test);
  CHECK(s.up.failed_maps.size() == static_cast<size_t>(fail_count));
  // The first failure was the move's map at its destination, in S2's range, not S1's; a second
  // one, the map back at the source, in S1's free units.
  CHECK(!s.up.failed_maps.empty() &&
        !any_inside(std::vector<Call>(s.up.failed_maps.begin(), s.up.failed_maps.begin() + 1), 0, l, 10 * kUnit));
  if (fail_count > 1) CHECK(all_inside(s.up.failed_maps, 1, a, 8 * kUnit));
  // The units it took were unmapped from S1's free units first; the one whose map failed was
  // mapped back where it was.
  const bool moved = s.up.unmaps.size() >= unmaps + fail_at;
  CHECK(moved);
  if (moved) {
    CHECK(all_inside(std::vector<Call>(s.up.unmaps.begin() + unmaps, s.up.unmaps.begin() + unmaps + fail_at), 0, a,
                     8 * kUnit));
    // The same unit: mapped where it was.
    if (fail_count == 1) {
      CHECK(s.up.maps.size() >= maps + fail_at);
      if (s.up.maps.size() >= maps + fail_at)
        CHECK(s.up.maps[maps + fail_at - 1].p == s.up.unmaps[unmaps + fail_at - 1].p);
    }
  }
  if (status == GPUMEM_ERROR_OUT_OF_MEMORY) {
    CHECK(st == GPUMEM_SUCCESS && p != nullptr);  // the pool went on, and found memory
  } else {
    CHECK(st == status && p == nullptr);  // the caller's error, as it was
    // What did not move is where it was: free on S1, mapped; a unit lost when mapping it back
    // failed too is mapped nowhere, and no longer counted.
    const uint64_t lost = fail_count > 1 ? kUnit : 0;
    CHECK(s.reserved() == held - lost);
  }
  if (p) fill(p, 4 * kUnit, 0x84);
  CHECK(intact(l, kUnit, 0x81) && intact(guard, kUnit, 0x82) && intact(mine, kUnit, 0x83));
  // And the pool goes on: the same request again succeeds.
  unsigned char* q = s.alloc(4 * kUnit, kS2);
  s.step(test);
  fill(q, 4 * kUnit, 0x85);
  CHECK(intact(l, kUnit, 0x81) && intact(guard, kUnit, 0x82) && intact(mine, kUnit, 0x83));
  if (p) CHECK(intact(p, 4 * kUnit, 0x84));
  s.pool->release(nullptr, true);
  s.step(test);
  s.free(l, kS1);
  s.free(guard, kS1);
  s.free(mine, kS2);
  s.free(q, kS2);
  if (p) s.free(p, kS2);
  s.step(test);
  s.end(test);
}

// 7. Of two free regions of another stream, both done, the one freed first moves: here the one at
// the higher address, which its free list has behind the other.
void the_oldest_free_moves_first() {
  const char* test = "the_oldest_free_moves_first";
  Setup s(true);
  unsigned char* a = s.alloc(4 * kUnit, kS1);
  unsigned char* g1 = s.alloc(kUnit, kS1);
  unsigned char* b = s.alloc(4 * kUnit, kS1);
  unsigned char* g2 = s.alloc(kUnit, kS1);
  s.step(test);
  CHECK(b == a + 5 * kUnit);
  s.order.work(kS1);
  s.free(b, kS1);  // first
  s.step(test);
  s.free(a, kS1);
  s.step(test);
  unsigned char* small = s.alloc(512, kS2);  // a growth: fences S1's frees
  s.step(test);
  s.order.finish(kS1);
  const size_t unmaps = s.up.unmaps.size();
  const uint64_t held = s.reserved();
  unsigned char* p = s.alloc(2 * kUnit, kS2);
  s.step(test);
  CHECK(s.reserved() == held);
  CHECK(s.up.unmaps.size() - unmaps == 2);
  CHECK(all_inside(s.up.unmaps, unmaps, b, 4 * kUnit));  // from b, freed first
  CHECK(!any_inside(s.up.unmaps, unmaps, a, 4 * kUnit));
  fill(p, 2 * kUnit, 0x91);
  s.free(p, kS2);
  s.free(small, kS2);
  s.free(g1, kS1);
  s.free(g2, kS1);
  s.end(test);
}

// 8. Other streams' free units move before the growing stream's own.
void other_arenas_give_before_its_own() {
  const char* test = "other_arenas_give_before_its_own";
  Setup s(false);
  unsigned char* a = s.alloc(4 * kUnit, kS1);
  unsigned char* g1 = s.alloc(kUnit, kS1);
  unsigned char* b = s.alloc(4 * kUnit, kS2);
  unsigned char* g2 = s.alloc(kUnit, kS2);
  s.free(b, kS2);  // S2's own, freed first: older, but S2's
  s.free(a, kS1);
  s.step(test);
  const size_t unmaps = s.up.unmaps.size();
  const uint64_t held = s.reserved();
  unsigned char* p = s.alloc(6 * kUnit, kS2);  // more than S2's gap: it grows past g2
  s.step(test);
  CHECK(s.reserved() == held);
  CHECK(s.up.unmaps.size() - unmaps == 6);
  // All 4 of S1's units first, then 2 of S2's own.
  if (s.up.unmaps.size() - unmaps == 6) {
    const std::vector<Call> first(s.up.unmaps.begin() + unmaps, s.up.unmaps.begin() + unmaps + 4);
    CHECK(all_inside(first, 0, a, 4 * kUnit));
    CHECK(all_inside(s.up.unmaps, unmaps + 4, b, 4 * kUnit));
  }
  fill(p, 6 * kUnit, 0x95);
  s.free(p, kS2);
  s.free(g1, kS1);
  s.free(g2, kS2);
  s.end(test);
}

// 9. A whole free block another stream took over (lending, kFenceWait) is not done with until the
// taker's work, which waits for the giver's, is: its free rest must not move while either runs.
void a_block_taken_over_waits_for_both_streams() {
  const char* test = "a_block_taken_over_waits_for_both_streams";
  Setup s(true, 0, StreamReuse::kFenceWait);
  unsigned char* whole = s.alloc(kRange, kS1);  // one whole range, all mapped
  fill(whole, kRange, 0xb1);
  s.order.work(kS1);
  s.free(whole, kS1);
  s.step(test);
  const size_t taken = 40 * kUnit;  // within twice the block's size: the block moves to S2
  unsigned char* p = s.alloc(taken, kS2);
  s.step(test);
  CHECK(p == whole && s.order.waits == 1 && s.reserved() == kRange);
  s.order.work(kS2);                              // S2's kernels, after its wait for S1's
  s.pool->set_stream_reuse(StreamReuse::kNever);  // from here on S3 may only move, never borrow
  const uint64_t held = s.reserved();
  size_t unmaps = s.up.unmaps.size();
  unsigned char* q1 = s.alloc(4 * kUnit, kS3);
  s.step(test);
  CHECK(s.reserved() == held + 4 * kUnit);  // S1's kernels may still use the block's free rest
  CHECK(s.up.unmaps.size() == unmaps);
  s.order.finish(kS2);  // as far as it can: it waits for S1
  unsigned char* q2 = s.alloc(4 * kUnit, kS3);
  s.step(test);
  CHECK(s.reserved() == held + 8 * kUnit);
  CHECK(s.up.unmaps.size() == unmaps);
  s.order.finish(kS1);  // now S2's work is over too
  unsigned char* q3 = s.alloc(4 * kUnit, kS3);
  s.step(test);
  CHECK(s.reserved() == held + 8 * kUnit);  // moved from the block's free rest
  CHECK(s.up.unmaps.size() - unmaps == 4 && all_inside(s.up.unmaps, unmaps, whole + taken, kRange - taken));
  CHECK(s.order.host_waits == 0);
  fill(q3, 4 * kUnit, 0xb2);
  s.free(p, kS2);
  s.free(q1, kS3);
  s.free(q2, kS3);
  s.free(q3, kS3);
  s.end(test);
}

}  // namespace

// 10. Out of memory (a limit at what is mapped) with S1's free units still in use by its queued
// work: the host waits for S1's event, not the device, and the units move to S2; nothing is
// unmapped and the cache is not given back.
void out_of_memory_waits_for_the_free_memory_then_moves_it() {
  const char* test = "out_of_memory_waits_for_the_free_memory_then_moves_it";
  Setup s(true, 8 * kUnit);
  unsigned char* b = s.alloc(8 * kUnit, kS1);
  fill(b, 8 * kUnit, 0x66);
  s.order.work(kS1);  // still running when the memory is asked for
  s.free(b, kS1);
  s.step(test);
  const auto before = s.pool->growth();
  const uint64_t retries = s.pool->stats().retries;
  const size_t maps = s.up.maps.size(), unmaps = s.up.unmaps.size();
  unsigned char* p = s.alloc(4 * kUnit, kS2);
  s.step(test);
  CHECK(p != nullptr);
  CHECK(s.order.host_waits == 1);                                           // S1's event, waited for
  CHECK(s.order.reached(kS1) == s.order.queued[kS1]);                       // and so S1's work is over
  CHECK(s.reserved() == 8 * kUnit);                                         // nothing new mapped
  CHECK(s.up.maps.size() - maps == 4 && s.up.unmaps.size() - unmaps == 4);  // 4 units moved
  CHECK(all_inside(s.up.unmaps, unmaps, b, 8 * kUnit) && all_inside(s.up.maps, maps, p, 4 * kUnit));
  const auto after = s.pool->growth();
  CHECK(after.moved_bytes - before.moved_bytes == 4 * kUnit);
  CHECK(after.returned_bytes == before.returned_bytes);  // the cache was not given back
  CHECK(s.pool->stats().retries == retries);             // served before the retry
  fill(p, 4 * kUnit, 0x77);
  s.free(p, kS2);
  s.end(test);
}

int main() {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // what a failed check printed survives a fault after it
  not_done_units_stay_until_their_fence_completes();
  other_streams_units_serve_without_waiting();
  other_streams_memory_serves_under_the_default_policy();
  own_gaps_serve_a_larger_request();
  own_gaps_wait_for_their_fence();
  moved_units_count_nothing_against_the_limit();
  without_reclaim_growth_maps_the_whole_request();
  a_failed_move_leaves_the_pool_whole(1, 1, GPUMEM_ERROR_DRIVER);         // the first unit's map fails
  a_failed_move_leaves_the_pool_whole(2, 1, GPUMEM_ERROR_DRIVER);         // one unit moved, the second fails
  a_failed_move_leaves_the_pool_whole(2, 2, GPUMEM_ERROR_DRIVER);         // and mapping it back fails too: lost
  a_failed_move_leaves_the_pool_whole(2, 1, GPUMEM_ERROR_OUT_OF_MEMORY);  // the pool goes on
  the_oldest_free_moves_first();
  other_arenas_give_before_its_own();
  a_block_taken_over_waits_for_both_streams();
  out_of_memory_waits_for_the_free_memory_then_moves_it();
  std::printf("%s\n", failures ? "FAILED" : "all page-reclaim cases passed");
  return failures ? 1 : 0;
}
