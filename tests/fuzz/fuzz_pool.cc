// The pool fuzzer: random sequences of C-API pool operations over the plain host allocator,
// decoded from the input, with everything checked after every operation against a shadow model
// (live blocks, the upstream blocks each pool holds, the statistics it must report) and against
// the pool's own walk of its structures (Pool::check_invariants, reached by linking the library's
// objects). Built as a libFuzzer target with clang, and as a deterministic replay under CTest
// otherwise (GPUMEM_FUZZ_REPLAY), so every build runs the same checks. Pools over address ranges
// (segments grown in place, page reclaim, fences completed by the input) have their own fuzzer,
// fuzz_pool_ranges.cc.
#include <algorithm>
#include <cinttypes>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <vector>

#include "fuzz_check.hpp"
#include "gpumem/gpumem.h"
#include "pool/pool.hpp"

namespace {

constexpr size_t kRound = gpumem::pool::kRound;
constexpr size_t kMaxLive = 64;  // per pool: bounds the memory an input can hold (64 x 4 MiB)
constexpr size_t kMaxSize = size_t{4} << 20;
constexpr int kSlots = 2;

// NULL and the legacy stream share an arena, so 5 stream values give 4 arena keys. The fake
// addresses are never dereferenced: the host allocator ignores streams and the pool only keys on them.
const gpumem_stream_t kStreams[] = {nullptr, GPUMEM_STREAM_LEGACY, GPUMEM_STREAM_PER_THREAD,
                                    reinterpret_cast<gpumem_stream_t>(uintptr_t{0x1000}),
                                    reinterpret_cast<gpumem_stream_t>(uintptr_t{0x2000})};
constexpr int kStreamCount = sizeof kStreams / sizeof kStreams[0];

int key_of(gpumem_stream_t stream) {
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
      return -1;
  }
}

// What the inputs exercised, so the replay can insist that every path was reached.
struct Reached {
  uint64_t allocs, from_cache, grown, retried, ooms, frees, refused_frees, releases, blocks_returned, limits,
      busy_destroys, destroys, forced_destroys, creates;
} g_reached;

// Where in the input we are, for the report of a failed check.
int g_op;
const char* g_op_name = "setup";

[[noreturn]] __attribute__((format(printf, 1, 2))) void die(const char* fmt, ...) {
  char where[128], extra[1200];
  std::snprintf(where, sizeof where, "in operation %d (%s)", g_op, g_op_name);
  std::snprintf(extra, sizeof extra, "fuzz_pool: last gpumem detail: %s\n", gpumem_last_error_detail());
  va_list ap;
  va_start(ap, fmt);
  fuzz_check::fail("fuzz_pool", where, extra, fmt, ap);
}

#define CHECK_EQ(got, want, what)                                                              \
  do {                                                                                         \
    const uint64_t got_ = (got), want_ = (want);                                               \
    if (got_ != want_) die("%s is %" PRIu64 ", the model says %" PRIu64, (what), got_, want_); \
  } while (0)

