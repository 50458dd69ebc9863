// The allocator benchmark: gpumem's pool against cudaMalloc and cudaMallocAsync, in one process.
// peers_alloc.py measures CuPy and PyTorch the same way; run_alloc.sh runs both and compares.
// What each row and test means, and the targets: bench/README.md.
//
// Output: `RESULT <allocator> <test> <ns> [key=value ...]` lines, a human table, and `PATTERN`
// lines that peers_alloc.py prints identically (run_alloc.sh checks that they agree); then the
// thread-scaling and multi-stream sections, each with its RESULT lines and a Markdown table.
#include <cuda_runtime_api.h>
#include <gpumem/gpumem.h>

#include "bench_common.hpp"

#include <pthread.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cinttypes>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
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

// Empties a CUDA pool's cache and restarts its high-water marks (the driver takes only 0 for them).
void trim_and_reset_peaks(cudaMemPool_t pool) {
  check(cudaMemPoolTrimTo(pool, 0), "cudaMemPoolTrimTo");
  uint64_t zero = 0;
  check(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReservedMemHigh, &zero),
        "cudaMemPoolSetAttribute(ReservedMemHigh)");
  zero = 0;
  check(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrUsedMemHigh, &zero), "cudaMemPoolSetAttribute(UsedMemHigh)");
}

gpumem_allocator_stats_t stats_of(gpumem_allocator_t* a) {
  gpumem_allocator_stats_t s;
  std::memset(&s, 0, sizeof s);
  s.struct_size = sizeof s;
  check(gpumem_allocator_get_stats(a, &s), "gpumem_allocator_get_stats");
  return s;
}

// What a gpumem allocator says is requested while the whole pattern is live: the pattern's total.
std::string requested_extras(const gpumem_allocator_stats_t& s, uint64_t pattern_total) {
  std::string out = " stats_requested=" + std::to_string(s.bytes_requested);
  if (s.bytes_requested != pattern_total) out += " WARNING_requested_differs_from_pattern";
  return out;
}

// A pool of its own over upstream; on failure upstream is destroyed too.
gpumem_allocator_t* pool_over(gpumem_allocator_t* upstream) {
  gpumem_pool_params_t params = GPUMEM_POOL_PARAMS_INIT;
  params.upstream = upstream;
  gpumem_allocator_t* pool = nullptr;
  if (const gpumem_status_t st = gpumem_pool_create(&params, &pool); st != GPUMEM_SUCCESS) {
    (void)gpumem_allocator_destroy(upstream);  // the pool's failure is the one to report
    gpumem_failed("gpumem_pool_create", st);
  }
  return pool;
}

struct GpumemPool {
  const char* name;
  gpumem_allocator_t* handle;  // what gpumem_alloc is given: the pool, or NULL for the default
  gpumem_allocator_t* pool;    // the pool behind it, for statistics and release
  size_t seed_block = 0;       // if not 0, reset() leaves one free block this large, which allocations split
  uint64_t upstream_allocs_at_reset = 0;

  void* alloc(size_t n) {
    void* p = nullptr;
    check(gpumem_alloc(handle, n, nullptr, &p), "gpumem_alloc");
    return p;
  }
  void free(void* p) { check(gpumem_free(handle, p, nullptr), "gpumem_free"); }
  void reset() {
    check(gpumem_pool_release(pool, nullptr, GPUMEM_POOL_RELEASE_ALL_STREAMS), "gpumem_pool_release");
    if (seed_block) free(alloc(seed_block));
    check(gpumem_allocator_reset_peaks(pool), "gpumem_allocator_reset_peaks");
    upstream_allocs_at_reset = stats().upstream_alloc_count;
  }
  gpumem_allocator_stats_t stats() { return stats_of(pool); }
  // Called after the allocation phase of the first round, with everything live.
  std::string live_extras(uint64_t pattern_total) { return requested_extras(stats(), pattern_total); }
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
    trim_and_reset_peaks(pool);
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

void print_result(const std::string& allocator, const std::string& test, double ns, const std::string& extra) {
  std::printf("RESULT %s %s %.1f%s\n", allocator.c_str(), test.c_str(), ns, extra.c_str());
  std::fflush(stdout);
}

// A result of the single-thread tests, which print_table() also shows.
void report(const std::string& allocator, const std::string& test, double ns, const std::string& extra = "") {
  print_result(allocator, test, ns, extra);
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

// The driver's default pool of device 0, made current and keeping all it is given back.
cudaMemPool_t driver_default_pool() {
  cudaMemPool_t pool = nullptr;
  check(cudaDeviceGetDefaultMemPool(&pool, 0), "cudaDeviceGetDefaultMemPool");
  check(cudaDeviceSetMemPool(0, pool), "cudaDeviceSetMemPool");  // cudaMallocAsync uses the current pool
  uint64_t threshold = UINT64_MAX;
  check(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold),
        "cudaMemPoolSetAttribute(ReleaseThreshold)");
  return pool;
}

// ---------------------------------------------------------------------------------------------
// The allocators again, on streams the caller names, for the thread-scaling and multi-stream
// tests. reset() empties the cache and the peaks; peaks() gives what was reserved since, less
// what was held at the reset.

struct MemPeaks {
  uint64_t reserved = 0;  // the highest reserved less what was reserved at the reset
  uint64_t reserved_at_reset = 0;
  uint64_t in_use = 0;  // the highest in use (gpumem: rounded bytes; the driver's own count)
};

// gpumem_alloc and gpumem_free on one allocator and a stream.
struct GpumemCalls {
  gpumem_allocator_t* allocator;

