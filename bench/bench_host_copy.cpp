// Where a staged copy between pageable memory and the device spends its time, measured apart:
// the host copy into and out of page-locked memory by thread count (memcpy and non-temporal
// stores), alone and beside a DMA transfer that competes for memory bandwidth; the first touch of
// fresh pages; registering the caller's pages instead of copying them; and DMA from page-locked
// memory alone, the limit. lib/memory/staging.cpp chooses its thread counts from these figures.
#include <cuda_runtime.h>
#if defined(__x86_64__)
#include <emmintrin.h>
#endif

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "bench_common.hpp"

namespace {

constexpr size_t kBytes = size_t{1} << 30;

double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

void streamed(char* d, const char* s, size_t n) {
#if defined(__x86_64__)
  const size_t head = (16 - (reinterpret_cast<uintptr_t>(d) & 15)) & 15;
  std::memcpy(d, s, head);
  d += head, s += head, n -= head;
  for (; n >= 64; d += 64, s += 64, n -= 64)
    for (int k = 0; k < 64; k += 16)
      _mm_stream_si128(reinterpret_cast<__m128i*>(d + k), _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + k)));
  _mm_sfence();
#endif
  std::memcpy(d, s, n);
}

// GB/s of one copy of n bytes split over `threads` threads.
double parallel_copy(char* d, const char* s, size_t n, int threads, bool nontemporal) {
  const double t0 = now();
  std::vector<std::thread> pool;
  const size_t part = (n / threads + 63) & ~size_t{63};
  for (int i = 0; i < threads; ++i)
    pool.emplace_back([=] {
      const size_t at = i * part;
      if (at >= n) return;
      const size_t m = std::min(part, n - at);
      nontemporal ? streamed(d + at, s + at, m) : (void)std::memcpy(d + at, s + at, m);
    });
  for (std::thread& t : pool) t.join();
  return n / (now() - t0) / 1e9;
}

// The same while four 1 GiB DMA transfers run on `stream` in the direction given.
double beside_dma(char* d, const char* s, int threads, char* dev, char* pinned, cudaMemcpyKind kind,
                  cudaStream_t stream) {
  for (int i = 0; i < 4; ++i)
    check(kind == cudaMemcpyHostToDevice ? cudaMemcpyAsync(dev, pinned, kBytes, kind, stream)
                                         : cudaMemcpyAsync(pinned, dev, kBytes, kind, stream),
          "cudaMemcpyAsync");
  const double rate = parallel_copy(d, s, kBytes, threads, true);
  check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  return rate;
}

double registered_rate(char* page, size_t chunk) {
  const double t0 = now();
  for (size_t at = 0; at < kBytes; at += chunk) {
    check(cudaHostRegister(page + at, chunk, cudaHostRegisterDefault), "cudaHostRegister");
    check(cudaHostUnregister(page + at), "cudaHostUnregister");
  }
  return kBytes / (now() - t0) / 1e9;
}

}  // namespace

int run() {
  std::string device;
  if (!bench_open_device_0(device)) return 0;
  std::printf("# %s\n", device.c_str());
  char *pinned, *staging, *dev;
  check(cudaHostAlloc(reinterpret_cast<void**>(&pinned), kBytes, cudaHostAllocPortable), "cudaHostAlloc");
  check(cudaHostAlloc(reinterpret_cast<void**>(&staging), kBytes, cudaHostAllocPortable), "cudaHostAlloc");
  check(cudaMalloc(reinterpret_cast<void**>(&dev), kBytes), "cudaMalloc");
  auto* page = static_cast<char*>(std::aligned_alloc(4096, kBytes));
  auto* page2 = static_cast<char*>(std::aligned_alloc(4096, kBytes));
  std::memset(page, 1, kBytes), std::memset(page2, 2, kBytes), std::memset(pinned, 3, kBytes);
  std::memset(staging, 3, kBytes);
  cudaStream_t stream;
  check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
  std::printf(
      "# host copies of 1 GiB, GB/s (best of 2): pageable -> page-locked as an upload stages, page-locked ->"
      " pageable as a download does; 'beside DMA' with four 1 GiB transfers the same way running\n\n");
  std::printf(
      "| threads | up, memcpy | up, non-temporal | up, non-temporal beside DMA | down, memcpy |"
      " down, non-temporal | down, non-temporal beside DMA |\n|---:|---:|---:|---:|---:|---:|---:|\n");
  for (int threads : {1, 2, 4, 6, 8, 12, 16}) {
    double r[6] = {};
    for (int rep = 0; rep < 2; ++rep) {
      r[0] = std::max(r[0], parallel_copy(staging, page, kBytes, threads, false));
      r[1] = std::max(r[1], parallel_copy(staging, page, kBytes, threads, true));
      r[2] = std::max(r[2], beside_dma(staging, page, threads, dev, pinned, cudaMemcpyHostToDevice, stream));
      r[3] = std::max(r[3], parallel_copy(page2, staging, kBytes, threads, false));
      r[4] = std::max(r[4], parallel_copy(page2, staging, kBytes, threads, true));
      r[5] = std::max(r[5], beside_dma(page2, staging, threads, dev, pinned, cudaMemcpyDeviceToHost, stream));
    }
    std::printf("| %d | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f |\n", threads, r[0], r[1], r[2], r[3], r[4], r[5]);
  }
  auto* fresh = static_cast<char*>(std::aligned_alloc(4096, kBytes));
  std::printf("\nfresh (never touched) pageable -> page-locked, 6 threads, non-temporal: %.1f GB/s\n",
              parallel_copy(staging, fresh, kBytes, 6, true));
  for (size_t chunk : {size_t{4} << 20, size_t{64} << 20})
    std::printf(
        "registering the caller's pages instead (cudaHostRegister + Unregister, %zu MiB at a time): %.1f GB/s\n",
        chunk >> 20, registered_rate(page, chunk));
  double t0 = now();
  check(cudaMemcpyAsync(dev, pinned, kBytes, cudaMemcpyHostToDevice, stream), "cudaMemcpyAsync");
  check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  const double up = kBytes / (now() - t0) / 1e9;
  t0 = now();
  check(cudaMemcpyAsync(pinned, dev, kBytes, cudaMemcpyDeviceToHost, stream), "cudaMemcpyAsync");
  check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  std::printf("DMA from and to page-locked memory, 1 GiB: %.1f / %.1f GB/s (the limit)\n", up,
              kBytes / (now() - t0) / 1e9);
  std::printf("hardware threads: %u\n", std::thread::hardware_concurrency());
  return 0;
}

int main() { return bench_run(run); }