#define CHECK_STATUS(call, want)                                                                                       \
  do {                                                                                                                 \
    const gpumem_status_t got_ = (call);                                                                               \
    if (got_ != (want)) die("%s returned %s, expected %s", #call, gpumem_status_name(got_), gpumem_status_name(want)); \
  } while (0)

void check_detail(const char* fragment) {
  if (!std::strstr(gpumem_last_error_detail(), fragment)) die("the detail does not contain \"%s\"", fragment);
}

// Reads the input; past its end every read gives 0.
struct Input {
  const uint8_t* p;
  size_t n;
  size_t i = 0;
  bool done() const { return i >= n; }
  uint8_t u8() { return i < n ? p[i++] : 0; }
  // Each read in its own statement: the order of operands of | is unspecified, and the same input
  // must decode the same under every compiler.
  uint32_t u16() {
    const uint32_t low = u8();
    return low | uint32_t{u8()} << 8;
  }
  uint32_t u24() {
    const uint32_t low = u16();
    return low | uint32_t{u8()} << 16;
  }
};

size_t round_up(size_t size) { return (size + kRound - 1) / kRound * kRound; }

// Mostly small sizes, some at the rounding boundary, some up to 4 MiB.
size_t decode_size(Input& in) {
  switch (in.u8() % 5) {
    case 0:
      return 1 + in.u8();
    case 1:
      return 1 + in.u16() % 4096;
    case 2:
      return 1 + in.u16() % 65536;
    case 3:
      return (1 + in.u8() % 128) * kRound;  // an exact multiple: no rounding
    default:
      return 1 + in.u24() % kMaxSize;
  }
}

// 0 (none), or a limit from below one block to a few MiB.
uint64_t decode_limit(Input& in) {
  const uint32_t v = in.u16();
  if (v % 4 == 0) return 0;
  return uint64_t{v >> 2} * kRound;
}

struct Live {
  uintptr_t ptr;
  size_t size;
  size_t rounded;
  int key;
  uint8_t pattern;
};

struct Block {
  uintptr_t ptr;
  size_t size;
  int key;
  bool operator==(const Block& o) const { return ptr == o.ptr && size == o.size && key == o.key; }
};

// A free range of a pool as the model sees it: the gaps between live blocks inside upstream blocks.
struct Gap {
  uintptr_t ptr;
  size_t size;
  int key;
  bool whole;  // the whole upstream block is free
};

struct PoolModel {
  gpumem_allocator_t* handle = nullptr;
  uint64_t limit = 0;
  std::vector<Live> live;
  std::map<uintptr_t, Block> blocks;  // what it holds from the upstream, as the hooks saw it
  uint64_t in_use = 0, requested = 0, peak_in_use = 0, peak_reserved = 0;
  uint64_t allocs = 0, frees = 0, up_allocs = 0, up_frees = 0, ooms = 0, retries = 0;
  std::vector<uintptr_t> freed;  // recent frees, for double frees

  uint64_t reserved() const {
    uint64_t sum = 0;
    for (const auto& [p, b] : blocks) sum += b.size;
    return sum;
  }
};

struct Harness {
  gpumem_allocator_t* upstream = nullptr;
  PoolModel pools[kSlots];
  uint64_t up_allocs = 0, up_frees = 0;  // upstream totals, of pools alive and gone
  uint32_t serial = 0;
};

PoolModel* model_of(Harness& h, const gpumem_allocator_t* handle) {
  for (PoolModel& pm : h.pools)
    if (pm.handle && pm.handle == handle) return &pm;
  return nullptr;
}

void on_pool_event(const gpumem_hook_info_t* info, void* user_data) {
  auto& h = *static_cast<Harness*>(user_data);
  if (info->event != GPUMEM_HOOK_UPSTREAM_ALLOC_POST || info->status != GPUMEM_SUCCESS) return;
  PoolModel* pm = model_of(h, info->allocator);
  CHECK(pm != nullptr, "an upstream allocation hook ran for a pool the model does not know");
  const auto p = reinterpret_cast<uintptr_t>(info->ptr);
  CHECK(p != 0 && info->size % kRound == 0 && info->size > 0, "the pool took a bad block from its upstream");
  for (const PoolModel& other : h.pools)
    CHECK(!other.blocks.count(p), "the upstream handed out a block a pool already holds");
  pm->blocks[p] = Block{p, info->size, key_of(info->stream)};
  ++pm->up_allocs;
  ++h.up_allocs;
}

void on_upstream_event(const gpumem_hook_info_t* info, void* user_data) {
  auto& h = *static_cast<Harness*>(user_data);
  if (info->event != GPUMEM_HOOK_FREE_POST || info->status != GPUMEM_SUCCESS) return;
  const auto p = reinterpret_cast<uintptr_t>(info->ptr);
  for (PoolModel& pm : h.pools) {
    const auto it = pm.blocks.find(p);
    if (it == pm.blocks.end()) continue;
    CHECK_EQ(info->mem_size, it->second.size, "the size of a block returned to the upstream");
    pm.blocks.erase(it);
    ++pm.up_frees;
    ++h.up_frees;
    return;
  }
  die("a pool returned %p to the upstream, which no pool holds", info->ptr);
}

// The free ranges of a pool, checking on the way that every live block lies inside one upstream
// block of its own stream's arena and that no two overlap.
std::vector<Gap> gaps_of(const PoolModel& pm) {
  std::vector<const Live*> sorted;
  sorted.reserve(pm.live.size());
  for (const Live& l : pm.live) sorted.push_back(&l);
  std::sort(sorted.begin(), sorted.end(), [](const Live* a, const Live* b) { return a->ptr < b->ptr; });
  std::vector<Gap> gaps;
  size_t j = 0;
  for (const auto& [start, b] : pm.blocks) {
    const uintptr_t end = b.ptr + b.size;
    CHECK(j == sorted.size() || sorted[j]->ptr >= b.ptr, "a live block %#" PRIxPTR " lies in no upstream block",
          sorted[j]->ptr);
    uintptr_t cursor = b.ptr;
    size_t inside = 0;
    for (; j < sorted.size() && sorted[j]->ptr < end; ++j, ++inside) {
      const Live& l = *sorted[j];
      CHECK(l.ptr >= cursor, "live blocks overlap at %#" PRIxPTR, l.ptr);
      CHECK(l.ptr + l.rounded <= end, "a live block runs past the end of its upstream block");
      CHECK(l.key == b.key, "a block allocated on stream key %d came from the arena of key %d", l.key, b.key);
      if (l.ptr > cursor) gaps.push_back(Gap{cursor, l.ptr - cursor, b.key, false});
      cursor = l.ptr + l.rounded;
    }
    if (cursor < end) gaps.push_back(Gap{cursor, end - cursor, b.key, inside == 0});
  }
  CHECK(j == sorted.size(), "a live block %#" PRIxPTR " lies in no upstream block", sorted[j]->ptr);
  return gaps;
}

void check_pattern(const Live& l) {
  const auto* p = reinterpret_cast<const uint8_t*>(l.ptr);
  CHECK(p[0] == l.pattern && p[l.size - 1] == l.pattern,
        "the block at %p (%zu bytes) lost its contents: memory handed out twice", static_cast<const void*>(p), l.size);
}

void check_pool(PoolModel& pm) {
  const std::vector<Gap> gaps = gaps_of(pm);
  uint64_t free_bytes = 0;
  for (const Gap& g : gaps) free_bytes += g.size;
  const uint64_t reserved = pm.reserved();
  // Within one operation the pool first returns blocks and then takes one, so the peak of what
  // it held is the larger of the peak before and what it holds after.
  pm.peak_reserved = std::max(pm.peak_reserved, reserved);

  gpumem_allocator_stats_t s;
  s.struct_size = sizeof s;
  CHECK_STATUS(gpumem_allocator_get_stats(pm.handle, &s), GPUMEM_SUCCESS);
  CHECK_EQ(s.bytes_in_use, pm.in_use, "bytes_in_use");
  CHECK_EQ(s.bytes_requested, pm.requested, "bytes_requested");
  CHECK_EQ(s.peak_bytes_in_use, pm.peak_in_use, "peak_bytes_in_use");
  CHECK_EQ(s.bytes_reserved, reserved, "bytes_reserved");
  CHECK_EQ(s.peak_bytes_reserved, pm.peak_reserved, "peak_bytes_reserved");
  CHECK_EQ(s.alloc_count, pm.allocs, "alloc_count");
  CHECK_EQ(s.free_count, pm.frees, "free_count");
  CHECK_EQ(s.upstream_alloc_count, pm.up_allocs, "upstream_alloc_count");
  CHECK_EQ(s.upstream_free_count, pm.up_frees, "upstream_free_count");
  CHECK_EQ(s.oom_count, pm.ooms, "oom_count");
  CHECK_EQ(s.retry_count, pm.retries, "retry_count");

  gpumem_pool_info_t i;
  i.struct_size = sizeof i;
  CHECK_STATUS(gpumem_pool_get_info(pm.handle, &i), GPUMEM_SUCCESS);
  CHECK_EQ(i.used_bytes, pm.in_use, "info used_bytes");
  CHECK_EQ(i.total_bytes, reserved, "info total_bytes");
  CHECK_EQ(i.free_bytes, free_bytes, "info free_bytes");
  CHECK_EQ(i.used_bytes + i.free_bytes, i.total_bytes, "info used + free");
  // Free neighbours merge, so every gap between live blocks is exactly one free block.
  CHECK_EQ(i.free_block_count, gaps.size(), "info free_block_count");
  CHECK_EQ(i.limit, pm.limit, "info limit");
  // An arena that holds nothing is retired at once (no stream lends here), so the arenas are the
  // stream keys of the blocks held.
  unsigned keys = 0;
  for (const auto& [p, b] : pm.blocks) keys |= 1u << b.key;
  CHECK_EQ(i.arena_count, static_cast<uint64_t>(__builtin_popcount(keys)), "info arena_count");

  try {
    static_cast<gpumem::pool::Pool*>(gpumem::alloc::Allocator::from(pm.handle))->check_invariants();
  } catch (const std::exception& e) {
    die("Pool::check_invariants: %s", e.what());
  }
}

void check_all(Harness& h) {
  std::vector<const Live*> all;
  uint64_t held = 0;
  for (PoolModel& pm : h.pools) {
    if (!pm.handle) continue;
    check_pool(pm);
    held += pm.reserved();
    for (const Live& l : pm.live) {
      check_pattern(l);
      all.push_back(&l);
    }
  }
  // Pools share the upstream: their blocks (and so their live blocks) must not overlap either.
  std::sort(all.begin(), all.end(), [](const Live* a, const Live* b) { return a->ptr < b->ptr; });
  for (size_t k = 1; k < all.size(); ++k)
    CHECK(all[k - 1]->ptr + all[k - 1]->rounded <= all[k]->ptr, "live blocks of two pools overlap");

  // Every byte is in use, free in a pool, or back with the upstream.
  gpumem_allocator_stats_t u;
  u.struct_size = sizeof u;
  CHECK_STATUS(gpumem_allocator_get_stats(h.upstream, &u), GPUMEM_SUCCESS);
  CHECK_EQ(u.bytes_in_use, held, "the upstream's bytes_in_use (the pools' total_bytes)");
  CHECK_EQ(u.alloc_count, h.up_allocs, "the upstream's alloc_count");
  CHECK_EQ(u.free_count, h.up_frees, "the upstream's free_count");
}

// The blocks a pool should hold once it returns its wholly free blocks of one key (or all, key -1).
std::map<uintptr_t, Block> without_whole(const PoolModel& pm, const std::vector<Gap>& gaps, int key) {
  std::map<uintptr_t, Block> left = pm.blocks;
  for (const Gap& g : gaps)
    if (g.whole && (key < 0 || g.key == key)) left.erase(g.ptr);
  return left;
}

void expect_blocks(const PoolModel& pm, const std::map<uintptr_t, Block>& want, const char* why) {
  if (pm.blocks != want)
    die("the pool holds %zu upstream blocks (%" PRIu64 " bytes), expected %zu: %s", pm.blocks.size(), pm.reserved(),
        want.size(), why);
}

bool same_stats(gpumem_allocator_t* a, const gpumem_allocator_stats_t& before) {
  gpumem_allocator_stats_t s;
  s.struct_size = sizeof s;
  CHECK_STATUS(gpumem_allocator_get_stats(a, &s), GPUMEM_SUCCESS);
  return std::memcmp(&s, &before, sizeof s) == 0;
}

gpumem_allocator_stats_t stats_of(gpumem_allocator_t* a) {
  gpumem_allocator_stats_t s;
  std::memset(&s, 0, sizeof s);
  s.struct_size = sizeof s;
  CHECK_STATUS(gpumem_allocator_get_stats(a, &s), GPUMEM_SUCCESS);
  return s;
}

void create_pool(Harness& h, PoolModel& pm, uint64_t limit) {
  gpumem_pool_params_t params = GPUMEM_POOL_PARAMS_INIT;
  params.upstream = h.upstream;
  params.limit = limit;
  gpumem_allocator_t* pool = reinterpret_cast<gpumem_allocator_t*>(uintptr_t{1});
  CHECK_STATUS(gpumem_pool_create(&params, &pool), GPUMEM_SUCCESS);
  CHECK(pool != nullptr, "gpumem_pool_create gave no pool");
  pm = PoolModel{};
  pm.handle = pool;
  pm.limit = limit;
  uint64_t id = 0;
  CHECK_STATUS(gpumem_allocator_add_hook(pool, GPUMEM_HOOK_UPSTREAM_ALLOC_POST, on_pool_event, &h, &id),
               GPUMEM_SUCCESS);
}

// The model forgets a pool once the library destroyed it; its blocks must all be back upstream.
void forget_pool(PoolModel& pm) {
  CHECK(pm.blocks.empty(), "a destroyed pool kept %zu upstream blocks", pm.blocks.size());
  pm = PoolModel{};
}

PoolModel* pick_pool(Harness& h, Input& in) {
  const int slot = in.u8() % kSlots;
  if (h.pools[slot].handle) return &h.pools[slot];
  if (h.pools[1 - slot].handle) return &h.pools[1 - slot];
  return nullptr;
}

void op_alloc(Harness& h, Input& in) {
  g_op_name = "alloc";
  PoolModel* pm = pick_pool(h, in);
  const gpumem_stream_t stream = kStreams[in.u8() % kStreamCount];
  const size_t size = decode_size(in);
  if (!pm || pm->live.size() >= kMaxLive) return;
  const int key = key_of(stream);
  const size_t rounded = round_up(size);
  const std::vector<Gap> gaps = gaps_of(*pm);
  bool fits = false;
  uint64_t whole_free = 0;
  for (const Gap& g : gaps) {
    if (g.key == key && g.size >= rounded) fits = true;
    if (g.whole) whole_free += g.size;
  }
  const uint64_t reserved = pm->reserved();
  const uint64_t limit = pm->limit;
  // The pool grows only within its limit; when it cannot, it returns its whole free blocks first.
  const bool room = !limit || reserved + rounded <= limit;
  const bool room_after_release = limit && rounded <= limit && reserved - whole_free + rounded <= limit;
  const auto before = pm->blocks;
  const uint64_t retries_before = stats_of(pm->handle).retry_count;

  void* p = reinterpret_cast<void*>(uintptr_t{1});
  const gpumem_status_t st = gpumem_alloc(pm->handle, size, stream, &p);
  const uint64_t retried = stats_of(pm->handle).retry_count - retries_before;
  CHECK(retried <= 1, "one allocation counted %" PRIu64 " retries without reclaim callbacks", retried);
  pm->retries += retried;
  g_reached.retried += retried;
  if (fits) {
    // The arena caches a free block that fits: the pool must hand it out, whatever its limit.
    CHECK(st == GPUMEM_SUCCESS && !retried && pm->blocks == before,
          "the arena caches a free block of at least %zu bytes, yet the pool %s", rounded,
          st != GPUMEM_SUCCESS ? "failed"
          : retried            ? "retried"
                               : "took a new block from its upstream");
  }
  // A request larger than the limit itself is refused at once, the cache kept.
  const bool beyond_limit = limit && rounded > limit;
  if (retried) {
    CHECK(!room, "the pool retried although its limit had room for %zu bytes", rounded);
    CHECK(!beyond_limit, "the pool retried a request larger than its whole limit");
  } else {
    CHECK(st == GPUMEM_SUCCESS || (beyond_limit && !fits), "an allocation failed without retrying");
  }

  if (st != GPUMEM_SUCCESS && beyond_limit) {
    CHECK_STATUS(st, GPUMEM_ERROR_OUT_OF_MEMORY);
    CHECK(p == nullptr, "a failed allocation did not clear its output");
    check_detail("which the request alone exceeds");
    ++pm->ooms;
    ++g_reached.ooms;
    expect_blocks(*pm, before, "a request beyond the limit keeps the cache");
    return;
  }

  if (st != GPUMEM_SUCCESS) {
    CHECK_STATUS(st, GPUMEM_ERROR_OUT_OF_MEMORY);
    CHECK(p == nullptr, "a failed allocation did not clear its output");
    CHECK(!room_after_release,
          "out of memory for %zu bytes (rounded %zu) with %" PRIu64 " bytes held, %" PRIu64
          " of them in whole free blocks, limit %" PRIu64,
          size, rounded, reserved, whole_free, limit);
    check_detail("out of memory allocating");
    ++pm->ooms;
    ++g_reached.ooms;
    expect_blocks(*pm, without_whole(*pm, gaps, -1), "a failed allocation returns every whole free block");
    return;
  }

  CHECK(p != nullptr, "a successful allocation gave NULL");
  const auto ptr = reinterpret_cast<uintptr_t>(p);
  if (fits) {
    ++g_reached.from_cache;
  } else {
    // Nothing cached fits: a new upstream block of exactly the rounded size, after returning
    // every whole free block if the limit had no room.
    CHECK(room || room_after_release, "the pool grew past its limit");
    CHECK(pm->blocks.count(ptr), "nothing cached fit, yet the pool did not hand out a new upstream block");
    std::map<uintptr_t, Block> want = retried ? without_whole(*pm, gaps, -1) : before;
    want[ptr] = Block{ptr, rounded, key};
    expect_blocks(*pm, want, "an allocation that grew");
    ++g_reached.grown;
  }
  if (limit && pm->reserved() > reserved) CHECK(pm->reserved() <= limit, "the pool grew past its limit");

  const auto pattern = static_cast<uint8_t>(0x5a ^ (++h.serial * 131));
  auto* bytes = static_cast<uint8_t*>(p);
  bytes[0] = pattern;
  bytes[size - 1] = pattern;
  pm->live.push_back(Live{ptr, size, rounded, key, pattern});
  ++pm->allocs;
  ++g_reached.allocs;
  pm->in_use += rounded;
  pm->requested += size;
  pm->peak_in_use = std::max(pm->peak_in_use, pm->in_use);
}

void free_live(PoolModel& pm, size_t index, gpumem_stream_t stream) {
  const Live l = pm.live[index];
  check_pattern(l);
  const auto before = pm.blocks;
  CHECK_STATUS(gpumem_free(pm.handle, reinterpret_cast<void*>(l.ptr), stream), GPUMEM_SUCCESS);
  pm.live.erase(pm.live.begin() + static_cast<std::ptrdiff_t>(index));
  ++pm.frees;
  ++g_reached.frees;
  pm.in_use -= l.rounded;
  pm.requested -= l.size;
  if (pm.freed.size() >= 16) pm.freed.erase(pm.freed.begin());
  pm.freed.push_back(l.ptr);
  expect_blocks(pm, before, "a free keeps the memory in the pool");
}

void op_free(Harness& h, Input& in, bool newest) {
  g_op_name = "free";
  PoolModel* pm = pick_pool(h, in);
  const uint32_t pick = in.u16();
  const gpumem_stream_t stream = kStreams[in.u8() % kStreamCount];
  if (!pm || pm->live.empty()) return;
  free_live(*pm, newest ? pm->live.size() - 1 : pick % pm->live.size(), stream);
}

// A free the pool must refuse (or, for NULL, ignore) without changing anything.
void op_bad_free(Harness& h, Input& in) {
  g_op_name = "bad free";
  PoolModel* pm = pick_pool(h, in);
  const uint32_t kind = in.u8() % 6;
  const uint32_t pick = in.u16();
  const uint32_t offset = in.u24();
  if (!pm) return;
  static uint64_t foreign[64];
  void* p = nullptr;
  switch (kind) {
    case 0:
      break;  // NULL: nothing to do
    case 1:
      p = reinterpret_cast<char*>(foreign) + offset % sizeof foreign;
      break;
    case 2: {  // inside a live block, never its start
      if (pm->live.empty()) return;
      const Live& l = pm->live[pick % pm->live.size()];
      p = reinterpret_cast<void*>(l.ptr + 1 + offset % (l.rounded - 1));
      break;
    }
    case 3: {  // freed already, unless the address was handed out again since
      if (pm->freed.empty()) return;
      const uintptr_t f = pm->freed[pick % pm->freed.size()];
      for (const Live& l : pm->live)
        if (l.ptr == f) return;
      p = reinterpret_cast<void*>(f);
      break;
    }
    case 4: {  // the other pool's
      const PoolModel& other = h.pools[pm == &h.pools[0] ? 1 : 0];
      if (!other.handle || other.live.empty()) return;
      p = reinterpret_cast<void*>(other.live[pick % other.live.size()].ptr);
      break;
    }
    default: {  // the start of a free block in the pool
      const std::vector<Gap> gaps = gaps_of(*pm);
      if (gaps.empty()) return;
      p = reinterpret_cast<void*>(gaps[pick % gaps.size()].ptr);
      break;
    }
  }
  const gpumem_allocator_stats_t before = stats_of(pm->handle);
  gpumem_pool_info_t info_before;
  info_before.struct_size = sizeof info_before;
  CHECK_STATUS(gpumem_pool_get_info(pm->handle, &info_before), GPUMEM_SUCCESS);
  const auto blocks_before = pm->blocks;
  if (p == nullptr) {
    CHECK_STATUS(gpumem_free(pm->handle, nullptr, kStreams[pick % kStreamCount]), GPUMEM_SUCCESS);
  } else {
    CHECK_STATUS(gpumem_free(pm->handle, p, kStreams[pick % kStreamCount]), GPUMEM_ERROR_NOT_OWNED);
    check_detail("was not allocated by this pool");
    ++g_reached.refused_frees;
  }
  CHECK(same_stats(pm->handle, before), "a refused free changed the statistics");
  gpumem_pool_info_t info;
  info.struct_size = sizeof info;
  CHECK_STATUS(gpumem_pool_get_info(pm->handle, &info), GPUMEM_SUCCESS);
  CHECK(std::memcmp(&info, &info_before, sizeof info) == 0, "a refused free changed the pool's info");
  expect_blocks(*pm, blocks_before, "a refused free");
}

void op_release(Harness& h, Input& in) {
  g_op_name = "release";
  PoolModel* pm = pick_pool(h, in);
  const uint32_t kind = in.u8() % (kStreamCount + 2);
  if (!pm) return;
  const std::vector<Gap> gaps = gaps_of(*pm);
  if (kind == kStreamCount + 1) {
    const auto before = pm->blocks;
    CHECK_STATUS(gpumem_pool_release(pm->handle, nullptr, 0x2), GPUMEM_ERROR_INVALID_ARGUMENT);
    check_detail("unknown release flags");
    expect_blocks(*pm, before, "a refused release");
    return;
  }
  const bool all = kind == kStreamCount;
  const gpumem_stream_t stream = all ? kStreams[4] : kStreams[kind];
  const auto want = without_whole(*pm, gaps, all ? -1 : key_of(stream));
  const size_t held = pm->blocks.size();
  CHECK_STATUS(gpumem_pool_release(pm->handle, stream, all ? GPUMEM_POOL_RELEASE_ALL_STREAMS : 0), GPUMEM_SUCCESS);
  ++g_reached.releases;
  g_reached.blocks_returned += held - want.size();
  expect_blocks(*pm, want,
                all ? "release of all streams returns every whole free block"
                    : "release of a stream returns that arena's whole free blocks");
}

void op_set_limit(Harness& h, Input& in) {
  g_op_name = "set limit";
  PoolModel* pm = pick_pool(h, in);
  const uint64_t limit = decode_limit(in);
  if (!pm) return;
  const auto before = pm->blocks;
  CHECK_STATUS(gpumem_pool_set_limit(pm->handle, limit), GPUMEM_SUCCESS);
  ++g_reached.limits;
  pm->limit = limit;
  expect_blocks(*pm, before, "setting the limit");
}

void op_reset_peaks(Harness& h, Input& in) {
  g_op_name = "reset peaks";
  PoolModel* pm = pick_pool(h, in);
  if (!pm) return;
  CHECK_STATUS(gpumem_allocator_reset_peaks(pm->handle), GPUMEM_SUCCESS);
  pm->peak_in_use = pm->in_use;
  pm->peak_reserved = pm->reserved();
}

void op_destroy(Harness& h, Input& in) {
  g_op_name = "destroy";
  const uint32_t target = in.u8() % (kSlots + 1);
  if (target == kSlots) {
    // The upstream, while a pool relies on it.
    if (!h.pools[0].handle && !h.pools[1].handle) return;
    CHECK_STATUS(gpumem_allocator_destroy(h.upstream), GPUMEM_ERROR_BUSY);
    check_detail("relied on");
    return;
  }
  PoolModel& pm = h.pools[target];
  if (!pm.handle) return;
  if (!pm.live.empty()) {
    const auto before = pm.blocks;
    const gpumem_allocator_stats_t stats = stats_of(pm.handle);
    CHECK_STATUS(gpumem_allocator_destroy(pm.handle), GPUMEM_ERROR_BUSY);
    check_detail("live allocation");
    ++g_reached.busy_destroys;
    CHECK(same_stats(pm.handle, stats), "a refused destroy changed the statistics");
    expect_blocks(pm, before, "a refused destroy");
    return;
  }
  CHECK_STATUS(gpumem_allocator_destroy(pm.handle), GPUMEM_SUCCESS);
  ++g_reached.destroys;
  forget_pool(pm);
}

void op_destroy_force(Harness& h, Input& in) {
  g_op_name = "destroy force";
  PoolModel& pm = h.pools[in.u8() % kSlots];
  if (!pm.handle) return;
  CHECK_STATUS(gpumem_allocator_destroy_force(pm.handle), GPUMEM_SUCCESS);
  ++g_reached.forced_destroys;
  forget_pool(pm);
}

void op_create(Harness& h, Input& in) {
  g_op_name = "create";
  PoolModel& pm = h.pools[in.u8() % kSlots];
  const uint32_t kind = in.u8() % 4;
  const uint64_t limit = decode_limit(in);
  if (pm.handle) return;
  if (kind == 3) {
    // A fraction of the device's memory means nothing for host memory.
    gpumem_pool_params_t params = GPUMEM_POOL_PARAMS_INIT;
    params.upstream = h.upstream;
    params.limit_fraction = 0.5;
    gpumem_allocator_t* pool = reinterpret_cast<gpumem_allocator_t*>(uintptr_t{1});
    CHECK_STATUS(gpumem_pool_create(&params, &pool), GPUMEM_ERROR_INVALID_ARGUMENT);
    CHECK(pool == nullptr, "a failed create did not clear its output");
    return;
  }
  create_pool(h, pm, kind == 0 ? 0 : limit);
  ++g_reached.creates;
}

// Frees everything, returns everything, destroys everything: every byte must come back.
void teardown(Harness& h) {
  g_op_name = "teardown";
  for (PoolModel& pm : h.pools) {
    if (!pm.handle) continue;
    while (!pm.live.empty()) free_live(pm, pm.live.size() - 1, nullptr);
    const std::vector<Gap> gaps = gaps_of(pm);
    for (const Gap& g : gaps) CHECK(g.whole, "with nothing live, a free block is not a whole upstream block");
    CHECK_STATUS(gpumem_pool_release(pm.handle, nullptr, GPUMEM_POOL_RELEASE_ALL_STREAMS), GPUMEM_SUCCESS);
    CHECK(pm.blocks.empty(), "release of all streams with nothing live kept %zu blocks", pm.blocks.size());
    check_all(h);
    CHECK_STATUS(gpumem_allocator_destroy(pm.handle), GPUMEM_SUCCESS);
    forget_pool(pm);
  }
  check_all(h);
  const gpumem_allocator_stats_t u = stats_of(h.upstream);
  CHECK_EQ(u.bytes_in_use, 0, "the upstream's bytes_in_use at the end");
  CHECK_STATUS(gpumem_allocator_destroy(h.upstream), GPUMEM_SUCCESS);
  h.upstream = nullptr;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fuzz_check::data = data;
  fuzz_check::size = size;
  g_op = 0;
  g_op_name = "setup";
  Input in{data, size};
  Harness h;
  const uint8_t setup = in.u8();
  static const size_t alignments[] = {0, 64, 4096};
  CHECK_STATUS(gpumem_allocator_create_host(alignments[setup % 3], &h.upstream), GPUMEM_SUCCESS);
  uint64_t id = 0;
  CHECK_STATUS(gpumem_allocator_add_hook(h.upstream, GPUMEM_HOOK_FREE_POST, on_upstream_event, &h, &id),
               GPUMEM_SUCCESS);
  create_pool(h, h.pools[0], setup & 4 ? decode_limit(in) : 0);
  check_all(h);
  while (!in.done()) {
    ++g_op;
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
        op_free(h, in, false);
        break;
      case 8:
        op_free(h, in, true);
        break;
      case 9:
        op_bad_free(h, in);
        break;
      case 10:
        op_release(h, in);
        break;
      case 11:
        op_set_limit(h, in);
        break;
      case 12:
        op_reset_peaks(h, in);
        break;
      case 13:
        op_destroy(h, in);
        break;
      case 14:
        op_create(h, in);
        break;
      default:
        // Rarer than the others: it ends a pool and everything in it.
        if (in.u8() < 64) op_destroy_force(h, in);
        break;
    }
    check_all(h);
  }
  teardown(h);
  return 0;
}

