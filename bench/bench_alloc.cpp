// The allocator benchmark: gpumem's pool against cudaMalloc and cudaMallocAsync, in one process.
// peers_alloc.py measures CuPy and PyTorch the same way; run_alloc.sh runs both and compares.
// What each row and test means, and the targets: bench/README.md.
//
// Output: `RESULT <allocator> <test> <ns> [key=value ...]` lines, a human table, and `PATTERN`
// lines that peers_alloc.py prints identically (run_alloc.sh checks that they agree).
#include <cuda_runtime_api.h>
#include <gpumem/gpumem.h>

#include "bench_common.hpp"

#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

// ---------------------------------------------------------------------------------------------
// The random pattern. peers_alloc.py generates the same numbers; change both or neither.

constexpr uint64_t kPatternSeed = 20251130;
constexpr int kPatternCount = 1000;

uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

struct Pattern {
  std::vector<size_t> sizes;    // allocated in this order
  std::vector<int> free_order;  // then freed: sizes[free_order[0]] first
  uint64_t total_bytes = 0;     // all of them are live at once after the allocation phase
  uint64_t digest = 0;          // FNV-1a over sizes then order, to compare whole sequences
};

Pattern make_pattern() {
  Pattern p;
  uint64_t state = kPatternSeed;
  for (int i = 0; i < kPatternCount; ++i) {
    const double u = static_cast<double>(splitmix64(state) >> 11) * 0x1p-53;
    // pow, not exp2: Python's float ** calls the C library's pow, and the two must agree to the bit.
    const double v = std::pow(2.0, 9.0 + 17.0 * u);
    p.sizes.push_back(static_cast<size_t>(std::llround(v)));
    p.total_bytes += p.sizes.back();
  }
  for (int i = 0; i < kPatternCount; ++i) p.free_order.push_back(i);
  for (int i = kPatternCount - 1; i >= 1; --i) {
    const uint64_t j = splitmix64(state) % static_cast<uint64_t>(i + 1);
    std::swap(p.free_order[static_cast<size_t>(i)], p.free_order[j]);
  }
  uint64_t h = 0xcbf29ce484222325ull;
  const auto mix = [&](uint64_t value) {
    h ^= value;
    h *= 0x100000001b3ull;
  };
  for (size_t s : p.sizes) mix(s);
  for (int i : p.free_order) mix(static_cast<uint64_t>(i));
  p.digest = h;
  return p;
}

void print_pattern(const Pattern& p) {
  std::printf("PATTERN sizes[0:5] %zu %zu %zu %zu %zu\n", p.sizes[0], p.sizes[1], p.sizes[2], p.sizes[3], p.sizes[4]);
  std::printf("PATTERN free[0:5] %d %d %d %d %d\n", p.free_order[0], p.free_order[1], p.free_order[2], p.free_order[3],
              p.free_order[4]);
  std::printf("PATTERN total_bytes %" PRIu64 " digest %016" PRIx64 "\n", p.total_bytes, p.digest);
}

size_t device_free_bytes() {
  size_t free = 0, total = 0;
  check(cudaMemGetInfo(&free, &total), "cudaMemGetInfo");
  return free;
}

// ---------------------------------------------------------------------------------------------
// The allocators. Each has alloc/free (inlined into the timing loops, so the loop adds no
// indirect call of its own), reset (empty its cache and reset its peaks, so a test starts cold)
// and memory_extras (what it says it holds, for the random pattern).

struct GpumemPool {
  const char* name;
  gpumem_allocator_t* handle;  // what gpumem_alloc is given: the pool, or NULL for the default
  gpumem_allocator_t* pool;    // the pool behind it, for statistics and release
  uint64_t upstream_allocs_at_reset = 0;

