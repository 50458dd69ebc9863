// The copy benchmark's rows (bench_copy.cpp): the buffers they copy between, the bytes they fill
// them with and check them against, and the timing of one side of a row. Header-only, for
// bench_copy and bench_copy_pageable.
#pragma once

#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "bench_common.hpp"

namespace copy_rows {

// Every destination holds this before it is copied to: a byte of it left inside the region, or
// a byte other than it outside, is a wrong copy.
constexpr unsigned char kPoison = 0xA5;
// The first copies of a kind may allocate (gpumem's staging buffers, the driver's own) and
// load code; they are not timed.
constexpr int kWarmups = 2;

// ---------------------------------------------------------------------------------------------
// Buffers

inline uint64_t mix64(uint64_t z) {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Never repeats within a buffer and differs between seeds, so a row that lands shifted, twice, or
// from the wrong place does not match what is expected.
inline void fill_pattern(unsigned char* p, size_t n, uint64_t seed) {
  const uint64_t base = mix64(seed);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const uint64_t w = mix64(base + i);
    std::memcpy(p + i, &w, 8);
  }
  for (; i < n; ++i) p[i] = static_cast<unsigned char>(mix64(base + i));
}

// Plain pageable memory from malloc, as a user's buffer is. Whoever makes one fills or poisons
// it, so its pages are touched before anything is timed.
struct HostBuffer {
  unsigned char* p;
  size_t size;

  explicit HostBuffer(size_t n) : p(static_cast<unsigned char*>(std::malloc(n))), size(n) {
    if (p == nullptr) throw Failure("malloc of " + std::to_string(n) + " bytes failed");
  }
  HostBuffer(const HostBuffer&) = delete;
  HostBuffer& operator=(const HostBuffer&) = delete;
  ~HostBuffer() { std::free(p); }
};

// Page-locked host memory (cudaHostAlloc), the limit a pageable copy is measured against.
struct PinnedBuffer {
  unsigned char* p = nullptr;
  explicit PinnedBuffer(size_t n) {
    void* m = nullptr;
    check(cudaHostAlloc(&m, n, cudaHostAllocPortable), "cudaHostAlloc");
    p = static_cast<unsigned char*>(m);
    std::memset(p, 1, n);
  }
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;
  ~PinnedBuffer() { cudaFreeHost(p); }
};

// The program works with device 0 current; this makes another one current for a scope.
struct OnDevice {
  explicit OnDevice(int device) { check(cudaSetDevice(device), "cudaSetDevice"); }
  OnDevice(const OnDevice&) = delete;
  OnDevice& operator=(const OnDevice&) = delete;
  ~OnDevice() { cudaSetDevice(0); }
};

struct DeviceBuffer {
  unsigned char* p = nullptr;
  size_t size;
  int device;

  DeviceBuffer(int dev, size_t n) : size(n), device(dev) {
    OnDevice on(device);
    void* m = nullptr;
    check(cudaMalloc(&m, n), "cudaMalloc");
    p = static_cast<unsigned char*>(m);
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() {
    cudaSetDevice(device);
    cudaFree(p);
    cudaSetDevice(0);
  }

  void poison() const {
    OnDevice on(device);
    check(cudaMemset(p, kPoison, size), "cudaMemset (poison)");
    check(cudaDeviceSynchronize(), "cudaDeviceSynchronize (poison)");
  }
  void upload(const unsigned char* host) const {
    check(cudaMemcpy(p, host, size, cudaMemcpyDefault), "cudaMemcpy (fill the source)");
  }
  void read_back(size_t offset, size_t n, unsigned char* host) const {
    check(cudaMemcpy(host, p + offset, n, cudaMemcpyDefault), "cudaMemcpy (read back)");
  }
};

// "" when got equals expected; otherwise how many bytes differ and the first of them, at its
// offset in the destination buffer (got starts at `offset` there).
inline std::string differences(const unsigned char* expected, const unsigned char* got, size_t n, size_t offset) {
  if (std::memcmp(expected, got, n) == 0) return "";
  size_t wrong = 0, first = 0;
  for (size_t i = n; i-- > 0;)
    if (expected[i] != got[i]) {
      ++wrong;
      first = i;
    }
  const char* why = expected[first] == kPoison ? "outside the region: written"
                    : got[first] == kPoison    ? "inside the region: not written"
                                               : "inside the region: another byte";
  char text[256];
  std::snprintf(
      text, sizeof text,
      "%zu of %zu bytes checked differ; the first at byte %zu of the destination (%s): 0x%02x, 0x%02x expected", wrong,
      n, offset + first, why, got[first], expected[first]);
  return text;
}

// ---------------------------------------------------------------------------------------------
// Rows: both sides of a row copy the same bytes between the same buffers, wait the same way,
// and are checked the same way.

struct Cell {
  enum Kind { kFigure, kWrong, kFailed } kind = kFailed;
  double gbps = 0;
  std::string what;
};

struct Row {
  std::string test;
  size_t bytes = 0;
  int reps = 0;
  int batch = 1;                        // copies per timed sample, waited for once
  std::function<void()> poison;         // the destination, before the warm-up
  std::function<void()> wait;           // after every copy and timed with it
  std::function<std::string()> verify;  // "" when the destination is right
};

using Clock = std::chrono::steady_clock;

inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

// The copies are idempotent, so the destination after the last timed copy is what one copy
// writes; it is checked once, after the timing.
inline Cell measure(const Row& row, const std::function<void()>& copy) {
  Cell c;
  try {
    row.poison();
    for (int i = 0; i < kWarmups; ++i) {
      copy();
      row.wait();
    }
    std::vector<double> ns;
    for (int r = 0; r < row.reps; ++r) {
      const Clock::time_point t0 = Clock::now();
      for (int k = 0; k < row.batch; ++k) copy();
      row.wait();
      ns.push_back(
          static_cast<double>(std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t0).count()) /
          row.batch);
    }
    c.what = row.verify();
    if (!c.what.empty()) {
      c.kind = Cell::kWrong;
      return c;
    }
    c.kind = Cell::kFigure;
    c.gbps = static_cast<double>(row.bytes) / median(std::move(ns));  // bytes per ns = GB/s
  } catch (const Failure& f) {
    c.kind = Cell::kFailed;
    c.what = f.what();
  }
  return c;
}

// One side of a copy and the buffer it lies in: the region starts x bytes into row y of slice z;
// the buffer is `slices` slices of `rows` rows of `pitch` bytes, allocated to the byte.
struct Side {
  size_t x, y, z, pitch, rows, slices;

  size_t buffer_bytes() const { return pitch * rows * slices; }
  size_t offset(size_t row, size_t slice) const { return ((z + slice) * rows + y + row) * pitch + x; }
};

// A cell of the table: its GB/s, or what went wrong.
inline std::string cell_text(const Cell& c) {
  if (c.kind == Cell::kWrong) return "WRONG";
  if (c.kind == Cell::kFailed) return "failed";
  char text[32];
  std::snprintf(text, sizeof text, c.gbps >= 100 ? "%.1f" : c.gbps >= 1 ? "%.2f" : "%.3f", c.gbps);
  return text;
}

}  // namespace copy_rows
