// How staged copies are cut into pieces (lib/memory/staging_pieces.hpp), no GPU needed: every
// region is covered exactly once, in order, by pieces that fit a staging buffer; no piece is a
// small remainder.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

// cmocka 1.1.5's header has no extern "C" guard of its own.
extern "C" {
#include <cmocka.h>
}

#include <algorithm>
#include <vector>

#include "memory/staging_pieces.hpp"

namespace {

using gpumem::memory::kStagingBufferBytes;
using gpumem::memory::kStagingMinPiece;
using gpumem::memory::Pieces;
constexpr size_t KiB = 1024, MiB = 1024 * KiB;

struct Shape {
  size_t width, height, depth;
};

// The shapes staged copies take: 1D sizes around the threshold and the chunk sizes, the
// benchmarks' 2D and 3D regions, rows longer than a buffer, slices longer than one.
const Shape kShapes[] = {
    {MiB, 1, 1},          {MiB + 1, 1, 1},     {2 * MiB - 1, 1, 1},  {4 * MiB, 1, 1},  {5 * MiB + 7, 1, 1},
    {16 * MiB - 1, 1, 1}, {16 * MiB, 1, 1},    {18 * MiB + 3, 1, 1}, {64 * MiB, 1, 1}, {1024 * MiB + 5, 1, 1},
    {4 * MiB + 8, 24, 1}, {4 * MiB + 1, 3, 2}, {9 * MiB, 2, 1},      {1001, 65536, 1}, {24000, 4096, 1},
    {1536, 448, 448},     {64, 16384, 3},      {3 * MiB, 1, 5},      {1, 1 << 21, 1},  {4096, 1025, 7},
};

std::vector<Pieces::Piece> pieces_of(const Shape& s) {
  const Pieces pieces(s.width, s.height, s.depth);
  std::vector<Pieces::Piece> out;
  for (size_t i = 0; i < pieces.count(); ++i) out.push_back(pieces[i]);
  return out;
}

size_t bytes(const Pieces::Piece& p) { return p.width * p.rows * p.slices; }

// Pieces are parts of one row, whole rows of one slice, or whole slices, so each covers one run of
// the region's bytes in order (x fastest, then y, then z); each run must start where the one
// before it ended, and the last end at the region's end.
void test_pieces_cover_each_region_once_in_order(void** state) {
  (void)state;
  for (const Shape& s : kShapes) {
    size_t next = 0;
    for (const Pieces::Piece& p : pieces_of(s)) {
      assert_true(bytes(p) > 0);
      assert_true(bytes(p) <= kStagingBufferBytes);
      const bool part = p.rows == 1 && p.slices == 1;
      const bool rows = p.x == 0 && p.width == s.width && p.slices == 1;
      const bool slices = p.x == 0 && p.width == s.width && p.y == 0 && p.rows == s.height;
      assert_true(part || rows || slices);
      assert_true(p.x + p.width <= s.width && p.y + p.rows <= s.height && p.z + p.slices <= s.depth);
      assert_int_equal((p.z * s.height + p.y) * s.width + p.x, next);
      next += bytes(p);
    }
    assert_int_equal(next, s.width * s.height * s.depth);
  }
}

// Rows of 4 MiB + 8 bytes are cut in two halves, not into a full buffer and an 8-byte piece that
// would pay a piece's waits and driver calls for 8 bytes.
void test_pieces_leave_no_small_remainder(void** state) {
  (void)state;
  const std::vector<Pieces::Piece> rows = pieces_of({4 * MiB + 8, 24, 1});
  assert_int_equal(rows.size(), 48);
  for (const Pieces::Piece& p : rows) assert_true(p.width >= 2 * MiB - 4 * KiB && p.width <= 2 * MiB + 4 * KiB);
  // Whole rows, or whole slices, shared out evenly: the pieces differ by one row, or one slice.
  const struct {
    Shape shape;
    size_t unit;
  } even[] = {{{1001, 65536, 1}, 1001}, {{4096, 1025, 7}, 4096}, {{1536, 448, 448}, 1536 * 448}};
  for (const auto& e : even) {
    size_t least = SIZE_MAX, most = 0;
    for (const Pieces::Piece& p : pieces_of(e.shape))
      least = std::min(least, bytes(p)), most = std::max(most, bytes(p));
    assert_true(most - least <= e.unit);
  }
}

// 1D copies: whole buffers where the size is a multiple of one; else equal parts on 4 KiB
// boundaries, not full pieces and a last one of a few bytes.
void test_pieces_of_1d_copies(void** state) {
  (void)state;
  const std::vector<Pieces::Piece> whole = pieces_of({64 * MiB, 1, 1});
  assert_int_equal(whole.size(), 16);
  for (const Pieces::Piece& p : whole) assert_int_equal(p.width, kStagingBufferBytes);
  const std::vector<Pieces::Piece> odd = pieces_of({MiB + 1, 1, 1});  // 512 KiB chunks
  assert_int_equal(odd.size(), 3);
  assert_int_equal(odd[0].width, 86 * 4 * KiB);
  assert_int_equal(odd[1].x, 86 * 4 * KiB);
  assert_int_equal(odd[2].x, 172 * 4 * KiB);
  assert_int_equal(odd[2].width, MiB + 1 - 172 * 4 * KiB);
}

// No 1D copy from the staging threshold up has a piece under half the smallest chunk: equal pieces
// are more than half a chunk each.
void test_pieces_never_below_the_smallest(void** state) {
  (void)state;
  for (size_t size = MiB; size <= 80 * MiB; size += 640 * KiB + 1)
    for (const Pieces::Piece& p : pieces_of({size, 1, 1})) assert_true(p.width >= kStagingMinPiece / 2);
}

}  // namespace

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_pieces_cover_each_region_once_in_order),
      cmocka_unit_test(test_pieces_leave_no_small_remainder),
      cmocka_unit_test(test_pieces_of_1d_copies),
      cmocka_unit_test(test_pieces_never_below_the_smallest),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