#ifdef GPUMEM_FUZZ_REPLAY
// Without libFuzzer: the files named on the command line (crash inputs, say), or a fixed set of
// pseudo-random inputs: `fuzz_pool_replay [--inputs N] [FILE...]`.
int main(int argc, char** argv) {
  int inputs = 2000;
  int first_file = 1;
  if (argc > 2 && std::strcmp(argv[1], "--inputs") == 0) {
    inputs = std::atoi(argv[2]);
    first_file = 3;
  }
  if (argc > first_file) {
    for (int a = first_file; a < argc; ++a) {
      FILE* f = std::fopen(argv[a], "rb");
      if (!f) {
        std::fprintf(stderr, "fuzz_pool_replay: cannot open %s\n", argv[a]);
        return 2;
      }
      std::vector<uint8_t> data;
      for (int c; (c = std::fgetc(f)) != EOF;) data.push_back(static_cast<uint8_t>(c));
      std::fclose(f);
      LLVMFuzzerTestOneInput(data.data(), data.size());
    }
    std::printf("fuzz_pool_replay: %d file(s) ok\n", argc - first_file);
    return 0;
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
  const Reached& r = g_reached;
  std::printf("fuzz_pool_replay: %d inputs ok: %" PRIu64 " allocations (%" PRIu64 " from the cache, %" PRIu64
              " grown, %" PRIu64 " retried, %" PRIu64 " out of memory), %" PRIu64 " frees, %" PRIu64
              " refused frees, %" PRIu64 " releases returning %" PRIu64 " blocks, %" PRIu64 " limits set, %" PRIu64
              " destroys refused, %" PRIu64 " destroyed, %" PRIu64 " forced, %" PRIu64 " pools created\n",
              inputs, r.allocs, r.from_cache, r.grown, r.retried, r.ooms, r.frees, r.refused_frees, r.releases,
              r.blocks_returned, r.limits, r.busy_destroys, r.destroys, r.forced_destroys, r.creates);
  // The inputs are fixed, so each path is reached or not on every run; a path no longer reached
  // means the checks on it no longer run.
  const uint64_t reached[] = {r.allocs,        r.from_cache,    r.grown,           r.retried,         r.ooms,
                              r.frees,         r.refused_frees, r.releases,        r.blocks_returned, r.limits,
                              r.busy_destroys, r.destroys,      r.forced_destroys, r.creates};
  for (uint64_t n : reached) {
    if (n == 0) {
      std::fprintf(stderr, "fuzz_pool_replay: a path was never reached\n");
      return 1;
    }
  }
  return 0;
}
#endif
