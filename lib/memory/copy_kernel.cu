// gpumem's pitched copy kernel: 2D and 3D copies between device memory of one device, built into a
// fatbin that the library embeds and loads through the driver API (copy_kernel.cpp).
//
// Every row is written in aligned 16-byte words whatever the alignment of either side: a word of
// the destination is cut from the two aligned 16-byte source words it straddles, so odd widths,
// pitches and offsets run at nearly the speed of aligned ones. Bytes before the destination's
// first aligned word and after its last are copied one by one.
#include <cstdint>

#include "copy_kernel.h"

namespace {

// Words in flight per lane, loads first, then stores. Measured on an H200: 8 beats 4 when the
// sides line up; when they do not, 4, as the shifting needs twice the registers.
template <bool kShifted>
constexpr int kBatch = kShifted ? 4 : 8;

// Bytes [shift, shift + 16) of the 32 bytes lo:hi, shift in 0..15.
__device__ __forceinline__ uint4 cut(uint4 lo, uint4 hi, uint32_t shift) {
  uint32_t w0 = lo.x, w1 = lo.y, w2 = lo.z, w3 = lo.w, w4 = hi.x, w5 = hi.y, w6 = hi.z, w7 = hi.w;
  if (shift & 8) {
    w0 = w2, w1 = w3, w2 = w4, w3 = w5, w4 = w6, w5 = w7;
  }
  if (shift & 4) {
    w0 = w1, w1 = w2, w2 = w3, w3 = w4, w4 = w5;
  }
  const uint32_t bits = (shift & 3) * 8;
  return make_uint4(__funnelshift_r(w0, w1, bits), __funnelshift_r(w1, w2, bits), __funnelshift_r(w2, w3, bits),
                    __funnelshift_r(w3, w4, bits));
}

template <bool kShifted>
__device__ __forceinline__ void copy_row(uint8_t* __restrict__ dst, const uint8_t* __restrict__ src, uint64_t width,
                                         uint32_t lane, uint32_t lanes) {
  uint64_t head = (16 - (reinterpret_cast<uintptr_t>(dst) & 15)) & 15;
  if (head > width) head = width;
  const uint64_t words = (width - head) / 16;
  for (uint64_t i = lane; i < head; i += lanes) dst[i] = src[i];
  for (uint64_t i = head + words * 16 + lane; i < width; i += lanes) dst[i] = src[i];
  if (words == 0) return;

  uint4* __restrict__ out = reinterpret_cast<uint4*>(dst + head);
  const uintptr_t from = reinterpret_cast<uintptr_t>(src + head);
  const uint32_t shift = from & 15;
  // Each destination word takes bytes from the two aligned source words it straddles. Both hold
  // bytes of the row, so the bytes read outside it (up to 15 at either end) lie in the same aligned
  // 16 bytes as a row byte: never on another page.
  const uint4* __restrict__ in = reinterpret_cast<const uint4*>(from - shift);
  const uint64_t step = uint64_t(lanes) * kBatch<kShifted>;
  // The aligned kernel has no shifting loop at all: it is not merely skipped at run time.
  if constexpr (kShifted) {
    if (shift != 0) {
      for (uint64_t i = lane; i < words; i += step) {
        uint4 lo[kBatch<kShifted>], hi[kBatch<kShifted>];
#pragma unroll
        for (int k = 0; k < kBatch<kShifted>; ++k)
          if (i + k * lanes < words) {
            lo[k] = in[i + k * lanes];
            hi[k] = in[i + k * lanes + 1];
          }
#pragma unroll
        for (int k = 0; k < kBatch<kShifted>; ++k)
          if (i + k * lanes < words) out[i + k * lanes] = cut(lo[k], hi[k], shift);
      }
      return;
    }
  }
  for (uint64_t i = lane; i < words; i += step) {
    uint4 v[kBatch<kShifted>];
#pragma unroll
    for (int k = 0; k < kBatch<kShifted>; ++k)
      if (i + k * lanes < words) v[k] = in[i + k * lanes];
#pragma unroll
    for (int k = 0; k < kBatch<kShifted>; ++k)
      if (i + k * lanes < words) out[i + k * lanes] = v[k];
  }
}

// A group of lanes_per_row lanes takes a row at a time; the grid loops over all rows.
template <bool kShifted>
__device__ void copy_rows(const gpumem_copy_rows_t& p) {
  const uint32_t lanes = p.lanes_per_row;
  const uint64_t thread = uint64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const uint32_t lane = uint32_t(thread) & (lanes - 1);
  const uint64_t groups = uint64_t(gridDim.x) * blockDim.x / lanes;
  const bool narrow = p.rows <= UINT32_MAX;  // 32-bit division is several times cheaper
  for (uint64_t row = thread / lanes; row < p.rows; row += groups) {
    uint64_t y, z;
    if (narrow) {
      y = uint32_t(row) % uint32_t(p.height);
      z = uint32_t(row) / uint32_t(p.height);
    } else {
      y = row % p.height;
      z = row / p.height;
    }
    copy_row<kShifted>(reinterpret_cast<uint8_t*>(p.dst + z * p.dst_slice_pitch + y * p.dst_pitch),
                       reinterpret_cast<const uint8_t*>(p.src + z * p.src_slice_pitch + y * p.src_pitch), p.width, lane,
                       lanes);
  }
}

}  // namespace

// Two kernels, so that the common case (source and destination equally aligned to 16 bytes in
// every row) is not held to the registers of the shifting one, which costs it occupancy.
extern "C" __global__ void gpumem_copy_rows_aligned(gpumem_copy_rows_t p) { copy_rows<false>(p); }
extern "C" __global__ void gpumem_copy_rows_shifted(gpumem_copy_rows_t p) { copy_rows<true>(p); }