  void* alloc(size_t n) {
    void* p = nullptr;
    check(gpumem_alloc(handle, n, nullptr, &p), "gpumem_alloc");
    return p;
  }
  void free(void* p) { check(gpumem_free(handle, p, nullptr), "gpumem_free"); }
  void reset() {
    check(gpumem_pool_release(pool, nullptr, GPUMEM_POOL_RELEASE_ALL_STREAMS), "gpumem_pool_release");
    check(gpumem_allocator_reset_peaks(pool), "gpumem_allocator_reset_peaks");
    upstream_allocs_at_reset = stats().upstream_alloc_count;
  }
  gpumem_allocator_stats_t stats() {
    gpumem_allocator_stats_t s;
    std::memset(&s, 0, sizeof s);
    s.struct_size = sizeof s;
    check(gpumem_allocator_get_stats(pool, &s), "gpumem_allocator_get_stats");
    return s;
  }
  // Called after the allocation phase of the first round, with everything live.
  std::string live_extras(uint64_t pattern_total) {
    const gpumem_allocator_stats_t s = stats();
    std::string out = " stats_requested=" + std::to_string(s.bytes_requested);
    if (s.bytes_requested != pattern_total) out += " WARNING_requested_differs_from_pattern";
    return out;
  }
  std::string peak_extras() {
    const gpumem_allocator_stats_t s = stats();
    // A pool that reuses perfectly takes 1000 blocks in the first round and none after.
    return " reserved=" + std::to_string(s.peak_bytes_reserved) +
           " peak_in_use=" + std::to_string(s.peak_bytes_in_use) +
           " upstream_allocs=" + std::to_string(s.upstream_alloc_count - upstream_allocs_at_reset);
  }
};

struct CudaMallocAsync {
  const char* name = "cudaMallocAsync";
  cudaMemPool_t pool = nullptr;

  void* alloc(size_t n) {
    void* p = nullptr;
    check(cudaMallocAsync(&p, n, nullptr), "cudaMallocAsync");
    return p;
  }
  void free(void* p) { check(cudaFreeAsync(p, nullptr), "cudaFreeAsync"); }
  void reset() {
    check(cudaStreamSynchronize(nullptr), "cudaStreamSynchronize");
    check(cudaMemPoolTrimTo(pool, 0), "cudaMemPoolTrimTo");
    uint64_t zero = 0;
    check(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReservedMemHigh, &zero),
          "cudaMemPoolSetAttribute(ReservedMemHigh)");
    zero = 0;
    check(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrUsedMemHigh, &zero), "cudaMemPoolSetAttribute(UsedMemHigh)");
  }
  std::string live_extras(uint64_t) { return ""; }
  std::string peak_extras() {
    uint64_t reserved = 0, used = 0;
    check(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrReservedMemHigh, &reserved), "cudaMemPoolGetAttribute");
    check(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrUsedMemHigh, &used), "cudaMemPoolGetAttribute");
    return " reserved=" + std::to_string(reserved) + " peak_in_use=" + std::to_string(used);
  }
};

struct CudaMalloc {
  const char* name = "cudaMalloc";

  void* alloc(size_t n) {
    void* p = nullptr;
    check(cudaMalloc(&p, n), "cudaMalloc");
    return p;
  }
  void free(void* p) { check(cudaFree(p), "cudaFree"); }
  void reset() {}
  std::string live_extras(uint64_t) { return ""; }
  std::string peak_extras() { return ""; }
};

// ---------------------------------------------------------------------------------------------
// Timing

using Clock = std::chrono::steady_clock;

