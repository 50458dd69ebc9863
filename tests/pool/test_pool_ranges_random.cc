// Random allocations, frees, releases, limits and device budgets on a pool whose segments grow in
// place over host address ranges (host_ranges.h), with the pool's own walk of its structures
// after every step, every live block's bytes checked, and what the pool says it holds compared
// with what the upstream has mapped and reserved. Links the library's objects, to reach
// Pool::check_invariants().
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include "alloc/allocator.hpp"
#include "gpumem/gpumem.h"
#include "host_ranges.h"
#include "pool/pool.hpp"

namespace {

uint32_t g_seed;
int g_step;

// Stops at the first broken check: after it, every later step would fail too.
#define CHECK(cond)                                                                                             \
  do {                                                                                                          \
    if (!(cond)) {                                                                                              \
      std::printf("%s:%d: seed %u, step %d: %s (last detail: %s)\n", __FILE__, __LINE__, g_seed, g_step, #cond, \
                  gpumem_last_error_detail());                                                                  \
      std::exit(1);                                                                                             \
    }                                                                                                           \
  } while (0)

constexpr size_t kUnit = 64 << 10;
constexpr size_t kRange = 256 * kUnit;  // 16 MiB

struct Live {
  unsigned char* p;
  size_t size;
  gpumem_stream_t stream;
  unsigned char pattern;
};

void check_live(const Live& l) {
  CHECK(l.p[0] == l.pattern && l.p[l.size / 2] == l.pattern && l.p[l.size - 1] == l.pattern);
}

void run(uint32_t seed, int steps) {
  host_ranges r{};
  r.unit = kUnit;
  r.range_size = kRange;
  const gpumem_allocator_functions_t f = host_ranges_functions(&r);
  gpumem_allocator_t* upstream = nullptr;
  CHECK(gpumem_allocator_create_functions(&f, &upstream) == GPUMEM_SUCCESS);
  gpumem_pool_params_t params = GPUMEM_POOL_PARAMS_INIT;
  params.upstream = upstream;
  gpumem_allocator_t* pool = nullptr;
  CHECK(gpumem_pool_create(&params, &pool) == GPUMEM_SUCCESS);
  auto* internals = static_cast<gpumem::pool::Pool*>(gpumem::alloc::Allocator::from(pool));

  std::mt19937 rng(seed);
  const gpumem_stream_t streams[] = {nullptr, reinterpret_cast<gpumem_stream_t>(uintptr_t{0x1000}),
                                     reinterpret_cast<gpumem_stream_t>(uintptr_t{0x2000})};
  std::vector<Live> live;
  uint64_t used = 0;
  g_seed = seed;
  for (int step = 0; step < steps; ++step) {
    g_step = step;
    const unsigned op = rng() % 100;
    if (op < 55 && live.size() < 200) {
      // Sizes from bytes to several units, log-uniform-ish, so blocks straddle unit bounds.
      const size_t size = 1 + rng() % (size_t{1} << (8 + rng() % 15));
      const gpumem_stream_t s = streams[rng() % 3];
      void* p = nullptr;
      const gpumem_status_t st = gpumem_alloc(pool, size, s, &p);
      if (st == GPUMEM_SUCCESS) {
        const auto pattern = static_cast<unsigned char>(rng());
        std::memset(p, pattern, size);  // faults if any of it is unmapped
        live.push_back(Live{static_cast<unsigned char*>(p), size, s, pattern});
        used += (size + 511) / 512 * 512;
      } else {
        CHECK(st == GPUMEM_ERROR_OUT_OF_MEMORY && p == nullptr);
      }
    } else if (op < 90 && !live.empty()) {
      const size_t k = rng() % live.size();
      check_live(live[k]);
      CHECK(gpumem_free(pool, live[k].p, live[k].stream) == GPUMEM_SUCCESS);
      used -= (live[k].size + 511) / 512 * 512;
      live[k] = live.back();
      live.pop_back();
    } else if (op < 94) {
      const bool all = rng() % 2;
      CHECK(gpumem_pool_release(pool, streams[rng() % 3], all ? GPUMEM_POOL_RELEASE_ALL_STREAMS : 0) == GPUMEM_SUCCESS);
    } else if (op < 97) {
      CHECK(gpumem_pool_set_limit(pool, rng() % 3 ? 0 : (1 + rng() % 64) * kUnit) == GPUMEM_SUCCESS);
    } else {
      r.budget = rng() % 2 ? 0 : (1 + rng() % 64) * kUnit;  // the device's end, moved
    }
    try {
      internals->check_invariants();
    } catch (const std::exception& e) {
      std::printf("seed %u, step %d: %s\n", seed, step, e.what());
      std::exit(1);
    }
    gpumem_pool_info_t i{};
    i.struct_size = sizeof i;
    CHECK(gpumem_pool_get_info(pool, &i) == GPUMEM_SUCCESS);
    CHECK(i.used_bytes == used);
    CHECK(i.total_bytes == r.mapped);
    CHECK(i.address_bytes == r.reserved);
    CHECK(i.used_bytes + i.free_bytes == i.total_bytes);
  }
  for (const Live& l : live) {
    check_live(l);
    CHECK(gpumem_free(pool, l.p, l.stream) == GPUMEM_SUCCESS);
  }
  CHECK(gpumem_allocator_destroy(pool) == GPUMEM_SUCCESS);
  CHECK(r.mapped == 0 && r.reserved == 0);
  CHECK(gpumem_allocator_destroy(upstream) == GPUMEM_SUCCESS);
}

}  // namespace

int main() {
  for (uint32_t seed = 1; seed <= 20; ++seed) run(seed, 3000);
  std::printf("test_pool_ranges_random: 20 runs of 3000 steps passed\n");
  return 0;
}
