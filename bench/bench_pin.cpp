// The pinning benchmark: gpumem's pinning service against cudaHostRegister and cudaHostAlloc,
// in one process. What each row and test means, and the targets: bench/README.md.
//
// Output: `RESULT <source> <test> <value> unit=<unit> [key=value ...]` lines, then the same
// figures as Markdown tables and whether the targets were met.
#include <cuda_runtime_api.h>
#include <gpumem/gpumem.h>

#include <sys/mman.h>
#include <unistd.h>
#include "bench_common.hpp"

#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

constexpr size_t KiB = size_t{1} << 10;
constexpr size_t MiB = size_t{1} << 20;
constexpr size_t GiB = size_t{1} << 30;

// ---------------------------------------------------------------------------------------------
// Host memory: fresh anonymous pages, touched, so that the first registration does not also pay
// for page faults (the figures in ../shared/gpu/README.md are "on touched memory").

struct Mapping {
  unsigned char* p = nullptr;
  size_t size = 0;

  explicit Mapping(size_t n) : size(n) {
    void* m = mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) throw Failure("mmap of " + std::to_string(n) + " bytes failed");
    p = static_cast<unsigned char*>(m);
    std::memset(p, 0x5A, n);
  }
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;
  ~Mapping() { munmap(p, size); }
};

// Leaves nothing of a range pinned or cached, whatever a failed test left behind.
void release_pins(void* p, size_t n) {
  int32_t state = GPUMEM_PIN_NONE;
  while (gpumem_pin_query(p, n, &state) == GPUMEM_SUCCESS && state != GPUMEM_PIN_NONE)
    if (gpumem_unpin(p, n) != GPUMEM_SUCCESS) break;  // partly pinned: not this program's doing
  (void)gpumem_pin_forget(p, n);                      // nothing to forget is not a failure here
}

// ---------------------------------------------------------------------------------------------
// Timing and results

using Clock = std::chrono::steady_clock;