double ns_since(Clock::time_point t0, Clock::time_point t1) {
  return static_cast<double>(std::chrono::duration_cast<std::chrono::nanoseconds>(t1 - t0).count());
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

struct Result {
  std::string allocator, test;
  double ns;
  std::string extra;
};
std::vector<Result> results;

void report(const std::string& allocator, const std::string& test, double ns, const std::string& extra = "") {
  std::printf("RESULT %s %s %.1f%s\n", allocator.c_str(), test.c_str(), ns, extra.c_str());
  std::fflush(stdout);
  results.push_back(Result{allocator, test, ns, extra});
}

// How long each allocator is worth timing: the driver's cudaMalloc takes ~60 us a pair.
struct Effort {
  int pairs;        // alloc+free pairs a repetition
  int warm_pairs;   // before timing
  int repetitions;  // the median of these is reported
  int rounds;       // of the random pattern; the first is "cold"
};
constexpr Effort kCaching{100000, 10000, 7, 50};
constexpr Effort kDriver{200, 20, 5, 5};

struct PairSize {
  size_t bytes;
  const char* test;
};
constexpr PairSize kPairSizes[] = {{512, "pair_512B"}, {64 << 10, "pair_64KiB"}, {1 << 20, "pair_1MiB"}};

// (a) a cached alloc+free pair of one size, one thread: ns per pair.
template <class A>
void bench_pairs(A& a, const Effort& e) {
  for (const PairSize& ps : kPairSizes) {
    for (int i = 0; i < e.warm_pairs; ++i) a.free(a.alloc(ps.bytes));
    std::vector<double> reps;
    for (int r = 0; r < e.repetitions; ++r) {
      const Clock::time_point t0 = Clock::now();
      for (int i = 0; i < e.pairs; ++i) a.free(a.alloc(ps.bytes));
      const Clock::time_point t1 = Clock::now();
      reps.push_back(ns_since(t0, t1) / e.pairs);
    }
    report(a.name, ps.test, median(reps),
           " reps=" + std::to_string(e.repetitions) + " pairs=" + std::to_string(e.pairs));
  }
}

// (b) the random pattern: all allocated in order, freed shuffled; ns per operation (alloc or free).
template <class A>
void bench_random(A& a, const Effort& e, const Pattern& pat) {
  check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  a.reset();
  const size_t free_before = device_free_bytes();
  std::vector<void*> ptrs(pat.sizes.size(), nullptr);
  std::vector<double> warm;
  double cold = 0;
  std::string live;
  long long device_delta = 0;
  try {
    for (int round = 0; round < e.rounds; ++round) {
      const Clock::time_point t0 = Clock::now();
      for (size_t i = 0; i < pat.sizes.size(); ++i) ptrs[i] = a.alloc(pat.sizes[i]);
      const Clock::time_point t1 = Clock::now();
      if (round == 0) {
        live = a.live_extras(pat.total_bytes);
        device_delta = static_cast<long long>(free_before) - static_cast<long long>(device_free_bytes());
      }
      const Clock::time_point t2 = Clock::now();
      for (int i : pat.free_order) {
        a.free(ptrs[static_cast<size_t>(i)]);
        ptrs[static_cast<size_t>(i)] = nullptr;
      }
      const Clock::time_point t3 = Clock::now();
      const double ns = (ns_since(t0, t1) + ns_since(t2, t3)) / (2.0 * static_cast<double>(pat.sizes.size()));
      if (round == 0)
        cold = ns;
      else
        warm.push_back(ns);
      // Nothing is queued, but the stream-ordered pool must not be left anything to do between rounds.
      check(cudaStreamSynchronize(nullptr), "cudaStreamSynchronize");
    }
  } catch (...) {
    for (void* p : ptrs)
      if (p) {
        try {
          a.free(p);
        } catch (...) {
        }
      }
    throw;
  }
  report(a.name, "random_cold", cold, " requested=" + std::to_string(pat.total_bytes));
  report(a.name, "random_warm", median(warm),
         " rounds=" + std::to_string(e.rounds - 1) + " requested=" + std::to_string(pat.total_bytes) + a.peak_extras() +
             " device_delta=" + std::to_string(device_delta) + live);
  a.reset();
}

template <class A>
void run_row(A& a, const Effort& e, const Pattern& pat) {
  std::printf("# %s\n", a.name);
  std::fflush(stdout);
  try {
    bench_pairs(a, e);
    bench_random(a, e, pat);
  } catch (const Failure& f) {
    std::printf("FAIL %s: %s\n", a.name, f.what());
    std::fflush(stdout);
  }
}

void print_table() {
  std::printf("\n%-22s %-12s %12s %14s\n", "allocator", "test", "ns", "vs gpumem_pool");
  std::vector<std::string> tests;
  for (const Result& r : results)
    if (std::find(tests.begin(), tests.end(), r.test) == tests.end()) tests.push_back(r.test);
  for (const std::string& t : tests) {
    double base = 0;
    for (const Result& r : results)
      if (r.test == t && r.allocator == "gpumem_pool") base = r.ns;
    for (const Result& r : results) {
      if (r.test != t) continue;
      if (base > 0)
        std::printf("%-22s %-12s %12.1f %13.2fx\n", r.allocator.c_str(), t.c_str(), r.ns, r.ns / base);
      else
        std::printf("%-22s %-12s %12.1f %14s\n", r.allocator.c_str(), t.c_str(), r.ns, "-");
    }
  }
  std::printf("(pair_*: ns per alloc+free pair; random_*: ns per operation, alloc or free)\n");
}

int run() {
  const Pattern pat = make_pattern();
  print_pattern(pat);

  std::string device;
  if (!bench_open_device_0(device)) return 0;
  std::printf("# %s\n", device.c_str());

  gpumem_allocator_t* device_pool = nullptr;
  if (const gpumem_status_t st = gpumem_pool_get_device(0, &device_pool); st != GPUMEM_SUCCESS) {
    std::printf("FAIL gpumem: the CUDA runtime sees device 0 but gpumem_pool_get_device(0) says %s: %s\n",
                gpumem_status_name(st), gpumem_last_error_detail());
    return 1;
  }
  gpumem_allocator_t* default_allocator = nullptr;
  check(gpumem_allocator_get_default(0, &default_allocator), "gpumem_allocator_get_default");
  if (default_allocator != device_pool)
    std::printf("# note: device 0's default allocator is not its pool; gpumem_default measures it\n");

  {
    GpumemPool a{"gpumem_pool", device_pool, device_pool};
    run_row(a, kCaching, pat);
  }
  try {
    gpumem_allocator_t* upstream = nullptr;
    check(gpumem_allocator_create_device(0, &upstream), "gpumem_allocator_create_device");
    gpumem_pool_params_t params = GPUMEM_POOL_PARAMS_INIT;
    params.upstream = upstream;
    gpumem_allocator_t* pool = nullptr;
    if (const gpumem_status_t st = gpumem_pool_create(&params, &pool); st != GPUMEM_SUCCESS) {
      gpumem_allocator_destroy(upstream);
      gpumem_failed("gpumem_pool_create", st);
    }
    GpumemPool a{"gpumem_pool_created", pool, pool};
    run_row(a, kCaching, pat);
    check(gpumem_allocator_destroy(pool), "gpumem_allocator_destroy(pool)");
    check(gpumem_allocator_destroy(upstream), "gpumem_allocator_destroy(upstream)");
  } catch (const Failure& f) {
    std::printf("FAIL gpumem_pool_created: %s\n", f.what());
  }
  {
    GpumemPool a{"gpumem_default", nullptr, default_allocator};
    run_row(a, kCaching, pat);
  }
  try {
    CudaMallocAsync a;
    check(cudaDeviceGetDefaultMemPool(&a.pool, 0), "cudaDeviceGetDefaultMemPool");
    check(cudaDeviceSetMemPool(0, a.pool), "cudaDeviceSetMemPool");  // cudaMallocAsync uses the current pool
    uint64_t threshold = UINT64_MAX;
    check(cudaMemPoolSetAttribute(a.pool, cudaMemPoolAttrReleaseThreshold, &threshold),
          "cudaMemPoolSetAttribute(ReleaseThreshold)");
    run_row(a, kCaching, pat);
  } catch (const Failure& f) {
    std::printf("FAIL cudaMallocAsync: %s\n", f.what());
  }
  {
    CudaMalloc a;
    run_row(a, kDriver, pat);
  }
  print_table();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 2 && std::strcmp(argv[1], "--pattern") == 0) {
    print_pattern(make_pattern());
    return 0;
  }
  if (argc != 1) {
    std::fprintf(stderr, "usage: bench_alloc [--pattern]\n");
    return 2;
  }
  return bench_run(run);
}