  void* alloc(size_t n, cudaStream_t s = nullptr) {
    void* p = nullptr;
    check(gpumem_alloc(allocator, n, s, &p), "gpumem_alloc");
    return p;
  }
  void free(void* p, cudaStream_t s = nullptr) { check(gpumem_free(allocator, p, s), "gpumem_free"); }
};

struct GpumemOnStreams : GpumemCalls {
  const char* name;
  uint64_t reserved_at_reset = 0;

  GpumemOnStreams(const char* n, gpumem_allocator_t* pool) : GpumemCalls{pool}, name(n) {}
  gpumem_allocator_stats_t stats() { return stats_of(allocator); }
  void reset() {
    check(gpumem_pool_release(allocator, nullptr, GPUMEM_POOL_RELEASE_ALL_STREAMS), "gpumem_pool_release");
    check(gpumem_allocator_reset_peaks(allocator), "gpumem_allocator_reset_peaks");
    reserved_at_reset = stats().bytes_reserved;
  }
  MemPeaks peaks() {
    const gpumem_allocator_stats_t st = stats();
    return MemPeaks{st.peak_bytes_reserved - std::min(st.peak_bytes_reserved, reserved_at_reset), reserved_at_reset,
                    st.peak_bytes_in_use};
  }
};

struct CudaAsyncOnStreams {
  const char* name = "cudaMallocAsync";
  cudaMemPool_t pool = nullptr;
  uint64_t reserved_at_reset = 0;

  void* alloc(size_t n, cudaStream_t s) {
    void* p = nullptr;
    check(cudaMallocAsync(&p, n, s), "cudaMallocAsync");
    return p;
  }
  void free(void* p, cudaStream_t s) { check(cudaFreeAsync(p, s), "cudaFreeAsync"); }
  uint64_t attribute(cudaMemPoolAttr attr) {
    uint64_t v = 0;
    check(cudaMemPoolGetAttribute(pool, attr, &v), "cudaMemPoolGetAttribute");
    return v;
  }
  void reset() {
    // Memory freed on a stream is only trimmed once that stream's work is done.
    check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
    trim_and_reset_peaks(pool);
    reserved_at_reset = attribute(cudaMemPoolAttrReservedMemCurrent);
  }
  MemPeaks peaks() {
    const uint64_t high = attribute(cudaMemPoolAttrReservedMemHigh);
    return MemPeaks{high - std::min(high, reserved_at_reset), reserved_at_reset, attribute(cudaMemPoolAttrUsedMemHigh)};
  }
};

// gpumem's allocator over a CUDA memory pool of its own (cuda_pool.h): the driver's pool, as
// cudaMallocAsync uses it, behind gpumem's handle, statistics and ownership checks. It serves
// the single-thread tests on the legacy stream and the multi-stream test on the streams named.
struct GpumemCudaPool : GpumemCalls {
  const char* name = "gpumem_cuda_pool";
  uint64_t reserved_at_reset = 0;

