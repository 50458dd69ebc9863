// Writes a trace of bench_alloc's multi-stream pattern, so that `gpumem replay` covers it: the same
// sizes (4 KiB to 16 MiB, log-uniform, from the same generator and seed), the same round-robin
// over N streams with a window of 4 buffers each, and the free of each buffer on its own stream or,
// for "cross", on the next stream. Recorded on a host allocator with made-up stream values (the
// replay keys arenas on them), so it needs no GPU.
//
//     bench_stream_trace PATH [STREAMS] [cross]
#include <gpumem/gpumem.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace {

constexpr uint64_t kSeed = 20251130 + 1;  // bench_alloc's kPatternSeed + 1, as make_stream_sizes()
constexpr int kWindow = 4, kIters = 22000, kSizes = 4096;

uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

bool ok(gpumem_status_t st, const char* what) {
  if (st == GPUMEM_SUCCESS) return true;
  std::fprintf(stderr, "bench_stream_trace: %s: %s: %s\n", what, gpumem_status_name(st), gpumem_last_error_detail());
  return false;
}

gpumem_stream_t stream(int s) { return reinterpret_cast<gpumem_stream_t>(static_cast<uintptr_t>(0x1000) * (s + 1)); }

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || argc > 4 || (argc == 4 && std::strcmp(argv[3], "cross") != 0)) {
    std::fprintf(stderr, "usage: bench_stream_trace PATH [STREAMS] [cross]\n");
    return 2;
  }
  const int n = argc > 2 ? std::atoi(argv[2]) : 8;
  const bool cross = argc == 4;
  if (n < 1 || n > 64) {
    std::fprintf(stderr, "bench_stream_trace: STREAMS is 1 to 64\n");
    return 2;
  }
  std::vector<size_t> sizes;
  uint64_t state = kSeed;
  for (int i = 0; i < kSizes; ++i) {
    const double u = static_cast<double>(splitmix64(state) >> 11) * 0x1p-53;
    sizes.push_back(static_cast<size_t>(std::llround(std::pow(2.0, 12.0 + 12.0 * u))));
  }
  gpumem_allocator_t* host = nullptr;
  gpumem_trace_t* trace = nullptr;
  if (!ok(gpumem_allocator_create_host(0, &host), "gpumem_allocator_create_host") ||
      !ok(gpumem_trace_start(host, argv[1], 0, &trace), "gpumem_trace_start"))
    return 1;
  std::vector<void*> ring(static_cast<size_t>(n * kWindow), nullptr);
  for (int it = 0; it < kIters; ++it) {
    const int s = it % n;
    const size_t slot = static_cast<size_t>(s * kWindow + (it / n) % kWindow);
    void* p = nullptr;
    if (!ok(gpumem_alloc(host, sizes[static_cast<size_t>(it) % sizes.size()], stream(s), &p), "gpumem_alloc")) return 1;
    if (ring[slot] && !ok(gpumem_free(host, ring[slot], stream(cross ? (s + 1) % n : s)), "gpumem_free")) return 1;
    ring[slot] = p;
  }
  for (size_t slot = 0; slot < ring.size(); ++slot) {
    const int s = static_cast<int>(slot) / kWindow;
    if (ring[slot] && !ok(gpumem_free(host, ring[slot], stream(cross ? (s + 1) % n : s)), "gpumem_free")) return 1;
  }
  if (!ok(gpumem_trace_stop(trace), "gpumem_trace_stop") || !ok(gpumem_allocator_destroy(host), "destroy")) return 1;
  std::printf("wrote %s: %d streams%s, %d allocations\n", argv[1], n, cross ? ", freed on the next" : "", kIters);
  return 0;
}
