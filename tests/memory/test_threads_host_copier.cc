// Staging's host copier on its own, no GPU needed: threads copying at once through the shared
// workers, each between its own buffers, at sizes that stay on the calling thread and sizes that
// are split, at every alignment; every byte checked. Run under ThreadSanitizer in CI.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "memory/memory.hpp"

namespace {

constexpr int kThreads = 8;
constexpr size_t kBuffer = size_t{1} << 20;  // split over up to six threads from 768 KiB

// Returns the number of wrong copies this thread saw.
int copy_and_check(unsigned seed, int copies) {
  std::mt19937_64 rng(seed);
  std::vector<unsigned char> src(kBuffer), dst(kBuffer), poisoned(kBuffer);
  for (auto& b : src) b = static_cast<unsigned char>(rng());
  int wrong = 0;
  for (int i = 0; i < copies; ++i) {
    // Up to the whole buffer, below and above the size that is split over workers.
    const size_t n = rng() % 4 == 0 ? rng() % 4096 : rng() % (kBuffer - 64);
    const size_t from = rng() % (kBuffer - n + 1), to = rng() % (kBuffer - n + 1);
    const unsigned char poison = static_cast<unsigned char>(i * 37 + 11);
    std::memset(dst.data(), poison, dst.size());
    std::memset(poisoned.data(), poison, poisoned.size());
    gpumem::memory::host_copy(dst.data() + to, src.data() + from, n);
    const bool ok = std::memcmp(dst.data() + to, src.data() + from, n) == 0 &&
                    std::memcmp(dst.data(), poisoned.data(), to) == 0 &&
                    std::memcmp(dst.data() + to + n, poisoned.data(), kBuffer - to - n) == 0;
    if (!ok) {
      std::printf("thread %u copy %d: %zu bytes from offset %zu to %zu are wrong or spilled\n", seed, i, n, from, to);
      ++wrong;
    }
  }
  return wrong;
}

}  // namespace

int main(int argc, char** argv) {
  const int copies = argc > 1 ? std::atoi(argv[1]) : 100;
  std::vector<int> wrong(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([t, copies, &wrong] { wrong[t] = copy_and_check(static_cast<unsigned>(t + 1), copies); });
  for (auto& t : threads) t.join();
  int total = 0;
  for (const int w : wrong) total += w;
  std::printf("%d threads x %d copies: %d wrong\n", kThreads, copies, total);
  return total == 0 ? 0 : 1;
}