  explicit GpumemCudaPool(gpumem_allocator_t* a) : GpumemCalls{a} {}
  gpumem_cuda_pool_info_t info() {
    gpumem_cuda_pool_info_t i;
    std::memset(&i, 0, sizeof i);
    i.struct_size = sizeof i;
    check(gpumem_cuda_pool_get_info(allocator, &i), "gpumem_cuda_pool_get_info");
    return i;
  }
  gpumem_allocator_stats_t stats() { return stats_of(allocator); }
  void reset() {
    // Memory freed on a stream is only trimmed once that stream's work is done.
    check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
    check(gpumem_cuda_pool_trim(allocator, 0), "gpumem_cuda_pool_trim");
    check(gpumem_cuda_pool_reset_peaks(allocator), "gpumem_cuda_pool_reset_peaks");
    check(gpumem_allocator_reset_peaks(allocator), "gpumem_allocator_reset_peaks");
    reserved_at_reset = info().reserved;
  }
  std::string live_extras(uint64_t pattern_total) { return requested_extras(stats(), pattern_total); }
  // The pool's own watermarks: what the driver reserved for it, as for cudaMallocAsync.
  std::string peak_extras() {
    const gpumem_cuda_pool_info_t i = info();
    return " reserved=" + std::to_string(i.reserved_high) + " peak_in_use=" + std::to_string(i.used_high);
  }
  MemPeaks peaks() {
    const gpumem_cuda_pool_info_t i = info();
    return MemPeaks{i.reserved_high - std::min(i.reserved_high, reserved_at_reset), reserved_at_reset, i.used_high};
  }
};

// A new CUDA pool on device 0 that keeps all it is given back (the default for a new pool).
gpumem_allocator_t* create_cuda_pool_allocator() {
  gpumem_cuda_pool_params_t params = GPUMEM_CUDA_POOL_PARAMS_INIT;
  params.device = 0;
  params.source = GPUMEM_CUDA_POOL_NEW;
  gpumem_allocator_t* a = nullptr;
  check(gpumem_allocator_create_cuda_pool(&params, &a), "gpumem_allocator_create_cuda_pool");
  return a;
}

// Non-blocking streams, destroyed with the object (after a device-wide synchronize).
struct Streams {
  std::vector<cudaStream_t> streams;
  explicit Streams(int n) {
    for (int i = 0; i < n; ++i) {
      cudaStream_t s = nullptr;
      const cudaError_t e = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
      if (e != cudaSuccess) {
        destroy();
        cuda_failed("cudaStreamCreateWithFlags", e);
      }
      streams.push_back(s);
    }
  }
  ~Streams() { destroy(); }
  Streams(const Streams&) = delete;
  Streams& operator=(const Streams&) = delete;
  void destroy() {
    if (streams.empty()) return;
    cudaDeviceSynchronize();
    for (cudaStream_t s : streams) cudaStreamDestroy(s);
    streams.clear();
  }
  cudaStream_t operator[](size_t i) const { return streams[i]; }
};

// After a test on its own streams: the pool may record events on a stream it holds memory for,
// so what it cached for them goes back before they are destroyed.
void release_streams(gpumem_allocator_t* pool, std::unique_ptr<Streams>& streams) {
  if (!streams) return;
  if (const cudaError_t e = cudaDeviceSynchronize(); e != cudaSuccess)
    std::printf("FAIL cudaDeviceSynchronize after the streams' work: %s: %s\n", cudaGetErrorName(e),
                cudaGetErrorString(e));
  if (const gpumem_status_t st = gpumem_pool_release(pool, nullptr, GPUMEM_POOL_RELEASE_ALL_STREAMS);
      st != GPUMEM_SUCCESS)
    std::printf("FAIL gpumem_pool_release: %s: %s\n", gpumem_status_name(st), gpumem_last_error_detail());
  streams.reset();
}

std::string fixed(double v, int decimals) {
  char text[64];
  std::snprintf(text, sizeof text, "%.*f", decimals, v);
  return text;
}

// ---------------------------------------------------------------------------------------------
// (c) Thread scaling: 1, 2, 4, 8, 16 threads, each allocating and freeing on its own
// non-blocking stream from one shared allocator; aggregate pairs a second.

constexpr int kScaleThreadCounts[] = {1, 2, 4, 8, 16};
constexpr int kScaleReps = 5;                             // the median of these is reported
constexpr std::chrono::milliseconds kScaleDuration{100};  // of one repetition
constexpr int kScaleWarmPairs = 2000;                     // per thread, before the start
constexpr int kScaleTargetThreads = 16;
constexpr double kScaleTargetSpeedup = 8.0;

struct ScaleTest {
  const char* prefix;  // the RESULT test is prefix + thread count
  const char* what;
  std::vector<size_t> sizes;  // each thread cycles through these, one pair each
};

std::vector<ScaleTest> scale_tests() {
  return {
      {"threads_", "64 KiB", {64 << 10}},
      {"threads_mix_",
       "a mix of 8 sizes, 512 B to 8 MiB, taken in turn",
       {512, 3 << 10, 16 << 10, 64 << 10, 200 << 10, 1 << 20, 3 << 20, 8 << 20}},
  };
}

// Keeps the calling thread on the index-th CPU of the process's affinity mask, so that the
// scheduler neither stacks two workers on one CPU nor moves them mid-run.
void pin_to_cpu(int index) {
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  if (sched_getaffinity(0, sizeof allowed, &allowed) != 0) return;
  for (int cpu = 0, seen = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (!CPU_ISSET(cpu, &allowed) || seen++ != index) continue;
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(cpu, &one);
    pthread_setaffinity_np(pthread_self(), sizeof one, &one);
    return;
  }
}

// The CPUs this process may run on (its affinity mask).
int usable_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0) return CPU_COUNT(&set);
  const unsigned n = std::thread::hardware_concurrency();
  return n > 0 ? static_cast<int>(n) : 1;
}

