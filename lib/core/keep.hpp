// Objects whose memory the process keeps: a handle's object that is never freed, so that a stale
// handle finds memory marked dead rather than memory reused for something else.
#pragma once

#include <atomic>
#include <bit>
#include <cstddef>
#include <cstdint>

namespace gpumem {

// Keeps p reachable for the rest of the process, so that leak checkers do not report it. Never
// fails: without host memory to list it, p is kept all the same, only unlisted.
void keep_forever(void* p) noexcept;

// Handle objects (allocators, and the shells behind trace and trace-reader handles) live in
// address space gpumem reserved for them alone, and are never freed nor reused. A handle check
// then knows that a pointer is one of gpumem's by comparing numbers, before it reads anything
// through it: a wild, misaligned, stack or heap pointer is refused without touching it, and a
// destroyed handle still points at gpumem's memory, whose mark says "destroyed".
struct HandleSpace {
  std::atomic<uintptr_t> base{0};
  std::atomic<uintptr_t> words{0};  // 8-byte words from base that are mapped readable; only grows
};
extern HandleSpace handle_space __attribute__((visibility("hidden")));

// Memory for a handle object, in the handle space: size bytes, aligned to 64 (or to alignment, a
// power of two up to 4,096, if larger), zero-filled; never freed. Throws std::bad_alloc when the
// space is used up or the system has no memory to map into it.
void* handle_allocate(size_t size, size_t alignment = 64);

// Whether p may be read as a uint64_t of the handle space: 8-aligned and inside what it has
// mapped. Reads nothing but the space's bounds. What lies there (any handle, live or destroyed, or
// the inside of one) is the caller's to tell by the handle's magic number.
inline bool in_handle_space(const void* p) noexcept {
  const uintptr_t words = handle_space.words.load(std::memory_order_acquire);
  const uintptr_t offset = reinterpret_cast<uintptr_t>(p) - handle_space.base.load(std::memory_order_relaxed);
  // base is page-aligned: a misaligned pointer's low bits rotate to the top, past any count of
  // words, so one comparison tells both.
  return std::rotr(offset, 3) < words;
}

}  // namespace gpumem
