// How a staged copy (staging.cpp) is cut into the pieces that pass through one staging buffer each.
#pragma once

#include <algorithm>
#include <cstddef>

namespace gpumem::memory {

constexpr size_t kStagingBufferBytes = size_t{4} << 20;
// The smallest chunk (staging_chunk).
constexpr size_t kStagingMinPiece = size_t{512} << 10;

// Bytes a piece of a staged copy of `size` bytes: at least four pieces a copy, so that host copying
// and DMA overlap even in the smaller staged copies; no smaller than the driver calls each piece
// costs are worth.
constexpr size_t staging_chunk(size_t size) {
  const size_t chunk = (size / 4 + 65535) & ~size_t{65535};
  return std::clamp(chunk, kStagingMinPiece, kStagingBufferBytes);
}

// A region of width bytes x height rows x depth slices (none of them 0) cut into pieces of at most
// one staging buffer: whole slices where a slice fits in a chunk, else whole rows of one slice
// where a row fits, else parts of one row (a 1D copy is one row). Each slice, or row, is cut into pieces of
// equal size (rows and slices whole, parts in 4 KiB units), so that no piece is a small remainder
// paying a piece's fixed costs for a few bytes (rows of 4 MiB + 8 bytes were a 4 MiB piece and an
// 8-byte one each). Smaller pieces at the two ends of a long copy, to hide the pipeline's fill
// and drain, were measured too (1D, 64 MiB to 1 GiB, on the H200 machine) and gained nothing.
class Pieces {
 public:
  struct Piece {
    size_t x, y, z, width, rows, slices;
  };

  Pieces(size_t width, size_t height, size_t depth) : width_(width), height_(height), depth_(depth) {
    const size_t chunk = staging_chunk(width * height * depth);
    if (width * height <= chunk) {
      mode_ = kSlices, units_ = depth;
      per_group_ = (depth + chunk / (width * height) - 1) / (chunk / (width * height));
    } else if (width <= chunk) {
      mode_ = kRows, units_ = height;
      per_group_ = (height + chunk / width - 1) / (chunk / width);
    } else {
      mode_ = kParts, units_ = (width + kUnit - 1) / kUnit;
      per_group_ = (units_ + chunk / kUnit - 1) / (chunk / kUnit);
    }
  }

  size_t count() const {
    if (mode_ == kSlices) return per_group_;
    return per_group_ * (mode_ == kRows ? depth_ : height_ * depth_);
  }

  Piece operator[](size_t i) const {
    if (mode_ == kSlices) {
      const size_t z = share(i);
      return {0, 0, z, width_, height_, share(i + 1) - z};
    }
    const size_t group = i / per_group_, k = i % per_group_;
    if (mode_ == kRows) {
      const size_t y = share(k);
      return {0, y, group, width_, share(k + 1) - y, 1};
    }
    const size_t x = std::min(width_, kUnit * share(k));
    return {x, group % height_, group / height_, std::min(width_, kUnit * share(k + 1)) - x, 1, 1};
  }

 private:
  enum Mode { kSlices, kRows, kParts };
  static constexpr size_t kUnit = 4096;

  // Where the k-th of per_group_ equal shares of units_ starts.
  size_t share(size_t k) const {
    const size_t q = units_ / per_group_, r = units_ % per_group_;
    return k * q + std::min(k, r);
  }

  Mode mode_;
  size_t width_, height_, depth_;
  size_t units_ = 0;      // slices, rows, or a row's 4 KiB units (the last one short), shared out
  size_t per_group_ = 0;  // equal pieces: of the slices, of a slice's rows, of a row
};

}  // namespace gpumem::memory