std::vector<int> scale_thread_counts(int cpus) {
  std::vector<int> counts;
  for (int n : kScaleThreadCounts)
    if (n <= cpus) counts.push_back(n);
  if (counts.back() < kScaleTargetThreads && counts.back() < cpus) counts.push_back(cpus);
  return counts;
}

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

// One repetition: n threads warm up, wait at a common start, run pairs until told to stop.
// Returns the sum over threads of each thread's pairs per second.
template <class A>
double run_threads(A& a, const ScaleTest& t, int n, const Streams& streams) {
  struct Worker {
    uint64_t pairs = 0;
    double ns = 0;
    std::string error;
  };
  std::vector<Worker> workers(static_cast<size_t>(n));
  std::atomic<int> ready{0};
  std::atomic<bool> go{false}, stop{false};
  const size_t* sizes = t.sizes.data();
  const size_t nsizes = t.sizes.size();
  std::vector<std::thread> threads;
  const auto body = [&](int i) {
    Worker& w = workers[static_cast<size_t>(i)];
    const cudaStream_t s = streams[static_cast<size_t>(i)];
    bool counted = false;
    try {
      // CPU 0 takes more of the system's interrupts and housekeeping: left out while others remain.
      pin_to_cpu(usable_cpus() > n ? i + 1 : i);
      check(cudaSetDevice(0), "cudaSetDevice");
      for (int k = 0; k < kScaleWarmPairs; ++k) a.free(a.alloc(sizes[static_cast<size_t>(k) % nsizes], s), s);
      counted = true;
      ready.fetch_add(1);
      while (!go.load(std::memory_order_acquire)) cpu_relax();
      const Clock::time_point t0 = Clock::now();
      uint64_t pairs = 0;
      size_t k = 0;
      while (!stop.load(std::memory_order_relaxed)) {
        for (int j = 0; j < 64; ++j) {
          a.free(a.alloc(sizes[k], s), s);
          if (++k == nsizes) k = 0;
        }
        pairs += 64;
      }
      w.ns = ns_since(t0, Clock::now());
      w.pairs = pairs;
    } catch (const std::exception& e) {
      w.error = e.what();
      stop.store(true);
      if (!counted) ready.fetch_add(1);
    }
  };
  try {
    for (int i = 0; i < n; ++i) threads.emplace_back(body, i);
  } catch (const std::exception& e) {
    stop.store(true);
    go.store(true, std::memory_order_release);
    for (std::thread& th : threads) th.join();
    throw Failure(std::string("starting thread ") + std::to_string(threads.size() + 1) + ": " + e.what());
  }
  while (ready.load() < n) std::this_thread::yield();
  go.store(true, std::memory_order_release);
  std::this_thread::sleep_for(kScaleDuration);
  stop.store(true);
  for (std::thread& th : threads) th.join();
  double rate = 0;
  for (const Worker& w : workers) {
    if (!w.error.empty()) throw Failure(w.error);
    if (w.ns > 0) rate += static_cast<double>(w.pairs) * 1e9 / w.ns;
  }
  return rate;
}

struct ScalePoint {
  int threads;
  double pairs_per_s;  // aggregate
  double speedup;      // against 1 thread
};

template <class A>
std::vector<ScalePoint> bench_threads(A& a, const ScaleTest& t, const std::vector<int>& counts,
                                      const Streams& streams) {
  std::vector<ScalePoint> points;
  double one = 0;
  // Repetitions go round the thread counts, so that a slow spell of the machine touches every
  // count alike rather than one.
  std::vector<std::vector<double>> reps(counts.size());
  for (int r = 0; r < kScaleReps; ++r)
    for (size_t i = 0; i < counts.size(); ++i) reps[i].push_back(run_threads(a, t, counts[i], streams));
  for (size_t i = 0; i < counts.size(); ++i) {
    const int n = counts[i];
    const double rate = median(reps[i]);
    if (n == 1) one = rate;
    const double speedup = one > 0 ? rate / one : 0;
    points.push_back(ScalePoint{n, rate, speedup});
    // ns per pair per thread: what one thread's pair costs when n run together.
    print_result(a.name, t.prefix + std::to_string(n), rate > 0 ? n * 1e9 / rate : 0,
                 " ops_per_s=" + fixed(rate, 0) + " speedup=" + fixed(speedup, 2) + " threads=" + std::to_string(n) +
                     " reps=" + std::to_string(kScaleReps) + " ms=" + std::to_string(kScaleDuration.count()) +
                     " sizes=" + std::to_string(t.sizes.size()));
  }
  return points;
}

