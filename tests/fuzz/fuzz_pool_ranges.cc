// The pool fuzzer over address ranges (one file of about a thousand lines: the decoder, the shadow
// model and its checks read as one, and a fuzz target is one translation unit): random sequences of pool operations on
// a pool whose segments grow in place over a caller's functions allocator (reserve, unreserve, map and unmap callbacks
// over host memory reserved with mmap, or over bookkeeping alone), with page reclaim on or off. Two kinds of pool: one
// made through the C API (no stream order: memory is done once freed), and one made through the internal C++ API with a
// stream order whose fences complete when the input says, sometimes lending across streams by fence (kFenceWait) or
// host wait. Its upstream is then a thin watch over the functions allocator that tells the pool's moves (page reclaim)
// from its unmaps, so that a move of memory the GPU may still use is caught where it happens.
//
// After every operation: Pool::check_invariants; the live blocks do not overlap, are mapped, keep
// their mappings (and, over host memory, their bytes); every chunk of the pool's snapshot is
// mapped or unmapped as the callbacks say and lies in a range they reserved; the statistics and
// info are exact and the pool's reserved bytes equal what the callbacks have mapped. Allocations
// may fail only for a cause the model can name (see op_alloc). Built as a libFuzzer target with
// clang, and as a deterministic replay under CTest (GPUMEM_FUZZ_REPLAY).
#include <sys/mman.h>

#include <algorithm>
#include <cinttypes>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "alloc/allocator.hpp"
#include "fuzz_check.hpp"
#include "fuzz_replay.hpp"
#include "gpumem/gpumem.h"
#include "pool/pool.hpp"

