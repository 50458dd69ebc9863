// Staging's host copier on its own, no GPU needed: threads copying at once through the shared
// workers, each between its own buffers, at sizes that stay on the calling thread and sizes that
// are split, at every alignment, and pitched rows and slices two copies at a time as staging
// makes them; every byte checked, the gaps between rows too. Run under ThreadSanitizer in CI.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <random>
#include <thread>
#include <vector>

#include "memory/host_copy.hpp"
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

// Row widths about the size of the part one thread takes (32 KiB), rows split over parts and
// rows cut into parts.
constexpr size_t kWidths[] = {1, 100, 4095, 32767, 32768, 32769, 65536, 65537, 100001};

struct Rows {
  gpumem::memory::RowCopy copy;
  std::vector<unsigned char> src, dst, expected;
};

// A copy of rows of `width` bytes with gaps at both ends, in 1 or 3 slices, in buffers of about
// 256 KiB to 2.3 MiB (shared with workers unless the rows are short); expected holds dst as the
// copy must leave it.
void make_rows(Rows& r, std::mt19937_64& rng, size_t width, unsigned char poison) {
  const size_t slices = rng() % 2 ? 3 : 1;
  const size_t src_pitch = width + rng() % 64, dst_pitch = width + rng() % 64;
  const size_t target = (size_t{256} << 10) + rng() % (size_t{2} << 20);
  const size_t rows = std::max<size_t>(1, target / std::max(src_pitch, dst_pitch) / slices);
  const size_t src_slice = src_pitch * rows + rng() % 300, dst_slice = dst_pitch * rows + rng() % 300;
  r.src.resize(src_slice * (slices + 1));  // a slice more on both sides: a copy past the last one shows
  r.dst.assign(dst_slice * (slices + 1), poison);
  for (size_t at = 0; at < r.src.size(); at += 8) {
    const uint64_t random = rng();
    std::memcpy(&r.src[at], &random, std::min<size_t>(8, r.src.size() - at));
  }
  r.expected = r.dst;
  for (size_t z = 0; z < slices; ++z)
    for (size_t y = 0; y < rows; ++y)
      std::memcpy(&r.expected[z * dst_slice + y * dst_pitch], &r.src[z * src_slice + y * src_pitch], width);
  r.copy = {reinterpret_cast<char*>(r.dst.data()),
            reinterpret_cast<const char*>(r.src.data()),
            width,
            rows,
            dst_pitch,
            src_pitch,
            slices,
            dst_slice,
            src_slice};
}

// Pairs of pitched copies, the second started before the first is waited for; returns the
// number of wrong copies.
int rows_and_check(unsigned seed, int copies) {
  std::mt19937_64 rng(seed);
  int wrong = 0;
  Rows a, b;
  for (int i = 0; i < copies; ++i) {
    make_rows(a, rng, kWidths[rng() % std::size(kWidths)], static_cast<unsigned char>(i));
    make_rows(b, rng, kWidths[rng() % std::size(kWidths)], static_cast<unsigned char>(i + 1));
    {
      gpumem::memory::HostCopy first(a.copy, 16);
      gpumem::memory::HostCopy second(b.copy, 6);
      first.wait();
    }
    for (const Rows* r : {&a, &b}) {
      if (r->dst == r->expected) continue;
      std::printf("thread %u pair %d: rows of %zu bytes x %zu x %zu slices are wrong or spilled\n", seed, i,
                  r->copy.width, r->copy.rows, r->copy.slices);
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
    threads.emplace_back([t, copies, &wrong] {
      const unsigned seed = static_cast<unsigned>(t + 1);
      wrong[t] = copy_and_check(seed, copies) + rows_and_check(seed, copies / 4);
    });
  for (auto& t : threads) t.join();
  int total = 0;
  for (const int w : wrong) total += w;
  std::printf("%d threads x %d copies and %d pairs of pitched copies: %d wrong\n", kThreads, copies, copies / 4, total);
  return total == 0 ? 0 : 1;
}