template <class A>
std::vector<ScalePoint> bench_threads_row(A& a, const ScaleTest& t, const std::vector<int>& counts,
                                          const Streams& streams) {
  try {
    return bench_threads(a, t, counts, streams);
  } catch (const Failure& f) {
    std::printf("FAIL %s %s: %s\n", a.name, t.prefix, f.what());
    std::fflush(stdout);
    return {};
  }
}

const ScalePoint* find_point(const std::vector<ScalePoint>& points, int threads) {
  for (const ScalePoint& p : points)
    if (p.threads == threads) return &p;
  return nullptr;
}

void print_scale_table(const ScaleTest& t, const std::vector<int>& counts, const std::vector<ScalePoint>& gp,
                       const std::vector<ScalePoint>& drv) {
  std::printf(
      "\n### thread scaling, %s (op = one alloc + free pair, each thread on its own stream, one shared "
      "allocator)\n\n",
      t.what);
  std::printf("| threads | gpumem Mops/s | speedup | cudaMallocAsync Mops/s | speedup | gpumem/cudaMallocAsync |\n");
  std::printf("|---:|---:|---:|---:|---:|---:|\n");
  for (int n : counts) {
    const ScalePoint* g = find_point(gp, n);
    const ScalePoint* d = find_point(drv, n);
    std::printf("| %d | %s | %s | %s | %s | %s |\n", n, g ? fixed(g->pairs_per_s / 1e6, 2).c_str() : "-",
                g ? fixed(g->speedup, 2).c_str() : "-", d ? fixed(d->pairs_per_s / 1e6, 2).c_str() : "-",
                d ? fixed(d->speedup, 2).c_str() : "-",
                g && d && d->pairs_per_s > 0 ? fixed(g->pairs_per_s / d->pairs_per_s, 2).c_str() : "-");
  }
  std::fflush(stdout);
}

void run_thread_scaling(gpumem_allocator_t* device_pool) {
  const int cpus = usable_cpus();
  const std::vector<int> counts = scale_thread_counts(cpus);
  std::printf("\n# thread scaling: %d CPUs usable\n", cpus);
  if (cpus < kScaleTargetThreads)
    std::printf("# note: thread counts capped at %d, the CPUs this process may use\n", counts.back());
  std::fflush(stdout);
  std::unique_ptr<Streams> owned;
  try {
    owned = std::make_unique<Streams>(counts.back());
    const Streams& streams = *owned;
    GpumemOnStreams gp{"gpumem_pool", device_pool};
    CudaAsyncOnStreams drv;
    drv.pool = driver_default_pool();
    for (const ScaleTest& t : scale_tests()) {
      const std::vector<ScalePoint> g = bench_threads_row(gp, t, counts, streams);
      const std::vector<ScalePoint> d = bench_threads_row(drv, t, counts, streams);
      print_scale_table(t, counts, g, d);
      if (std::string(t.prefix) == "threads_") {
        const ScalePoint* at = find_point(g, kScaleTargetThreads);
        if (at)
          std::printf("\n# target: gpumem_pool at %d threads >= %.0fx its 1-thread rate: %.2fx, %s\n",
                      kScaleTargetThreads, kScaleTargetSpeedup, at->speedup,
                      at->speedup >= kScaleTargetSpeedup ? "met" : "MISSED");
        else
          std::printf("\n# target: gpumem_pool at %d threads >= %.0fx its 1-thread rate: not measured (%s)\n",
                      kScaleTargetThreads, kScaleTargetSpeedup, g.empty() ? "the row failed" : "too few CPUs");
      }
    }
  } catch (const Failure& f) {
    std::printf("FAIL thread scaling: %s\n", f.what());
  }
  release_streams(device_pool, owned);
  std::fflush(stdout);
}

// ---------------------------------------------------------------------------------------------
// (d) Several streams, one host thread. Round-robin over N streams: allocate a buffer of a
// log-uniform size (4 KiB to 16 MiB) on stream i, queue a memset over it there, and free the
// buffer allocated on that stream K turns earlier: on the same stream, or (the "cross" variant)
// on stream (i+1) % N after making it wait for the memset, as a correct program must.

constexpr int kStreamCounts[] = {4, 8};
constexpr int kStreamWindow = 4;        // K: buffers live per stream
constexpr int kStreamWarmIters = 2000;  // untimed, the cache filling
constexpr int kStreamIters = 20000;     // timed
constexpr int kStreamSizeCount = 4096;  // sizes cycle through this many