namespace {

using gpumem::pool::Pool;
constexpr size_t kRound = gpumem::pool::kRound;
constexpr size_t kMaxLive = 32;

// NULL and the legacy stream are one stream, so 5 stream values name 4 streams (ids 0 to 3).
const gpumem_stream_t kStreams[] = {nullptr, GPUMEM_STREAM_LEGACY, GPUMEM_STREAM_PER_THREAD,
                                    reinterpret_cast<gpumem_stream_t>(uintptr_t{0x1000}),
                                    reinterpret_cast<gpumem_stream_t>(uintptr_t{0x2000})};
constexpr int kStreamValues = 5, kStreamIds = 4;

struct Reached {
  uint64_t allocs, ooms, injected_failures, frees, foreign_frees, pending_frees, completes, releases, limits,
      reclaim_toggles, reuse_sets, record_streams, grows, oom_excused, moves, moved_units, lost_units, pairs,
      pairs_ordered, unmap_waits, lent_before_done, reclaim_checks, forced_destroys, inputs_ordered, inputs_unordered,
      inputs_real;
} g_reached;

int g_op;
const char* g_op_name = "setup";

[[noreturn]] __attribute__((format(printf, 1, 2))) void die(const char* fmt, ...) {
  char where[128], extra[1200];
  std::snprintf(where, sizeof where, "in operation %d (%s)", g_op, g_op_name);
  std::snprintf(extra, sizeof extra, "fuzz_pool_ranges: last gpumem detail: %s\n", gpumem_last_error_detail());
  va_list ap;
  va_start(ap, fmt);
  fuzz_check::fail("fuzz_pool_ranges", where, extra, fmt, ap);
}

// With FUZZ_POOL_RANGES_TRACE set, every operation and callback is told on stderr: for reading a
// finding step by step.
bool g_trace = std::getenv("FUZZ_POOL_RANGES_TRACE") != nullptr;
__attribute__((format(printf, 1, 2))) void trace(const char* fmt, ...) {
  if (!g_trace) return;
  va_list ap;
  va_start(ap, fmt);
  std::fprintf(stderr, "%d %s: ", g_op, g_op_name);
  std::vfprintf(stderr, fmt, ap);
  std::fputc('\n', stderr);
  va_end(ap);
}

#define CHECK_EQ(got, want, what)                                                              \
  do {                                                                                         \
    const uint64_t got_ = (got), want_ = (want);                                               \
    if (got_ != want_) die("%s is %" PRIu64 ", the model says %" PRIu64, (what), got_, want_); \
  } while (0)
#define CHECK_OK(call)                                                                \
  do {                                                                                \
    const gpumem_status_t st_ = (call);                                               \
    if (st_ != GPUMEM_SUCCESS) die("%s returned %s", #call, gpumem_status_name(st_)); \
  } while (0)

int id_of(gpumem_stream_t stream) {
  switch (reinterpret_cast<uintptr_t>(stream)) {
    case 0:
    case 1:
      return 0;
    case 2:
      return 1;
    case 0x1000:
      return 2;
    case 0x2000:
      return 3;
    default:
      die("the pool named stream %p, which no operation used", static_cast<void*>(stream));
  }
}

struct Input {
  const uint8_t* p;
  size_t n;
  size_t i = 0;
  bool done() const { return i >= n; }
  uint8_t u8() { return i < n ? p[i++] : 0; }
  uint32_t u16() {
    const uint32_t low = u8();
    return low | uint32_t{u8()} << 8;
  }
  uint32_t u24() {
    const uint32_t low = u16();
    return low | uint32_t{u8()} << 16;
  }
};

uintptr_t align_down(uintptr_t x, size_t unit) { return x & ~(uintptr_t{unit} - 1); }
uintptr_t align_up(uintptr_t x, size_t unit) { return align_down(x + unit - 1, unit); }

// What the callbacks have mapped: intervals of whole units, each mapped by one call (its
// generation), so that a live block whose memory was unmapped and mapped again is told.
struct Mapped {
  uintptr_t end;
  uint64_t gen;
};
struct Space {
  bool real = false;  // host memory from mmap; else addresses nobody touches
  size_t unit = 0, range = 0;
  uint64_t budget = 0;          // most bytes mapped at once, as a device runs out; 0 for none
  bool refuse_reserve = false;  // no addresses left
  std::map<uintptr_t, size_t> ranges;
  std::map<uintptr_t, Mapped> maps;
  uint64_t mapped = 0, reserved = 0, gen = 0;
  uintptr_t next_fake = uintptr_t{0x200000000000};
  int last_call = 0;  // for unmap-then-map pairs: kUnmap with last_size one unit
  size_t last_size = 0;

  bool any_mapped(uintptr_t a, uintptr_t b) const {
    auto it = maps.upper_bound(a);
    if (it != maps.begin() && std::prev(it)->second.end > a) return true;
    return it != maps.end() && it->first < b;
  }
  bool all_mapped(uintptr_t a, uintptr_t b) const {
    while (a < b) {
      auto it = maps.upper_bound(a);
      if (it == maps.begin() || (--it)->second.end <= a) return false;
      a = it->second.end;
    }
    return true;
  }
  void split_at(uintptr_t x) {
    auto it = maps.upper_bound(x);
    if (it == maps.begin() || (--it)->first == x || it->second.end <= x) return;
    maps[x] = Mapped{it->second.end, it->second.gen};
    it->second.end = x;
  }
  void unmap(uintptr_t a, uintptr_t b) {
    split_at(a);
    split_at(b);
    maps.erase(maps.lower_bound(a), maps.lower_bound(b));
  }
  // The generations under [a, b), from a: equal while nothing there was unmapped.
  std::vector<std::pair<uintptr_t, uint64_t>> signature(uintptr_t a, uintptr_t b) const {
    std::vector<std::pair<uintptr_t, uint64_t>> out;
    auto it = maps.upper_bound(a);
    if (it != maps.begin()) --it;
    for (; it != maps.end() && it->first < b; ++it)
      if (it->second.end > a) out.emplace_back(std::max(it->first, a), it->second.gen);
    return out;
  }
  // The range holding [p, p + size), or ranges.end().
  std::map<uintptr_t, size_t>::const_iterator range_of(uintptr_t p, size_t size) const {
    auto it = ranges.upper_bound(p);
    if (it == ranges.begin()) return ranges.end();
    --it;
    return p + size <= it->first + it->second ? it : ranges.end();
  }
};

// A failure injected into the n-th next callback of a kind.
enum Kind { kNone, kReserve, kUnreserve, kMap, kUnmap };
struct Injection {
  int kind = kNone, skip = 0, count = 0;
  gpumem_status_t status = GPUMEM_SUCCESS;
};

// Work the GPU may still do on freed memory: stream's work up to pos.
struct Busy {
  uintptr_t lo, hi;
  int stream;
  uint64_t pos;
};

struct Live {
  uintptr_t ptr;
  size_t size, rounded;
  int stream;
  unsigned uses;  // other streams recorded (record_stream), by id
  uint8_t pattern;
  std::vector<std::pair<uintptr_t, uint64_t>> sig;
};

// Fences are positions in per-stream work counters; the input completes work when it says.
struct Order final : gpumem::alloc::StreamOrder {
  struct F {
    int stream;
    uint64_t pos;
    bool for_free;  // recorded by a free that went pending: released only once complete
  };
  // A stream's work past `after` waits for another's up to pos: it cannot be done before that is.
  struct Wait {
    int stream;
    uint64_t after;
    int on;
    uint64_t pos;
  };
  uint64_t queued[kStreamIds]{}, done[kStreamIds]{};
  std::vector<Wait> waits;
  std::vector<F*> live, recorded;  // recorded: since the harness last cleared it

  // Whether stream u's work from now on comes after x's work up to pos on the GPU: it waits for
  // it, directly or through other streams' waits. reach[k]: how far k's work is waited for.
  bool ordered(int u, int x, uint64_t pos) const {
    uint64_t reach[kStreamIds]{};
    reach[u] = UINT64_MAX;
    for (bool more = true; more;) {
      more = false;
      for (const Wait& w : waits)
        if (w.after < reach[w.stream] && w.pos > reach[w.on]) {
          reach[w.on] = w.pos;
          more = true;
        }
    }
    return reach[x] >= pos;
  }
  // The stream's work is done up to pos, and so is all the work it waited for.
  void finish(int s, uint64_t pos) {
    if (done[s] >= pos) return;
    done[s] = pos;
    for (size_t i = 0; i < waits.size(); ++i)
      if (waits[i].stream == s && waits[i].after < pos) finish(waits[i].on, waits[i].pos);
  }

  Fence record(gpumem_stream_t stream) override {
    const int s = id_of(stream);
    auto* f = new F{s, queued[s], false};
    live.push_back(f);
    recorded.push_back(f);
    return f;
  }
  void wait(gpumem_stream_t stream, Fence fence) override {
    const F* f = known(fence);
    const int u = id_of(stream);
    if (u != f->stream) waits.push_back(Wait{u, queued[u], f->stream, f->pos});
  }
  bool query(Fence fence) override {
    const F* f = known(fence);
    return done[f->stream] >= f->pos;
  }
  void synchronize(Fence fence) override {
    const F* f = known(fence);
    finish(f->stream, f->pos);
  }
  void release(Fence fence) noexcept override {
    F* f = known(fence);
    if (f->for_free && done[f->stream] < f->pos) die("a pending free's fence was released before it completed");
    live.erase(std::find(live.begin(), live.end(), f));
    recorded.erase(std::remove(recorded.begin(), recorded.end(), f), recorded.end());
    delete f;
  }
  F* known(Fence fence) const {
    auto* f = static_cast<F*>(fence);
    if (std::find(live.begin(), live.end(), f) == live.end()) die("the pool used a fence released or never recorded");
    return f;
  }
  ~Order() override {
    for (F* f : live) delete f;
  }
};

struct Harness {
  Space space;
  Injection inject;
  Order order;
  bool ordered = false;  // the C++ pool with a stream order, over the watch
  gpumem_allocator_t *functions = nullptr, *watch = nullptr, *pool = nullptr;
  Pool* internals = nullptr;
  std::vector<Live> live;
  std::vector<Busy> busy;
  std::map<uintptr_t, std::vector<Order::F*>> pending;  // pending frees by address, with their fences
  uint64_t in_use = 0, requested = 0, allocs = 0, frees = 0, limit = 0;
  bool reclaim = true;
  uint32_t serial = 0;
  // Per operation.
  std::vector<gpumem_status_t> fired;
  uint64_t grown = 0;  // fresh bytes mapped, as the pool's upstream hooks told
};

gpumem_status_t fire(Harness& h, int kind) {
  Injection& i = h.inject;
  if (i.kind != kind || !i.count) return GPUMEM_SUCCESS;
  if (i.skip) {
    --i.skip;
    return GPUMEM_SUCCESS;
  }
  --i.count;
  h.fired.push_back(i.status);
  ++g_reached.injected_failures;
  return i.status;
}

bool fired(const Harness& h, gpumem_status_t st) {
  return std::find(h.fired.begin(), h.fired.end(), st) != h.fired.end();
}

// Waits, as an unmap must (the VM allocator synchronizes the device), for the work on [a, b).
void wait_for(Harness& h, uintptr_t a, uintptr_t b) {
  for (const Busy& w : h.busy)
    if (w.lo < b && a < w.hi && h.order.done[w.stream] < w.pos) {
      h.order.finish(w.stream, w.pos);
      ++g_reached.unmap_waits;
    }
}

// The callbacks of the functions allocator. Anything the pool should never ask for is a finding.
gpumem_status_t cb_reserve(void* context, size_t size, int32_t, void** out) {
  Harness& h = *static_cast<Harness*>(context);
  Space& s = h.space;
  s.last_call = kReserve;
  CHECK(size == s.range, "the pool reserved %zu bytes, not one range of %zu", size, s.range);
  if (s.refuse_reserve) return GPUMEM_ERROR_OUT_OF_MEMORY;
  if (const gpumem_status_t st = fire(h, kReserve)) return st;
  uintptr_t base;
  if (s.real) {
    char* p =
        static_cast<char*>(mmap(nullptr, size + s.unit, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0));
    if (p == MAP_FAILED) return GPUMEM_ERROR_OUT_OF_MEMORY;
    base = align_up(reinterpret_cast<uintptr_t>(p), s.unit);
    if (base > reinterpret_cast<uintptr_t>(p)) munmap(p, base - reinterpret_cast<uintptr_t>(p));
    munmap(reinterpret_cast<char*>(base + size), reinterpret_cast<uintptr_t>(p) + s.unit - base);
  } else {
    base = s.next_fake;
    s.next_fake += size + s.unit;  // a gap: a block across two ranges shows
  }
  s.ranges[base] = size;
  trace("reserve %#" PRIxPTR " +%zu", base, size);
  s.reserved += size;
  *out = reinterpret_cast<void*>(base);
  return GPUMEM_SUCCESS;
}

gpumem_status_t cb_unreserve(void* context, void* ptr, size_t size, int32_t) {
  Harness& h = *static_cast<Harness*>(context);
  Space& s = h.space;
  s.last_call = kUnreserve;
  const auto base = reinterpret_cast<uintptr_t>(ptr);
  const auto it = s.ranges.find(base);
  CHECK(it != s.ranges.end() && it->second == size, "the pool unreserved %zu bytes at %p, not a range it reserved",
        size, ptr);
  CHECK(!s.any_mapped(base, base + size), "the pool unreserved the range at %p with memory still mapped in it", ptr);
  if (const gpumem_status_t st = fire(h, kUnreserve)) return st;
  if (s.real) munmap(ptr, size);
  s.ranges.erase(it);
  trace("unreserve %p +%zu", ptr, size);
  s.reserved -= size;
  return GPUMEM_SUCCESS;
}

void check_units(const Space& s, uintptr_t p, size_t size, const char* what) {
  CHECK(p % s.unit == 0 && size % s.unit == 0 && size > 0,
        "the pool's %s of %zu bytes at %#" PRIxPTR " is not whole units of %zu", what, size, p, s.unit);
  CHECK(s.range_of(p, size) != s.ranges.end(), "the pool's %s of %zu bytes at %#" PRIxPTR " is in no one range", what,
        size, p);
}

gpumem_status_t cb_map(void* context, void* ptr, size_t size, int32_t) {
  Harness& h = *static_cast<Harness*>(context);
  Space& s = h.space;
  const auto p = reinterpret_cast<uintptr_t>(ptr);
  check_units(s, p, size, "map");
  CHECK(!s.any_mapped(p, p + size), "the pool mapped %zu bytes at %p over memory mapped already", size, ptr);
  // A map right after an unmap, with no growth hook between, is the second half of a move.
  const bool pair = s.last_call == kUnmap && s.last_size == s.unit && size == s.unit;
  s.last_call = kMap;
  if (s.budget && s.mapped + size > s.budget) return GPUMEM_ERROR_OUT_OF_MEMORY;
  if (const gpumem_status_t st = fire(h, kMap)) return st;
  if (s.real && mprotect(ptr, size, PROT_READ | PROT_WRITE) != 0) die("mprotect failed");
  s.maps[p] = Mapped{p + size, ++s.gen};
  trace("map %p +%zu", ptr, size);
  s.mapped += size;
  (h.ordered ? g_reached.pairs_ordered : g_reached.pairs) += pair;
  return GPUMEM_SUCCESS;
}

gpumem_status_t cb_unmap(void* context, void* ptr, size_t size, int32_t) {
  Harness& h = *static_cast<Harness*>(context);
  Space& s = h.space;
  const auto p = reinterpret_cast<uintptr_t>(ptr);
  s.last_call = kUnmap;
  s.last_size = size;
  check_units(s, p, size, "unmap");
  CHECK(s.all_mapped(p, p + size), "the pool unmapped %zu bytes at %p, not all of them mapped", size, ptr);
  for (const Live& l : h.live)
    CHECK(l.ptr + l.rounded <= p || p + size <= l.ptr,
          "the pool unmapped %zu bytes at %p, under the live block at %#" PRIxPTR " (%zu bytes)", size, ptr, l.ptr,
          l.size);
  if (const gpumem_status_t st = fire(h, kUnmap)) return st;
  if (s.real && (madvise(ptr, size, MADV_DONTNEED) != 0 || mprotect(ptr, size, PROT_NONE) != 0))
    die("madvise or mprotect failed");
  s.unmap(p, p + size);
  trace("unmap %p +%zu", ptr, size);
  s.mapped -= size;
  return GPUMEM_SUCCESS;
}

// The upstream of the ordered pool: the functions allocator's ranges, with its moves told apart.
// A move, unlike an unmap, does not wait for the device (as the VM allocator's): the pool must move
// only memory its fences say the GPU is done with. An unmap waits for the work on what it unmaps.
class Watch final : public gpumem::alloc::Allocator, public gpumem::alloc::Ranges {
 public:
  Watch(Harness& h, gpumem::alloc::Ranges& inner) : Allocator(-1, "fuzz watch"), h_(h), inner_(inner) {}
  Ranges* ranges() override { return this; }
  size_t unit() const override { return inner_.unit(); }
  size_t range_size() const override { return inner_.range_size(); }
  uintptr_t reserve(size_t size) override { return inner_.reserve(size); }
  void unreserve(uintptr_t base, size_t size) override { inner_.unreserve(base, size); }
  void map(uintptr_t p, size_t size) override { inner_.map(p, size); }
  void unmap(uintptr_t p, size_t size, size_t& unmapped) override {
    if (!moving_) wait_for(h_, p, p + size);
    inner_.unmap(p, size, unmapped);
  }
  void move(uintptr_t from, uintptr_t to, size_t size, size_t& moved, size_t& lost) override {
    for (const Busy& w : h_.busy)
      CHECK(!(w.lo < from + size && from < w.hi) || h_.order.done[w.stream] >= w.pos,
            "the pool moved %zu bytes at %#" PRIxPTR " that stream %d's work (up to %" PRIu64 ", done %" PRIu64
            ") may still use",
            size, from, w.stream, w.pos, h_.order.done[w.stream]);
    moving_ = true;
    try {
      trace("move %#" PRIxPTR " to %#" PRIxPTR " +%zu", from, to, size);
      Ranges::move(from, to, size, moved, lost);
    } catch (...) {
      moving_ = false;
      count(moved, lost);
      throw;
    }
    moving_ = false;
    count(moved, lost);
  }
  void live(uint64_t& count, uint64_t& bytes) override { count = bytes = 0; }
  void free_all_live() override {}

 protected:
  void* do_allocate(size_t, gpumem_stream_t, size_t&) override {
    gpumem::fail(GPUMEM_ERROR_NOT_SUPPORTED, "the watch maps ranges only");
  }
  void do_deallocate(void*, gpumem_stream_t) override {
    gpumem::fail(GPUMEM_ERROR_NOT_SUPPORTED, "the watch maps ranges only");
  }
  void sizes_of(void*, size_t& size, size_t& mem_size) override { size = mem_size = 0; }

 private:
  void count(size_t moved, size_t lost) {
    g_reached.moves += moved != 0;
    g_reached.moved_units += (moved - lost) / h_.space.unit;
    g_reached.lost_units += lost != 0;
  }
  Harness& h_;
  gpumem::alloc::Ranges& inner_;
  bool moving_ = false;
};

void on_grow(const gpumem_hook_info_t* info, void* user_data) {
  auto& h = *static_cast<Harness*>(user_data);
  h.space.last_call = kNone;
  if (info->event != GPUMEM_HOOK_UPSTREAM_ALLOC_POST || info->status != GPUMEM_SUCCESS) return;
  h.grown += info->size;
  ++g_reached.grows;
}

gpumem_allocator_stats_t stats_of(gpumem_allocator_t* a) {
  gpumem_allocator_stats_t s;
  std::memset(&s, 0, sizeof s);
  s.struct_size = sizeof s;
  CHECK_OK(gpumem_allocator_get_stats(a, &s));
  return s;
}

// The pattern bytes of a live block over host memory: its first and last, and the first of each
// unit it reaches into.
template <typename F>
void pattern_bytes(const Harness& h, const Live& l, F f) {
  f(reinterpret_cast<uint8_t*>(l.ptr));
  for (uintptr_t q = align_up(l.ptr + 1, h.space.unit); q < l.ptr + l.size; q += h.space.unit)
    f(reinterpret_cast<uint8_t*>(q));
  f(reinterpret_cast<uint8_t*>(l.ptr + l.size - 1));
}

void check_all(Harness& h) {
  const Space& s = h.space;
  try {
    h.internals->check_invariants();
  } catch (const std::exception& e) {
    die("Pool::check_invariants: %s", e.what());
  }
  // The work done is forgotten; what is left may still use freed memory.
  h.busy.erase(
      std::remove_if(h.busy.begin(), h.busy.end(), [&](const Busy& w) { return h.order.done[w.stream] >= w.pos; }),
      h.busy.end());

  const std::vector<gpumem::pool::BlockInfo> blocks = h.internals->snapshot();
  std::vector<const Live*> sorted;
  for (const Live& l : h.live) sorted.push_back(&l);
  std::sort(sorted.begin(), sorted.end(), [](const Live* a, const Live* b) { return a->ptr < b->ptr; });
  for (size_t k = 1; k < sorted.size(); ++k)
    CHECK(sorted[k - 1]->ptr + sorted[k - 1]->rounded <= sorted[k]->ptr, "live blocks overlap at %#" PRIxPTR,
          sorted[k]->ptr);
  size_t j = 0, segments = 0;
  uint64_t pending = 0;
  std::vector<uintptr_t> pending_now;
  for (const gpumem::pool::BlockInfo& b : blocks) {
    if (b.address == b.segment) {
      ++segments;
      const auto r = s.ranges.find(b.segment);
      CHECK(r != s.ranges.end() && r->second == b.segment_size,
            "the pool's segment at %#" PRIxPTR " (%zu bytes) is not a range the callbacks reserved", b.segment,
            b.segment_size);
    }
    if (b.state == GPUMEM_BLOCK_UNMAPPED) {
      CHECK(!s.any_mapped(b.address, b.address + b.size), "an unmapped chunk at %#" PRIxPTR " is mapped", b.address);
      continue;
    }
    CHECK(s.all_mapped(b.address, b.address + b.size), "a chunk at %#" PRIxPTR " (%zu bytes, state %d) is not mapped",
          b.address, b.size, b.state);
    if (b.state == GPUMEM_BLOCK_PENDING) {
      pending += b.size;
      pending_now.push_back(b.address);
      CHECK(h.ordered, "a pool with no stream order has a pending chunk");
      CHECK(h.pending.count(b.address), "a chunk at %#" PRIxPTR " is pending, freed by no pending free", b.address);
    }
    if (b.state != GPUMEM_BLOCK_IN_USE) continue;
    CHECK(j < sorted.size() && sorted[j]->ptr == b.address,
          "the pool has a chunk in use at %#" PRIxPTR " that the model does not", b.address);
    const Live& l = *sorted[j++];
    CHECK_EQ(b.size, l.rounded, "the size of a chunk in use");
    CHECK_EQ(b.requested, l.size, "the bytes requested of a chunk in use");
    CHECK(s.signature(l.ptr, l.ptr + l.rounded) == l.sig,
          "the live block at %#" PRIxPTR " (%zu bytes) was unmapped and mapped again", l.ptr, l.size);
    if (s.real)
      pattern_bytes(h, l, [&](uint8_t* q) {
        CHECK(*q == l.pattern, "the live block at %#" PRIxPTR " (%zu bytes) lost its contents", l.ptr, l.size);
      });
  }
  CHECK(j == sorted.size(), "the live block at %#" PRIxPTR " is no chunk in use of the pool", sorted[j]->ptr);
  CHECK_EQ(segments, s.ranges.size(), "the pool's segments (the ranges reserved)");
  // Pending frees the pool settled are gone from the model.
  for (auto it = h.pending.begin(); it != h.pending.end();)
    it = std::count(pending_now.begin(), pending_now.end(), it->first) ? std::next(it) : h.pending.erase(it);

  const gpumem_allocator_stats_t st = stats_of(h.pool);
  CHECK_EQ(st.bytes_in_use, h.in_use, "bytes_in_use");
  CHECK_EQ(st.bytes_requested, h.requested, "bytes_requested");
  CHECK_EQ(st.alloc_count, h.allocs, "alloc_count");
  CHECK_EQ(st.free_count, h.frees, "free_count");
  CHECK_EQ(st.bytes_reserved, s.mapped, "the pool's bytes_reserved (the bytes the callbacks mapped)");
  CHECK_EQ(stats_of(h.functions).bytes_reserved, s.mapped, "the functions allocator's bytes_reserved");
  gpumem_pool_info_t i;
  std::memset(&i, 0, sizeof i);
  i.struct_size = sizeof i;
  CHECK_OK(gpumem_pool_get_info(h.pool, &i));
  CHECK_EQ(i.used_bytes, h.in_use, "info used_bytes");
  CHECK_EQ(i.total_bytes, s.mapped, "info total_bytes (the bytes the callbacks mapped)");
  CHECK_EQ(i.address_bytes, s.reserved, "info address_bytes (the bytes the callbacks reserved)");
  CHECK_EQ(i.pending_bytes, pending, "info pending_bytes");
  CHECK_EQ(i.used_bytes + i.free_bytes + i.pending_bytes, i.total_bytes, "info used + free + pending");
  CHECK_EQ(i.limit, h.limit, "info limit");
}

size_t decode_size(const Harness& h, Input& in) {
  const size_t unit = h.space.unit, range = h.space.range;
  switch (in.u8() % 6) {
    case 0:
      return 1 + in.u8();
    case 1:
      return 1 + in.u16() % (2 * unit);
    case 2: {  // whole units, or a rounding short of them
      const size_t n = 1 + in.u8() % 8;
      return n * unit - (in.u8() % 2 && n * unit > kRound ? kRound : 0);
    }
    case 3:
      return 1 + in.u24() % (range / 4);
    case 4:
      return 1 + in.u24() % range;
    default: {  // about one range, and sometimes beyond it
      const uint32_t v = in.u8();
      return v < 48 ? range + 1 + v : range - (v - 48) * kRound;
    }
  }
}

// A limit or a device's memory: 0 (none), or an eighth of a range to four ranges, some of them a
// few roundings off a unit.
uint64_t decode_bytes(const Harness& h, Input& in) {
  const uint32_t v = in.u16();
  if (v % 4 == 0) return 0;
  return uint64_t{(v >> 2) % 32 + 1} * (h.space.range / 8) - (v >> 7) % 4 * kRound;
}

void op_alloc(Harness& h, Input& in) {
  g_op_name = "alloc";
  const gpumem_stream_t stream = kStreams[in.u8() % kStreamValues];
  const size_t size = decode_size(h, in);
  if (h.live.size() >= kMaxLive) return;
  const Space& s = h.space;
  const size_t unit = s.unit, rounded = (size + kRound - 1) / kRound * kRound;
  const int u = id_of(stream);
  // The units under live blocks: what stays mapped once the pool has returned everything else.
  std::vector<uintptr_t> units;
  for (const Live& l : h.live)
    for (uintptr_t q = align_down(l.ptr, unit); q < l.ptr + l.rounded; q += unit) units.push_back(q);
  std::sort(units.begin(), units.end());
  const uint64_t held = static_cast<uint64_t>(std::unique(units.begin(), units.end()) - units.begin()) * unit;
  const uint64_t needed = held + align_up(rounded, unit);
  const uint64_t retries = stats_of(h.pool).retry_count, mapped_before = s.mapped;

  void* p = reinterpret_cast<void*>(uintptr_t{1});
  const gpumem_status_t st = gpumem_alloc(h.pool, size, stream, &p);
  trace("%zu bytes on stream %d: %s %p", size, u, gpumem_status_name(st), p);
  if (st != GPUMEM_SUCCESS) {
    CHECK(p == nullptr, "a failed allocation did not clear its output");
    if (st != GPUMEM_ERROR_OUT_OF_MEMORY) {
      CHECK(fired(h, st), "an allocation of %zu bytes failed with %s, which no callback returned", size,
            gpumem_status_name(st));
      return;
    }
    ++g_reached.ooms;
    // Out of memory needs a cause: the request beyond a range or the limit, a callback's refusal,
    // or no room for it beside the units the live blocks keep mapped.
    const bool room = rounded <= s.range && (!h.limit || needed <= h.limit) && (!s.budget || needed <= s.budget);
    CHECK(!room || !h.fired.empty() || s.refuse_reserve,
          "out of memory for %zu bytes (rounded %zu) with %" PRIu64 " bytes under live blocks, limit %" PRIu64
          ", device budget %" PRIu64 ": there was room",
          size, rounded, held, h.limit, s.budget);
    g_reached.oom_excused += room;
    return;
  }
  const auto ptr = reinterpret_cast<uintptr_t>(p);
  CHECK(p != nullptr && ptr % kRound == 0, "the pool handed out %p", p);
  CHECK(s.all_mapped(ptr, ptr + rounded), "the pool handed out %zu bytes at %p, not all of them mapped", rounded, p);
  for (const Busy& w : h.busy) {
    if (!(w.lo < ptr + rounded && ptr < w.hi) || w.stream == u || h.order.done[w.stream] >= w.pos) continue;
    CHECK(h.order.ordered(u, w.stream, w.pos),
          "the pool handed out on stream %d memory at %p that stream %d's work (up to %" PRIu64 ", done %" PRIu64
          ") may still use, with no wait for it",
          u, p, w.stream, w.pos, h.order.done[w.stream]);
    ++g_reached.lent_before_done;
  }
  if (h.limit && s.mapped > mapped_before)
    CHECK(s.mapped <= h.limit, "the pool grew to %" PRIu64 " bytes mapped, past its limit %" PRIu64, s.mapped, h.limit);
  Live l{ptr, size, rounded, u, 0, static_cast<uint8_t>(0x5a ^ (++h.serial * 131)), s.signature(ptr, ptr + rounded)};
  if (s.real) pattern_bytes(h, l, [&](uint8_t* q) { *q = l.pattern; });
  h.live.push_back(l);
  ++h.allocs;
  ++g_reached.allocs;
  h.in_use += rounded;
  h.requested += size;
  ++h.order.queued[u];  // a kernel on the stream uses it

  // Page reclaim without a stream order: growth that mapped new memory first took every whole free
  // unit of every arena, so the only one left mapped is in what follows the new block in its region.
  // (A policy that keeps other streams' recent frees where they are would limit this to the
  // growing arena's free chunks: those whose stream is u.)
  if (!h.ordered && h.reclaim && h.grown && h.fired.empty() && stats_of(h.pool).retry_count == retries) {
    for (const gpumem::pool::BlockInfo& b : h.internals->snapshot())
      CHECK(b.state != GPUMEM_BLOCK_FREE || align_up(b.address, unit) + unit > b.address + b.size ||
                b.address == ptr + rounded,
            "growth for %zu bytes on stream %d mapped %" PRIu64 " new bytes and left the free chunk at %#" PRIxPTR
            " (%zu bytes, whole units in it, stream %d's arena) mapped",
            size, u, h.grown, b.address, b.size, id_of(b.stream));
    ++g_reached.reclaim_checks;
  }
}

void free_live(Harness& h, size_t index, gpumem_stream_t stream) {
  const Live l = h.live[index];
  const int t = id_of(stream);
  ++h.order.queued[t];  // the last kernel on the freeing stream
  uint64_t pending_before = h.internals->info().pending;
  h.order.recorded.clear();
  CHECK_OK(gpumem_free(h.pool, reinterpret_cast<void*>(l.ptr), stream));
  trace("%#" PRIxPTR " (%zu bytes, stream %d) on stream %d", l.ptr, l.size, l.stream, t);
  h.live.erase(h.live.begin() + static_cast<std::ptrdiff_t>(index));
  ++h.frees;
  ++g_reached.frees;
  g_reached.foreign_frees += t != l.stream;
  h.in_use -= l.rounded;
  h.requested -= l.size;
  if (h.internals->info().pending > pending_before) {
    for (Order::F* f : h.order.recorded) f->for_free = true;
    h.pending[l.ptr] = h.order.recorded;
    for (const Order::F* f : h.order.recorded) trace("pending on stream %d up to %" PRIu64, f->stream, f->pos);
    ++g_reached.pending_frees;
  }
  if (!h.ordered) return;
  // What the GPU may still do on it: the freeing stream's work, the allocating stream's, and
  // that of the streams recorded.
  const unsigned streams = 1u << t | 1u << l.stream | l.uses;
  for (int k = 0; k < kStreamIds; ++k)
    if (streams >> k & 1) h.busy.push_back(Busy{l.ptr, l.ptr + l.rounded, k, h.order.queued[k]});
}

void op_free(Harness& h, Input& in, bool newest) {
  g_op_name = "free";
  const uint32_t pick = in.u16();
  const uint8_t how = in.u8();
  if (h.live.empty()) return;
  const size_t index = newest ? h.live.size() - 1 : pick % h.live.size();
  const int own = h.live[index].stream;
  // Its own stream (as a value that names it), or any other.
  free_live(h, index, how < 128 ? kStreams[own == 0 ? (how & 1) : own + 1] : kStreams[how % kStreamValues]);
}

void op_complete(Harness& h, Input& in) {
  g_op_name = "complete";
  const uint8_t v = in.u8();
  const int k = v % (kStreamIds + 1);
  for (int s = 0; s < kStreamIds; ++s) {
    if (k < kStreamIds && s != k) continue;
    uint64_t& done = h.order.done[s];
    const uint64_t queued = h.order.queued[s];
    h.order.finish(s, v & 0x80 ? done + (queued - done + 1) / 2 : queued);  // half of what is queued, or all
    trace("stream %d done to %" PRIu64 " of %" PRIu64, s, done, queued);
  }
  ++g_reached.completes;
}

void op_release(Harness& h, Input& in) {
  g_op_name = "release";
  const uint8_t v = in.u8();
  const bool all = v % (kStreamValues + 1) == kStreamValues;
  const gpumem_stream_t stream = kStreams[v % kStreamValues];
  uint64_t done[kStreamIds];  // as the release starts; its unmaps may wait for more
  std::copy(h.order.done, h.order.done + kStreamIds, done);
  const gpumem_status_t st = gpumem_pool_release(h.pool, stream, all ? GPUMEM_POOL_RELEASE_ALL_STREAMS : 0);
  trace("%s: %s", all ? "all streams" : "one stream", gpumem_status_name(st));
  CHECK(st == GPUMEM_SUCCESS || fired(h, st), "release returned %s, which no callback returned",
        gpumem_status_name(st));
  ++g_reached.releases;
  // A release first settles every pending free whose fences completed.
  check_all(h);  // which forgets the pending frees settled
  for (const auto& [a, fences] : h.pending)
    CHECK(std::any_of(fences.begin(), fences.end(), [&](const Order::F* f) { return done[f->stream] < f->pos; }),
          "after a release, the free at %#" PRIxPTR " is still pending with its fences complete", a);
}

void op_device(Harness& h, Input& in) {
  g_op_name = "device";
  const uint8_t kind = in.u8() % 4;
  if (kind == 0) {  // the device's memory
    h.space.budget = decode_bytes(h, in);
    return;
  }
  const uint8_t arg = in.u8();
  if (kind == 1) {  // addresses run out, or are back
    h.space.refuse_reserve = arg % 4 == 0;
    return;
  }
  // The n-th next call of a kind fails, once or twice running (a move's map, then its map back).
  static const int kinds[] = {kMap, kMap, kUnmap, kReserve, kUnreserve, kMap};
  h.inject = Injection{kinds[arg % 6], (arg >> 3) % 4, 1 + (arg >> 5) % 2,
                       arg >> 6 & 1 ? GPUMEM_ERROR_OUT_OF_MEMORY : GPUMEM_ERROR_DRIVER};
  if (h.inject.kind == kUnmap) h.inject.status = GPUMEM_ERROR_DRIVER;  // an unmap has no memory to run out of
}

void op_settings(Harness& h, Input& in) {
  const uint8_t kind = in.u8();
  const uint32_t arg = kind % 4 ? in.u16() : 0;
  switch (kind % 4) {
    case 0:
      g_op_name = "set limit";
      h.limit = decode_bytes(h, in);
      CHECK_OK(gpumem_pool_set_limit(h.pool, h.limit));
      ++g_reached.limits;
      break;
    case 1:
      g_op_name = "set page reclaim";
      h.reclaim = !h.reclaim;
      CHECK_OK(gpumem_pool_set_page_reclaim(h.pool, h.reclaim ? 1 : 0));
      ++g_reached.reclaim_toggles;
      break;
    case 2:
      g_op_name = "set stream reuse";
      CHECK_OK(gpumem_pool_set_stream_reuse(h.pool, static_cast<int32_t>(arg % 3)));
      ++g_reached.reuse_sets;
      break;
    default: {
      g_op_name = "record stream";
      if (h.live.empty()) return;
      Live& l = h.live[arg % h.live.size()];
      const gpumem_stream_t stream = kStreams[(arg >> 8) % kStreamValues];
      const gpumem_status_t st = gpumem_pool_record_stream(h.pool, reinterpret_cast<void*>(l.ptr), stream);
      if (stream == GPUMEM_STREAM_PER_THREAD) {
        CHECK(st == GPUMEM_ERROR_INVALID_ARGUMENT, "record_stream of the per-thread stream returned %s",
              gpumem_status_name(st));
        return;
      }
      CHECK_OK(st);
      l.uses |= 1u << id_of(stream);
      ++h.order.queued[id_of(stream)];  // a kernel there uses it
      ++g_reached.record_streams;
      break;
    }
  }
}

// Frees everything, lets the GPU finish, returns everything: every range must be given back.
// Or (force) destroys the pool with its blocks live and its streams' work still queued.
void teardown(Harness& h, bool force) {
  g_op_name = "teardown";
  h.inject = Injection{};
  h.space.budget = 0;
  h.space.refuse_reserve = false;
  if (force) {
    h.live.clear();  // the pool frees them
    CHECK_OK(gpumem_allocator_destroy_force(h.pool));
    ++g_reached.forced_destroys;
  } else {
    while (!h.live.empty()) free_live(h, h.live.size() - 1, kStreams[h.live.back().stream + 1]);
    for (int s = 0; s < kStreamIds; ++s) h.order.finish(s, h.order.queued[s]);
    CHECK_OK(gpumem_pool_release(h.pool, nullptr, GPUMEM_POOL_RELEASE_ALL_STREAMS));
    check_all(h);
    CHECK_EQ(h.space.mapped, 0, "bytes mapped once everything was freed and released");
    CHECK_EQ(h.space.reserved, 0, "bytes reserved once everything was freed and released");
    CHECK_OK(gpumem_allocator_destroy(h.pool));
  }
  CHECK_EQ(h.space.mapped, 0, "bytes mapped once the pool was destroyed");
  CHECK_EQ(h.space.reserved, 0, "bytes reserved once the pool was destroyed");
  CHECK(h.order.live.empty(), "the destroyed pool left %zu fences unreleased", h.order.live.size());
  if (h.watch) CHECK_OK(gpumem_allocator_destroy(h.watch));
  CHECK_OK(gpumem_allocator_destroy(h.functions));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fuzz_check::data = data;
  fuzz_check::size = size;
  g_op = 0;
  g_op_name = "setup";
  Input in{data, size};
  Harness h;
  // Setup: the kind of pool, real memory or not, the unit and range, reclaim, reuse, limit, budget.
  const uint8_t setup = in.u8(), more = in.u8();
  h.ordered = setup % 3 != 0;
  h.space.real = setup & 4;
  static const size_t real_units[] = {4096, size_t{64} << 10}, fake_units[] = {512, 4096, size_t{64} << 10};
  h.space.unit = h.space.real ? real_units[(setup >> 3) % 2] : fake_units[(setup >> 3) % 3];
  h.space.range = (size_t{1} << 20) << ((setup >> 5) % 3);  // 1, 2 or 4 MiB
  h.reclaim = more % 8 != 0;
  h.limit = more & 8 ? decode_bytes(h, in) : 0;
  h.space.budget = more & 16 ? decode_bytes(h, in) : 0;
  g_reached.inputs_ordered += h.ordered;
  g_reached.inputs_unordered += !h.ordered;
  g_reached.inputs_real += h.space.real;

  gpumem_allocator_functions_t f;
  std::memset(&f, 0, sizeof f);
  f.struct_size = sizeof f;
  f.context = &h;
  f.device = -1;
  // Plain allocations never come: a pool over ranges only maps.
  f.alloc = [](void*, size_t, int32_t, gpumem_stream_t, void**) -> gpumem_status_t {
    die("the pool made a plain allocation of an upstream with ranges");
  };
  f.free = [](void*, void*, size_t, int32_t, gpumem_stream_t) -> gpumem_status_t {
    die("the pool freed a plain allocation of an upstream with ranges");
  };
  f.reserve = cb_reserve;
  f.unreserve = cb_unreserve;
  f.map = cb_map;
  f.unmap = cb_unmap;
  f.map_unit = h.space.unit;
  f.range_size = h.space.range;
  CHECK_OK(gpumem_allocator_create_functions(&f, &h.functions));
  if (h.ordered) {
    gpumem::alloc::Ranges* inner = gpumem::alloc::Allocator::from(h.functions)->ranges();
    CHECK(inner != nullptr, "the functions allocator has no ranges");
    auto* watch = new Watch(h, *inner);
    h.watch = watch;
    h.internals = new Pool(watch, h.limit, &h.order);
    h.pool = h.internals;
    CHECK_OK(gpumem_pool_set_stream_reuse(h.pool, (more >> 5) % 3));
  } else {
    gpumem_pool_params_t params = GPUMEM_POOL_PARAMS_INIT;
    params.upstream = h.functions;
    params.limit = h.limit;
    CHECK_OK(gpumem_pool_create(&params, &h.pool));
    h.internals = static_cast<Pool*>(gpumem::alloc::Allocator::from(h.pool));
  }
  CHECK_OK(gpumem_pool_set_page_reclaim(h.pool, h.reclaim ? 1 : 0));
  uint64_t id = 0;
  CHECK_OK(gpumem_allocator_add_hook(h.pool, GPUMEM_HOOK_UPSTREAM_ALLOC_PRE | GPUMEM_HOOK_UPSTREAM_ALLOC_POST, on_grow,
                                     &h, &id));
  check_all(h);
  while (!in.done()) {
    ++g_op;
    h.fired.clear();
    h.grown = 0;
    switch (in.u8() % 16) {
      case 0:
      case 1:
      case 2:
      case 3:
      case 4:
      case 5:
        op_alloc(h, in);
        break;
      case 6:
      case 7:
      case 8:
        op_free(h, in, false);
        break;
      case 9:
        op_free(h, in, true);
        break;
      case 10:
      case 11:
        op_complete(h, in);
        break;
      case 12:
        op_release(h, in);
        break;
      case 13:
        op_device(h, in);
        break;
      default:
        op_settings(h, in);
        break;
    }
    check_all(h);
  }
  teardown(h, size && data[size - 1] % 4 == 3);  // the last byte, read once more
  return 0;
}

#ifdef GPUMEM_FUZZ_REPLAY
// Without libFuzzer: `fuzz_pool_ranges_replay [--inputs N] [FILE_OR_FOLDER...]` runs N fixed
// pseudo-random inputs (2000 with no arguments, none with only files: `fuzz_pool_ranges_replay
// crash-<hash>` reruns a finding), then every file given or in each folder given. With inputs, it
// fails if a path they are meant to reach was never reached.
int main(int argc, char** argv) {
  int inputs = 0, first = 1;
  if (argc > 2 && std::strcmp(argv[1], "--inputs") == 0) {
    inputs = std::atoi(argv[2]);
    first = 3;
  } else if (argc == 1) {
    inputs = 2000;
  }
  constexpr size_t kLength = 256;
  uint64_t state = 0x9e3779b97f4a7c15;  // xorshift64*: the same inputs on every run
  std::vector<uint8_t> data(kLength);
  for (int n = 0; n < inputs; ++n) {
    for (uint8_t& b : data) {
      state ^= state >> 12;
      state ^= state << 25;
      state ^= state >> 27;
      b = static_cast<uint8_t>((state * 0x2545f4914f6cdd1d) >> 56);
    }
    LLVMFuzzerTestOneInput(data.data(), data.size());
  }
  size_t files = 0;
  for (int a = first; a < argc; ++a)
    for (const std::string& path : fuzz_replay::files_at(argv[a])) {
      if (!fuzz_replay::read_file(path, data)) {
        std::fprintf(stderr, "fuzz_pool_ranges_replay: cannot read %s\n", path.c_str());
        return 2;
      }
      LLVMFuzzerTestOneInput(data.data(), data.size());
      ++files;
    }
  const Reached& r = g_reached;
  std::printf("fuzz_pool_ranges_replay: %d inputs and %zu file(s) ok (%" PRIu64 " with a stream order, %" PRIu64
              " without; %" PRIu64 " over host memory)\n",
              inputs, files, r.inputs_ordered, r.inputs_unordered, r.inputs_real);
  std::printf("  %" PRIu64 " allocations, %" PRIu64 " out of memory (%" PRIu64
              " with room, after an injected failure), %" PRIu64 " injected failures, %" PRIu64 " frees (%" PRIu64
              " on another stream, %" PRIu64 " pending)\n",
              r.allocs, r.ooms, r.oom_excused, r.injected_failures, r.frees, r.foreign_frees, r.pending_frees);
  std::printf("  %" PRIu64 " completions, %" PRIu64 " releases, %" PRIu64 " limits, %" PRIu64
              " reclaim toggles, %" PRIu64 " reuse settings, %" PRIu64 " recorded streams\n",
              r.completes, r.releases, r.limits, r.reclaim_toggles, r.reuse_sets, r.record_streams);
  std::printf("  %" PRIu64 " growths; with a stream order %" PRIu64 " moves of %" PRIu64 " units (%" PRIu64
              " unmap-then-map pairs, %" PRIu64 " moves losing a unit), without one %" PRIu64
              " unmap-then-map pairs; %" PRIu64 " unmaps that waited for work, %" PRIu64
              " hand-outs ordered by a fence wait, %" PRIu64 " reclaim checks\n",
              r.grows, r.moves, r.moved_units, r.pairs_ordered, r.lost_units, r.pairs, r.unmap_waits,
              r.lent_before_done, r.reclaim_checks);
  std::printf("  %" PRIu64 " pools destroyed with blocks live and work queued\n", r.forced_destroys);
  if (!inputs) return 0;
  // The inputs are fixed, so each path is reached or not on every run; a path no longer reached
  // means the checks on it no longer run.
  const uint64_t reached[] = {r.allocs,
                              r.ooms,
                              r.oom_excused,
                              r.injected_failures,
                              r.frees,
                              r.foreign_frees,
                              r.pending_frees,
                              r.completes,
                              r.releases,
                              r.limits,
                              r.reclaim_toggles,
                              r.reuse_sets,
                              r.record_streams,
                              r.grows,
                              r.moves,
                              r.lost_units,
                              r.pairs,
                              r.unmap_waits,
                              r.lent_before_done,
                              r.reclaim_checks,
                              r.forced_destroys,
                              r.inputs_ordered,
                              r.inputs_unordered,
                              r.inputs_real};
  for (size_t k = 0; k < sizeof reached / sizeof reached[0]; ++k)
    if (reached[k] == 0) {
      std::fprintf(stderr, "fuzz_pool_ranges_replay: path %zu of the list in main() was never reached\n", k);
      return 1;
    }
  return 0;
}
#endif