double ns_since(Clock::time_point t0, Clock::time_point t1) {
  return static_cast<double>(std::chrono::duration_cast<std::chrono::nanoseconds>(t1 - t0).count());
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

std::string size_name(size_t n) {
  if (n >= GiB && n % GiB == 0) return std::to_string(n / GiB) + "GiB";
  if (n >= MiB && n % MiB == 0) return std::to_string(n / MiB) + "MiB";
  if (n >= KiB && n % KiB == 0) return std::to_string(n / KiB) + "KiB";
  return std::to_string(n) + "B";
}

struct Result {
  std::string source, test;
  double value;
  std::string unit, extra;
};
std::vector<Result> results;
std::vector<std::string> failures;

void report(const std::string& source, const std::string& test, double value, const std::string& unit,
            const std::string& extra = "") {
  std::printf("RESULT %s %s %.1f unit=%s%s\n", source.c_str(), test.c_str(), value, unit.c_str(), extra.c_str());
  std::fflush(stdout);
  results.push_back(Result{source, test, value, unit, extra});
}

void report_failure(const std::string& source, const std::string& test, const std::string& what) {
  std::printf("FAIL %s %s: %s\n", source.c_str(), test.c_str(), what.c_str());
  std::fflush(stdout);
  failures.push_back(source + " " + test + ": " + what);
}

const Result* find(const std::string& source, const std::string& test) {
  for (const Result& r : results)
    if (r.source == source && r.test == test) return &r;
  return nullptr;
}

// ---------------------------------------------------------------------------------------------
// (1) Cache hits: a pin+unpin pair on a range whose pages stay registered.

constexpr int kHitPairs = 100000;
constexpr int kHitRepetitions = 7;

// `cached`: no other pin; each pin takes the registration out of the cache and each unpin puts it
// back. `nested`: another pin holds the range throughout, so the pair only moves counts.
void bench_hits(size_t n, bool nested) {
  const std::string test = std::string(nested ? "hit_nested_" : "hit_cached_") + size_name(n);
  try {
    Mapping m(n);
    check(gpumem_pin(m.p, n, 0), "gpumem_pin (first: registers)");
    if (!nested) check(gpumem_unpin(m.p, n), "gpumem_unpin (first: caches)");
    try {
      for (int i = 0; i < kHitPairs / 10; ++i) {
        check(gpumem_pin(m.p, n, 0), "gpumem_pin");
        check(gpumem_unpin(m.p, n), "gpumem_unpin");
      }
      gpumem_pin_stats_t before{};
      before.struct_size = sizeof before;
      check(gpumem_pin_get_stats(&before), "gpumem_pin_get_stats");
      std::vector<double> reps;
      for (int r = 0; r < kHitRepetitions; ++r) {
        const Clock::time_point t0 = Clock::now();
        for (int i = 0; i < kHitPairs; ++i) {
          check(gpumem_pin(m.p, n, 0), "gpumem_pin");
          check(gpumem_unpin(m.p, n), "gpumem_unpin");
        }
        reps.push_back(ns_since(t0, Clock::now()) / kHitPairs);
      }
      gpumem_pin_stats_t after{};
      after.struct_size = sizeof after;
      check(gpumem_pin_get_stats(&after), "gpumem_pin_get_stats");
      // Every timed pin must have been a hit; a miss would mean the service dropped the registration.
      const uint64_t misses = after.misses - before.misses;
      report("gpumem_pin", test, median(reps), "ns_per_pair",
             " reps=" + std::to_string(kHitRepetitions) + " pairs=" + std::to_string(kHitPairs) +
                 " misses=" + std::to_string(misses));
      if (misses != 0) report_failure("gpumem_pin", test, std::to_string(misses) + " timed pins went to the driver");
      if (nested) check(gpumem_unpin(m.p, n), "gpumem_unpin (the holding pin)");
      check(gpumem_pin_forget(m.p, n), "gpumem_pin_forget");
    } catch (...) {
      release_pins(m.p, n);
      throw;
    }
  } catch (const Failure& f) {
    report_failure("gpumem_pin", test, f.what());
  }
}

// One call at a time: pins that all hit (the range stays registered), timed apart from the unpins
// that follow them. This is "a pin that hits the cache" as one call.
void bench_pin_calls(size_t n) {
  const std::string test = "pin_call_" + size_name(n);
  try {
    Mapping m(n);
    check(gpumem_pin(m.p, n, 0), "gpumem_pin (first: registers)");
    try {
      std::vector<double> pins, unpins;
      for (int r = 0; r < kHitRepetitions; ++r) {
        const Clock::time_point t0 = Clock::now();
        for (int i = 0; i < kHitPairs; ++i) check(gpumem_pin(m.p, n, 0), "gpumem_pin");
        const Clock::time_point t1 = Clock::now();
        for (int i = 0; i < kHitPairs; ++i) check(gpumem_unpin(m.p, n), "gpumem_unpin");
        pins.push_back(ns_since(t0, t1) / kHitPairs);
        unpins.push_back(ns_since(t1, Clock::now()) / kHitPairs);
      }
      report("gpumem_pin", test, median(pins), "ns_per_pin", " unpin_ns=" + std::to_string(median(unpins)));
      check(gpumem_unpin(m.p, n), "gpumem_unpin (the first pin)");
      check(gpumem_pin_forget(m.p, n), "gpumem_pin_forget");
    } catch (...) {
      release_pins(m.p, n);
      throw;
    }
  } catch (const Failure& f) {
    report_failure("gpumem_pin", test, f.what());
  }
}

// ---------------------------------------------------------------------------------------------
// (2) Misses: the cost of making memory page-locked and undoing it.

struct MissEffort {
  size_t bytes;
  int pairs;        // a repetition
  int repetitions;  // the median of these is reported
};
constexpr MissEffort kMiss4KiB{4 * KiB, 200, 5};
constexpr MissEffort kMiss1GiB{GiB, 1, 5};

// Runs `lock` then `unlock` pairs times a repetition; reports ns per pair and, as lock_ns, the part
// spent in `lock`.
template <class Lock, class Unlock>
void time_pairs(const std::string& source, const std::string& test, const MissEffort& e, Lock lock, Unlock unlock) {
  std::vector<double> pairs, locks;
  for (int r = 0; r < e.repetitions; ++r) {
    double lock_ns = 0, pair_ns = 0;
    for (int i = 0; i < e.pairs; ++i) {
      const Clock::time_point t0 = Clock::now();
      lock();
      const Clock::time_point t1 = Clock::now();
      unlock();
      const Clock::time_point t2 = Clock::now();
      lock_ns += ns_since(t0, t1);
      pair_ns += ns_since(t0, t2);
    }
    pairs.push_back(pair_ns / e.pairs);
    locks.push_back(lock_ns / e.pairs);
  }
  char extra[128];
  std::snprintf(extra, sizeof extra, " lock_ns=%.1f reps=%d pairs=%d", median(locks), e.repetitions, e.pairs);
  report(source, test, median(pairs), "ns_per_pair", extra);
}

void bench_misses(const MissEffort& e) {
  const std::string test = "miss_" + size_name(e.bytes);
  // The service with caching off: every pin registers, every last unpin unregisters.
  try {
    Mapping m(e.bytes);
    check(gpumem_pin_cache_set_budget(0), "gpumem_pin_cache_set_budget(0)");
    gpumem_pin_stats_t before{};
    before.struct_size = sizeof before;
    check(gpumem_pin_get_stats(&before), "gpumem_pin_get_stats");
    try {
      time_pairs(
          "gpumem_pin", test, e, [&] { check(gpumem_pin(m.p, e.bytes, 0), "gpumem_pin"); },
          [&] { check(gpumem_unpin(m.p, e.bytes), "gpumem_unpin"); });
    } catch (...) {
      release_pins(m.p, e.bytes);
      throw;
    }
    gpumem_pin_stats_t after{};
    after.struct_size = sizeof after;
    check(gpumem_pin_get_stats(&after), "gpumem_pin_get_stats");
    if (after.hits != before.hits)
      report_failure("gpumem_pin", test, "budget 0, yet " + std::to_string(after.hits - before.hits) + " pins hit");
  } catch (const Failure& f) {
    report_failure("gpumem_pin", test, f.what());
  }
  // The same driver work without the service, registered portable as the service does.
  try {
    Mapping m(e.bytes);
    time_pairs(
        "cudaHostRegister", test, e,
        [&] { check(cudaHostRegister(m.p, e.bytes, cudaHostRegisterPortable), "cudaHostRegister"); },
        [&] { check(cudaHostUnregister(m.p), "cudaHostUnregister"); });
  } catch (const Failure& f) {
    report_failure("cudaHostRegister", test, f.what());
  }
  // Allocating page-locked memory instead of locking what one has.
  try {
    void* p = nullptr;
    time_pairs(
        "cudaHostAlloc", test, e, [&] { check(cudaHostAlloc(&p, e.bytes, cudaHostAllocPortable), "cudaHostAlloc"); },
        [&] { check(cudaFreeHost(p), "cudaFreeHost"); });
  } catch (const Failure& f) {
    report_failure("cudaHostAlloc", test, f.what());
  }
  check(gpumem_pin_cache_set_budget(GiB), "gpumem_pin_cache_set_budget");
}

// ---------------------------------------------------------------------------------------------
// (3) Bandwidth: 1 GiB each way on a stream, from memory pinned by each means.

constexpr size_t kCopyBytes = GiB;
constexpr int kCopyRepetitions = 7;

struct Copier {
  cudaStream_t stream = nullptr;
  void* dev = nullptr;
  bool through_gpumem = false;  // gpumem_copy_async instead of cudaMemcpyAsync

  void copy(void* dst, const void* src, size_t n, cudaMemcpyKind kind, const char* what) const {
    if (through_gpumem)
      check(gpumem_copy_async(dst, src, n, reinterpret_cast<gpumem_stream_t>(stream)), what);
    else
      check(cudaMemcpyAsync(dst, src, n, kind, stream), what);
  }

  // GB/s (10^9 bytes a second), the median of the repetitions; wall time from the call to the end
  // of the stream's work, which for pageable memory includes the driver's staging.
  double gbps(void* dst, const void* src, size_t n, cudaMemcpyKind kind) const {
    copy(dst, src, n, kind, "copy (warm-up)");
    check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
    std::vector<double> reps;
    for (int r = 0; r < kCopyRepetitions; ++r) {
      const Clock::time_point t0 = Clock::now();
      copy(dst, src, n, kind, "copy");
      check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
      reps.push_back(static_cast<double>(n) / ns_since(t0, Clock::now()));
    }
    return median(reps);
  }
};

// A value at every 8 bytes that names its place, so a copy that lands shifted or short shows.
uint64_t index_word(size_t offset, uint64_t seed) { return (offset / 8) * 0x9E3779B97F4A7C15ull ^ seed; }

void fill_index(unsigned char* p, size_t n, uint64_t seed) {
  for (size_t i = 0; i + 8 <= n; i += 8) {
    const uint64_t v = index_word(i, seed);
    std::memcpy(p + i, &v, 8);
  }
}

// How many MiB of [p, p + n) differ from fill_index(p, n, seed).
size_t wrong_mib(const unsigned char* p, size_t n, uint64_t seed) {
  size_t bad = 0;
  for (size_t at = 0; at < n; at += MiB)
    for (size_t i = at; i + 8 <= std::min(at + MiB, n); i += 8) {
      uint64_t got;
      std::memcpy(&got, p + i, 8);
      if (got != index_word(i, seed)) {
        ++bad;
        break;
      }
    }
  return bad;
}

void bench_one_source(const Copier& c, const std::string& source, unsigned char* host, const std::string& extra) {
  for (const bool h2d : {true, false}) {
    const std::string test = std::string(h2d ? "h2d_" : "d2h_") + size_name(kCopyBytes);
    try {
      const double v = h2d ? c.gbps(c.dev, host, kCopyBytes, cudaMemcpyHostToDevice)
                           : c.gbps(host, c.dev, kCopyBytes, cudaMemcpyDeviceToHost);
      report(source, test, v, "GB/s", extra);
    } catch (const Failure& f) {
      report_failure(source, test, f.what());
    }
  }
}

// Whether the driver reports exactly this registration at `at`.
bool registration_is(const void* at, const void* base, size_t size) {
  gpumem_pointer_info_t info{};
  info.struct_size = sizeof info;
  return gpumem_pointer_get_info(at, &info) == GPUMEM_SUCCESS && info.memory_type == GPUMEM_MEMORY_HOST &&
         info.base == base && info.size == size;
}

void bench_bandwidth() {
  Copier c;
  check(cudaStreamCreateWithFlags(&c.stream, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
  check(cudaMalloc(&c.dev, kCopyBytes), "cudaMalloc");
  void* alloc = nullptr;
  try {
    Mapping m(kCopyBytes);
    fill_index(m.p, kCopyBytes, 1);

    // Pageable first, from the same pages the service pins next.
    bench_one_source(c, "pageable", m.p, "");

    // One registration of the whole gigabyte through the service, held while copying.
    try {
      check(gpumem_pin(m.p, kCopyBytes, 0), "gpumem_pin (1 GiB)");
      const std::string regs = registration_is(m.p, m.p, kCopyBytes) ? " registrations=1" : " registrations=UNEXPECTED";
      bench_one_source(c, "gpumem_pin", m.p, regs);
      check(gpumem_unpin(m.p, kCopyBytes), "gpumem_unpin");
      check(gpumem_pin_forget(m.p, kCopyBytes), "gpumem_pin_forget");
    } catch (const Failure& f) {
      report_failure("gpumem_pin", "h2d_d2h", f.what());
      release_pins(m.p, kCopyBytes);
    }

    // Two adjacent registrations made by two pins, then one copy over both. Checked byte for byte
    // too: the question is whether the driver treats the span as pinned, and as one range at all.
    try {
      const size_t half = kCopyBytes / 2;
      check(gpumem_pin(m.p, half, 0), "gpumem_pin (first half)");
      check(gpumem_pin(m.p + half, half, 0), "gpumem_pin (second half)");
      const bool two = registration_is(m.p, m.p, half) && registration_is(m.p + half, m.p + half, half);
      const std::string regs = two ? " registrations=2" : " registrations=UNEXPECTED";
      // gpumem_copy_async goes in pieces, one per registration, which the driver accepts; a single
      // cudaMemcpyAsync over both the driver refuses (reported as a failure of that row).
      Copier through = c;
      through.through_gpumem = true;
      bench_one_source(through, "gpumem_pin_2regs_gpumem_copy", m.p, regs);
      bench_one_source(c, "gpumem_pin_2regs", m.p, regs);
      // m.p now holds what the last D2H brought back; check the span both ways.
      fill_index(m.p, kCopyBytes, 2);
      through.copy(c.dev, m.p, kCopyBytes, cudaMemcpyHostToDevice, "gpumem_copy_async H2D (check)");
      check(cudaStreamSynchronize(c.stream), "cudaStreamSynchronize");
      std::memset(m.p, 0, kCopyBytes);
      through.copy(m.p, c.dev, kCopyBytes, cudaMemcpyDeviceToHost, "gpumem_copy_async D2H (check)");
      check(cudaStreamSynchronize(c.stream), "cudaStreamSynchronize");
      const size_t bad = wrong_mib(m.p, kCopyBytes, 2);
      std::printf("# gpumem_pin_2regs: 1 GiB round trip over the two registrations: %s\n",
                  bad == 0 ? "byte-exact" : ("WRONG in " + std::to_string(bad) + " MiB").c_str());
      if (bad != 0) report_failure("gpumem_pin_2regs", "round_trip", std::to_string(bad) + " MiB differ");
      check(gpumem_unpin(m.p, kCopyBytes), "gpumem_unpin (both halves at once)");
      check(gpumem_pin_forget(m.p, kCopyBytes), "gpumem_pin_forget");
    } catch (const Failure& f) {
      report_failure("gpumem_pin_2regs", "h2d_d2h", f.what());
      release_pins(m.p, kCopyBytes);
    }

    // The reference: memory allocated page-locked.
    check(cudaHostAlloc(&alloc, kCopyBytes, cudaHostAllocPortable), "cudaHostAlloc (1 GiB)");
    fill_index(static_cast<unsigned char*>(alloc), kCopyBytes, 1);
    bench_one_source(c, "cudaHostAlloc", static_cast<unsigned char*>(alloc), "");
  } catch (const Failure& f) {
    report_failure("bandwidth", "setup", f.what());
  }
  if (alloc) cudaFreeHost(alloc);
  cudaFree(c.dev);
  cudaStreamDestroy(c.stream);
}

// ---------------------------------------------------------------------------------------------
// The tables

constexpr double kHitTargetNs = 100;       // per gpumem_pin call that hits the cache
constexpr double kBandwidthTarget = 0.95;  // of cudaHostAlloc's

void print_tables() {
  std::printf("\n## Cache hits (median of %d x %d)\n\n", kHitRepetitions, kHitPairs);
  std::printf("| test | ns | per |\n|---|---:|---|\n");
  for (const Result& r : results)
    if (r.test.rfind("hit_", 0) == 0) std::printf("| %s | %.1f | pin + unpin pair |\n", r.test.c_str(), r.value);
  for (const Result& r : results)
    if (r.test.rfind("pin_call_", 0) == 0)
      std::printf("| %s | %.1f | gpumem_pin call (target <= %.0f: %s); %s |\n", r.test.c_str(), r.value, kHitTargetNs,
                  r.value <= kHitTargetNs ? "met" : "NOT MET", r.extra.c_str());

  std::printf("\n## Misses (µs per lock + unlock pair, median; the lock alone in brackets)\n\n");
  std::printf("| size | gpumem_pin (budget 0) | cudaHostRegister + Unregister | cudaHostAlloc + FreeHost |\n");
  std::printf("|---|---:|---:|---:|\n");
  for (const char* test : {"miss_4KiB", "miss_1GiB"}) {
    std::printf("| %s |", test + 5);
    for (const char* source : {"gpumem_pin", "cudaHostRegister", "cudaHostAlloc"}) {
      const Result* r = find(source, test);
      if (!r) {
        std::printf(" failed |");
        continue;
      }
      const size_t at = r->extra.find("lock_ns=");
      const double lock_ns = at == std::string::npos ? 0 : std::strtod(r->extra.c_str() + at + 8, nullptr);
      std::printf(" %.1f us (%.1f us) |", r->value / 1000, lock_ns / 1000);
    }
    std::printf("\n");
  }

  std::printf("\n## Bandwidth (1 GiB, cudaMemcpyAsync on a stream, GB/s, median of %d)\n\n", kCopyRepetitions);
  std::printf("| source | H2D GB/s | vs cudaHostAlloc | D2H GB/s | vs cudaHostAlloc |\n|---|---:|---:|---:|---:|\n");
  const Result* ref_h2d = find("cudaHostAlloc", "h2d_1GiB");
  const Result* ref_d2h = find("cudaHostAlloc", "d2h_1GiB");
  for (const char* source :
       {"cudaHostAlloc", "gpumem_pin", "gpumem_pin_2regs", "gpumem_pin_2regs_gpumem_copy", "pageable"}) {
    std::printf("| %s |", source);
    for (const auto& [test, ref] : {std::pair{"h2d_1GiB", ref_h2d}, std::pair{"d2h_1GiB", ref_d2h}}) {
      const Result* r = find(source, test);
      if (!r)
        std::printf(" failed | - |");
      else if (!ref)
        std::printf(" %.1f | - |", r->value);
      else
        std::printf(" %.1f | %.3f |", r->value, r->value / ref->value);
    }
    std::printf("\n");
  }

  std::printf("\n## Targets\n\n");
  for (const Result& r : results)
    if (r.test.rfind("pin_call_", 0) == 0)
      std::printf("- %s: %.1f ns per pin that hits the cache, target <= %.0f: %s\n", r.test.c_str(), r.value,
                  kHitTargetNs, r.value <= kHitTargetNs ? "met" : "NOT MET");
  for (const char* source : {"gpumem_pin", "gpumem_pin_2regs", "gpumem_pin_2regs_gpumem_copy"})
    for (const auto& [test, ref] : {std::pair{"h2d_1GiB", ref_h2d}, std::pair{"d2h_1GiB", ref_d2h}}) {
      const Result* r = find(source, test);
      if (r && ref)
        std::printf("- %s %s: %.3f of cudaHostAlloc, target >= %.2f: %s\n", source, test, r->value / ref->value,
                    kBandwidthTarget, r->value / ref->value >= kBandwidthTarget ? "met" : "NOT MET");
      else
        std::printf("- %s %s: not measured\n", source, test);
    }
  for (const std::string& f : failures) std::printf("- FAILED: %s\n", f.c_str());
}

int run() {
  std::string device;
  if (!bench_open_device_0(device)) return 0;
  std::printf("# %s; page %ld bytes\n", device.c_str(), sysconf(_SC_PAGESIZE));
  // Whatever GPUMEM_PIN_CACHE says, the hits need their registrations kept.
  check(gpumem_pin_cache_set_budget(GiB), "gpumem_pin_cache_set_budget");

  std::printf("# (1) cache hits\n");
  for (const size_t n : {4 * KiB, MiB}) {
    bench_hits(n, false);
    bench_hits(n, true);
    bench_pin_calls(n);
  }
  std::printf("# (2) misses\n");
  bench_misses(kMiss4KiB);
  bench_misses(kMiss1GiB);
  std::printf("# (3) bandwidth\n");
  try {
    bench_bandwidth();
  } catch (const Failure& f) {
    report_failure("bandwidth", "setup", f.what());
  }

  gpumem_pin_stats_t s{};
  s.struct_size = sizeof s;
  if (gpumem_pin_get_stats(&s) == GPUMEM_SUCCESS)
    std::printf("# service at the end: %" PRIu64 " pins, %" PRIu64 " unpins, %" PRIu64 " hits, %" PRIu64
                " misses, %" PRIu64 " evictions, %" PRIu64 " registrations, %" PRIu64 " bytes registered\n",
                s.pins, s.unpins, s.hits, s.misses, s.evictions, s.registrations, s.bytes_registered);
  print_tables();
  return 0;
}

}  // namespace

int main(int argc, char**) {
  if (argc != 1) {
    std::fprintf(stderr, "usage: bench_pin\n");
    return 2;
  }
  return bench_run(run);
}