std::vector<size_t> make_stream_sizes() {
  std::vector<size_t> sizes;
  uint64_t state = kPatternSeed + 1;
  for (int i = 0; i < kStreamSizeCount; ++i) {
    const double u = static_cast<double>(splitmix64(state) >> 11) * 0x1p-53;
    sizes.push_back(static_cast<size_t>(std::llround(std::pow(2.0, 12.0 + 12.0 * u))));
  }
  return sizes;
}

// What one interval between two Clock::now() calls costs with nothing in it: taken off each
// timed call.
double clock_overhead_ns() {
  std::vector<double> reps;
  for (int r = 0; r < 5; ++r) {
    double sum = 0;
    constexpr int kCalls = 20000;
    for (int i = 0; i < kCalls; ++i) {
      const Clock::time_point a = Clock::now();
      const Clock::time_point b = Clock::now();
      sum += ns_since(a, b);
    }
    reps.push_back(sum / kCalls);
  }
  return median(reps);
}

struct StreamRow {
  std::string allocator, test;
  double ns;
  double loop_ns;
  uint64_t peak_live;
  MemPeaks peaks;
};
std::vector<StreamRow> stream_rows;

template <class A>
void bench_streams(A& a, int nstreams, bool cross, const Streams& streams, const std::vector<cudaEvent_t>& events,
                   const std::vector<size_t>& sizes, double clock_ns) {
  struct Live {
    void* p = nullptr;
    size_t n = 0;
  };
  const std::string test = "streams" + std::to_string(nstreams) + (cross ? "_cross" : "_same");
  check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  a.reset();
  std::vector<Live> ring(static_cast<size_t>(nstreams * kStreamWindow));
  uint64_t live = 0, peak_live = 0;
  double timed_ns = 0;
  Clock::time_point loop0 = Clock::now();
  const auto free_stream = [&](int s) { return streams[static_cast<size_t>(cross ? (s + 1) % nstreams : s)]; };
  try {
    for (int it = 0; it < kStreamWarmIters + kStreamIters; ++it) {
      if (it == kStreamWarmIters) {
        timed_ns = 0;
        loop0 = Clock::now();
      }
      const int s = it % nstreams;
      const size_t slot = static_cast<size_t>(s * kStreamWindow + (it / nstreams) % kStreamWindow);
      const cudaStream_t st = streams[static_cast<size_t>(s)];
      const size_t n = sizes[static_cast<size_t>(it) % sizes.size()];
      const Clock::time_point t0 = Clock::now();
      void* p = a.alloc(n, st);
      const Clock::time_point t1 = Clock::now();
      timed_ns += ns_since(t0, t1);
      live += n;
      peak_live = std::max(peak_live, live);
      check(cudaMemsetAsync(p, it & 0xff, n, st), "cudaMemsetAsync");
      Live& old = ring[slot];
      if (old.p) {
        const cudaStream_t fs = free_stream(s);
        if (cross) check(cudaStreamWaitEvent(fs, events[slot], 0), "cudaStreamWaitEvent");
        const Clock::time_point t2 = Clock::now();
        a.free(old.p, fs);
        const Clock::time_point t3 = Clock::now();
        timed_ns += ns_since(t2, t3);
        live -= old.n;
      }
      old = Live{p, n};
      if (cross) check(cudaEventRecord(events[slot], st), "cudaEventRecord");
    }
    const double loop_ns = ns_since(loop0, Clock::now()) / kStreamIters;
    for (size_t slot = 0; slot < ring.size(); ++slot) {
      const int s = static_cast<int>(slot) / kStreamWindow;
      if (!ring[slot].p) continue;
      const cudaStream_t fs = free_stream(s);
      if (cross) check(cudaStreamWaitEvent(fs, events[slot], 0), "cudaStreamWaitEvent");
      a.free(ring[slot].p, fs);
      ring[slot].p = nullptr;
    }
    check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
    check(cudaGetLastError(), "the streams' work");
    const MemPeaks pk = a.peaks();
    // Each timed interval holds one call and one clock interval's worth of overhead.
    const double ns = timed_ns / kStreamIters - 2 * clock_ns;
    print_result(a.name, test, ns,
                 " loop_ns=" + fixed(loop_ns, 1) + " iters=" + std::to_string(kStreamIters) +
                     " window=" + std::to_string(kStreamWindow) + " peak_live=" + std::to_string(peak_live) +
                     " reserved=" + std::to_string(pk.reserved) +
                     " reserved_ratio=" + fixed(peak_live ? static_cast<double>(pk.reserved) / peak_live : 0, 3) +
                     " peak_in_use=" + std::to_string(pk.in_use) +
                     " reserved_at_reset=" + std::to_string(pk.reserved_at_reset) + " clock_ns=" + fixed(clock_ns, 1));
    stream_rows.push_back(StreamRow{a.name, test, ns, loop_ns, peak_live, pk});
  } catch (...) {
    for (size_t slot = 0; slot < ring.size(); ++slot)
      if (ring[slot].p) {
        try {
          a.free(ring[slot].p, streams[slot / kStreamWindow]);
        } catch (...) {
        }
      }
    cudaDeviceSynchronize();
    throw;
  }
}

