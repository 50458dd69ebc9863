#include "core/keep.hpp"

#include "core/handle.hpp"

#include <sys/mman.h>

#include <algorithm>
#include <mutex>
#include <new>
#include <vector>

// LeakSanitizer looks for pointers in globals, stacks and its heap, not in memory a program maps
// itself: told of the handle space, it sees what live handles hold. Weak, so that a gpumem built
// without sanitizers, loaded into a process that has them, is scanned as well.
extern "C" void __lsan_register_root_region(const void* p, size_t size) __attribute__((weak));

namespace gpumem {

void keep_forever(void* p) noexcept {
  static auto* kept = new std::vector<void*>;  // leaked with its contents, on purpose
  static auto* mutex = new std::mutex;         // leaked too: handles may go during exit
  std::lock_guard<std::mutex> lock(*mutex);
  try {
    kept->push_back(p);
  } catch (...) {
  }
}

constinit HandleSpace handle_space;

uint64_t next_id() noexcept {
  static constinit std::atomic<uint64_t> next{1};
  return next.fetch_add(1, std::memory_order_relaxed);
}

std::atomic<int64_t>& live_handles() noexcept {
  static constinit std::atomic<int64_t> count{0};
  return count;
}

namespace {

// Addresses only: nothing is mapped readable until a handle needs it. A process short of address
// space (ulimit -v) gets less, down to the least.
constexpr size_t kMostSpace = size_t{4} << 30;  // some 6 million pools (704 bytes each), more of the smaller kinds
constexpr size_t kLeastSpace = size_t{16} << 20;
constexpr size_t kMapStep = size_t{256} << 10;
constexpr size_t kMinAlignment = 64;  // a cache line: handles used by different threads share none
constexpr size_t kMaxAlignment = 4096;

struct Space {
  uintptr_t base = 0;
  size_t reserved = 0;
  size_t used = 0;
  size_t readable = 0;
  bool tried = false;
};

void reserve(Space& s) {
  s.tried = true;
  for (size_t bytes = kMostSpace; bytes >= kLeastSpace; bytes /= 2) {
    void* p = mmap(nullptr, bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) continue;
    s.base = reinterpret_cast<uintptr_t>(p);
    s.reserved = bytes;
    // LeakSanitizer scans the parts that are readable.
    if (__lsan_register_root_region) __lsan_register_root_region(p, bytes);
    // Published by the first store to words, which a check loads first.
    handle_space.base.store(s.base, std::memory_order_relaxed);
    return;
  }
}

}  // namespace

void* handle_allocate(size_t size, size_t alignment) {
  static auto* mutex = new std::mutex;  // leaked: handles may be made during exit
  static Space space;
  alignment = std::max(alignment, kMinAlignment);
  if (alignment > kMaxAlignment || (alignment & (alignment - 1))) throw std::bad_alloc();
  size = std::max<size_t>(size, 1);
  std::lock_guard<std::mutex> lock(*mutex);
  if (!space.tried) reserve(space);
  const size_t start = (space.used + alignment - 1) & ~(alignment - 1);
  if (space.base == 0 || start > space.reserved || size > space.reserved - start) throw std::bad_alloc();
  const size_t end = start + size;
  if (end > space.readable) {
    const size_t readable = std::min(space.reserved, (end + kMapStep - 1) / kMapStep * kMapStep);
    if (mprotect(reinterpret_cast<void*>(space.base + space.readable), readable - space.readable,
                 PROT_READ | PROT_WRITE) != 0)
      throw std::bad_alloc();
    space.readable = readable;
    handle_space.words.store(readable / sizeof(uint64_t), std::memory_order_release);
  }
  space.used = end;
  return reinterpret_cast<void*>(space.base + start);
}

}  // namespace gpumem