template <class A>
void bench_streams_row(A& a, int nstreams, bool cross, const Streams& streams, const std::vector<cudaEvent_t>& events,
                       const std::vector<size_t>& sizes, double clock_ns) {
  try {
    bench_streams(a, nstreams, cross, streams, events, sizes, clock_ns);
  } catch (const Failure& f) {
    std::printf("FAIL %s streams%d_%s: %s\n", a.name, nstreams, cross ? "cross" : "same", f.what());
    std::fflush(stdout);
  }
}

void print_stream_table() {
  std::printf("\n### multi-stream pattern (one host thread; ns per alloc+free pair, host time in the two calls)\n\n");
  std::printf(
      "| test | allocator | ns/pair | vs gpumem_pool | loop ns/iter | peak live | reserved | reserved / "
      "live |\n");
  std::printf("|---|---|---:|---:|---:|---:|---:|---:|\n");
  for (const StreamRow& r : stream_rows) {
    double base = 0;
    for (const StreamRow& b : stream_rows)
      if (b.test == r.test && b.allocator == "gpumem_pool") base = b.ns;
    std::printf("| %s | %s | %.1f | %s | %.1f | %.1f MiB | %.1f MiB | %s |\n", r.test.c_str(), r.allocator.c_str(),
                r.ns, base > 0 ? fixed(r.ns / base, 2).c_str() : "-", r.loop_ns, r.peak_live / 1048576.0,
                r.peaks.reserved / 1048576.0,
                r.peak_live ? fixed(static_cast<double>(r.peaks.reserved) / r.peak_live, 3).c_str() : "-");
  }
  std::fflush(stdout);
}

void run_multi_stream(gpumem_allocator_t* device_pool, gpumem_allocator_t* cuda_pool) {
  int most = 0;
  for (int n : kStreamCounts) most = std::max(most, n);
  std::printf("\n# multi-stream pattern: %d timed iterations after %d, window %d a stream\n", kStreamIters,
              kStreamWarmIters, kStreamWindow);
  std::fflush(stdout);
  std::vector<cudaEvent_t> events;
  std::unique_ptr<Streams> owned;
  try {
    const double clock_ns = clock_overhead_ns();
    const std::vector<size_t> sizes = make_stream_sizes();
    owned = std::make_unique<Streams>(most);
    const Streams& streams = *owned;
    for (int i = 0; i < most * kStreamWindow; ++i) {
      cudaEvent_t e = nullptr;
      check(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreateWithFlags");
      events.push_back(e);
    }
    GpumemOnStreams gp{"gpumem_pool", device_pool};
    CudaAsyncOnStreams drv;
    drv.pool = driver_default_pool();
    for (int n : kStreamCounts)
      for (bool cross : {false, true}) {
        gpumem_pool_growth_info_t g0 = {sizeof g0, 0, 0, 0, 0, 0, 0, 0}, g1 = g0;
        check(gpumem_pool_get_growth_info(device_pool, &g0), "gpumem_pool_get_growth_info");
        bench_streams_row(gp, n, cross, streams, events, sizes, clock_ns);
        check(gpumem_pool_get_growth_info(device_pool, &g1), "gpumem_pool_get_growth_info");
        // What the pool's growth cost over the row, warm-up included: the driver work behind its time.
        std::printf(
            "# growth streams%d_%s: mapped %.1f MiB in %llu calls, moved %.1f MiB in %llu, %llu events, "
            "%.2f ms in the driver (%.0f ns a pair)\n",
            n, cross ? "cross" : "same", (g1.mapped_bytes - g0.mapped_bytes) / 1048576.0,
            static_cast<unsigned long long>(g1.map_calls - g0.map_calls), (g1.moved_bytes - g0.moved_bytes) / 1048576.0,
            static_cast<unsigned long long>(g1.move_calls - g0.move_calls),
            static_cast<unsigned long long>(g1.fences_recorded - g0.fences_recorded),
            (g1.driver_ns - g0.driver_ns) / 1e6,
            static_cast<double>(g1.driver_ns - g0.driver_ns) / (kStreamWarmIters + kStreamIters));
        bench_streams_row(drv, n, cross, streams, events, sizes, clock_ns);
        if (cuda_pool) {
          GpumemCudaPool cp{cuda_pool};
          bench_streams_row(cp, n, cross, streams, events, sizes, clock_ns);
        }
      }
    drv.reset();
  } catch (const Failure& f) {
    std::printf("FAIL multi-stream pattern: %s\n", f.what());
  }
  release_streams(device_pool, owned);
  for (cudaEvent_t e : events) cudaEventDestroy(e);
  print_stream_table();
}

// streams_only: only the thread-scaling and multi-stream sections (bench_alloc --threads).
int run(bool streams_only) {
  const Pattern pat = make_pattern();
  if (!streams_only) print_pattern(pat);

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

  if (streams_only) {
    run_thread_scaling(device_pool);
    run_multi_stream(device_pool, nullptr);
    return 0;
  }
  {
    GpumemPool a{"gpumem_pool", device_pool, device_pool};
    run_row(a, kCaching, pat);
  }
  try {
    gpumem_allocator_t* upstream = nullptr;
    check(gpumem_allocator_create_device(0, &upstream), "gpumem_allocator_create_device");
    gpumem_allocator_t* pool = pool_over(upstream);
    GpumemPool a{"gpumem_pool_created", pool, pool};
    run_row(a, kCaching, pat);
    // The same pool splitting one large cached block, as a pool over VM splits its units: the
    // cost of splitting and merging, beside that of reusing blocks of exactly the size asked.
    GpumemPool split{"gpumem_pool_split", pool, pool, size_t{6} << 30};
    run_row(split, kCaching, pat);
    // The same pool while a trace records it (trace.h): what leaving recording on costs.
    const char* tmp = std::getenv("TMPDIR");
    const std::string trace_path =
        std::string(tmp && *tmp ? tmp : "/tmp") + "/gpumem_bench_" + std::to_string(getpid()) + ".trace";
    gpumem_trace_t* trace = nullptr;
    check(gpumem_trace_start(pool, trace_path.c_str(), 0, &trace), "gpumem_trace_start");
    GpumemPool traced{"gpumem_pool_traced", pool, pool};
    run_row(traced, kCaching, pat);
    check(gpumem_trace_stop(trace), "gpumem_trace_stop");
    std::remove(trace_path.c_str());
    check(gpumem_allocator_destroy(pool), "gpumem_allocator_destroy(pool)");
    check(gpumem_allocator_destroy(upstream), "gpumem_allocator_destroy(upstream)");
  } catch (const Failure& f) {
    std::printf("FAIL gpumem_pool_created: %s\n", f.what());
  }
  try {
    // The pool over virtual memory (vm.h): segments that grow in place. Same fast path.
    gpumem_allocator_t* upstream = nullptr;
    gpumem_vm_params_t vm = GPUMEM_VM_PARAMS_INIT;
    check(gpumem_allocator_create_vm(&vm, &upstream), "gpumem_allocator_create_vm");
    gpumem_allocator_t* pool = pool_over(upstream);
    GpumemPool a{"gpumem_pool_vm", pool, pool};
    run_row(a, kCaching, pat);
    check(gpumem_allocator_destroy(pool), "gpumem_allocator_destroy(pool)");
    check(gpumem_allocator_destroy(upstream), "gpumem_allocator_destroy(upstream)");
  } catch (const Failure& f) {
    std::printf("FAIL gpumem_pool_vm: %s\n", f.what());
  }
  {
    GpumemPool a{"gpumem_default", nullptr, default_allocator};
    run_row(a, kCaching, pat);
  }
  try {
    CudaMallocAsync a;
    a.pool = driver_default_pool();
    run_row(a, kCaching, pat);
  } catch (const Failure& f) {
    std::printf("FAIL cudaMallocAsync: %s\n", f.what());
  }
  gpumem_allocator_t* cuda_pool = nullptr;
  try {
    cuda_pool = create_cuda_pool_allocator();
    GpumemCudaPool a{cuda_pool};
    run_row(a, kCaching, pat);
  } catch (const Failure& f) {
    std::printf("FAIL gpumem_cuda_pool: %s\n", f.what());
  }
  {
    CudaMalloc a;
    run_row(a, kDriver, pat);
  }
  print_table();

  run_thread_scaling(device_pool);
  run_multi_stream(device_pool, cuda_pool);
  if (cuda_pool) {
    check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
    if (const gpumem_status_t st = gpumem_allocator_destroy(cuda_pool); st != GPUMEM_SUCCESS)
      std::printf("FAIL gpumem_cuda_pool: gpumem_allocator_destroy: %s: %s\n", gpumem_status_name(st),
                  gpumem_last_error_detail());
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 2 && std::strcmp(argv[1], "--pattern") == 0) {
    print_pattern(make_pattern());
    return 0;
  }
  const bool streams_only = argc == 2 && std::strcmp(argv[1], "--threads") == 0;
  if (argc != 1 && !streams_only) {
    std::fprintf(stderr, "usage: bench_alloc [--pattern | --threads]\n");
    return 2;
  }
  return bench_run([&] { return run(streams_only); });
}
