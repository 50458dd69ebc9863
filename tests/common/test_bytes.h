/* Bytes and buffers for the copy tests: a pattern with no short period, a byte-for-byte check that
 * names the first difference, memory of each kind a copy can have on either side, CUDA arrays, and
 * 2D/3D copy descriptions made from their two sides. A file that includes it defines
 * _POSIX_C_SOURCE 200809L (or _DEFAULT_SOURCE) before its first include, for posix_memalign. */
#ifndef GPUMEM_TEST_BYTES_H
#define GPUMEM_TEST_BYTES_H

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>

#include "test_util.h"

/* ---------------------------------------------------------------------------------------------
 * The pattern
 * ------------------------------------------------------------------------------------------- */

/* Bytes 8 * block to 8 * block + 7 of the pattern of a seed, as one word: splitmix64 of the block
 * number and the seed, a bijection, so no two blocks of a buffer (of less than 32 GiB) and no two
 * seeds' blocks at one place are alike. */
static inline uint64_t pattern_word(uint64_t block, unsigned seed) {
  uint64_t x = (block + ((uint64_t)seed << 32)) * 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

/* Byte i of a byte sequence with no short period, so that a shifted, partial or misplaced copy
 * cannot match it. */
static inline unsigned char pattern_byte(size_t i, unsigned seed) {
  const uint64_t word = pattern_word(i / 8, seed);
  unsigned char bytes[8];
  memcpy(bytes, &word, sizeof bytes);
  return bytes[i % 8];
}

/* p[i] = pattern_byte(i, seed) for i < n, a word at a time: fast enough for buffers of tens of MiB. */
static inline void fill_pattern(unsigned char* p, size_t n, unsigned seed) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const uint64_t word = pattern_word(i / 8, seed);
    memcpy(p + i, &word, sizeof word);
  }
  for (; i < n; i++) p[i] = pattern_byte(i, seed);
}

/* ---------------------------------------------------------------------------------------------
 * Checks
 * ------------------------------------------------------------------------------------------- */

/* Where two buffers first differ; n when they agree. */
static inline size_t first_difference(const unsigned char* got, const unsigned char* want, size_t n) {
  if (memcmp(got, want, n) == 0) return n;
  size_t i = 0;
  while (got[i] == want[i]) i++;
  return i;
}

/* Fails naming the first differing byte, which says more than "memcmp != 0". Where the destination
 * held poison (a byte value, or -1 for none) before a copy, it also says whether that byte was left
 * unwritten or written outside the region. */
static inline void expect_bytes_poisoned(const unsigned char* got, const unsigned char* want, size_t n, int poison,
                                         const char* what) {
  const size_t i = first_difference(got, want, n);
  if (i == n) return;
  print_error("%s: byte %zu of %zu is 0x%02x, expected 0x%02x%s\n", what, i, n, got[i], want[i],
              got[i] == poison    ? " (not written)"
              : want[i] == poison ? " (written outside the region)"
                                  : "");
  fail();
}

static inline void expect_bytes(const unsigned char* got, const unsigned char* want, size_t n, const char* what) {
  expect_bytes_poisoned(got, want, n, -1, what);
}

static inline void expect_ok(gpumem_status_t got, const char* what) {
  if (got != GPUMEM_SUCCESS) {
    print_error("%s returned %s; detail: %s\n", what, gpumem_status_name(got), gpumem_last_error_detail());
    fail();
  }
}

/* A refusal that gpumem made itself: the status, a piece of the detail, and no driver error. */
static inline void expect_refusal(gpumem_status_t got, gpumem_status_t want, const char* detail, const char* what) {
  if (got != want) {
    print_error("%s returned %s, expected %s; detail: %s\n", what, gpumem_status_name(got), gpumem_status_name(want),
                gpumem_last_error_detail());
    fail();
  }
  if (strstr(gpumem_last_error_detail(), detail) == NULL) {
    print_error("%s: detail \"%s\" does not contain \"%s\"\n", what, gpumem_last_error_detail(), detail);
    fail();
  }
  assert_int_equal(gpumem_last_cuda_result(), 0);
}

/* ---------------------------------------------------------------------------------------------
 * Memory of each kind
 * ------------------------------------------------------------------------------------------- */

static inline void* checked_malloc(size_t n) {
  void* p = malloc(n);
  assert_non_null(p);
  return p;
}

/* Writes a pattern into n bytes at p (any kind of memory) with gpumem_copy() and reads it back. */
static inline void expect_round_trip(void* p, size_t n, unsigned seed) {
  unsigned char* out = checked_malloc(n);
  unsigned char* back = checked_malloc(n);
  fill_pattern(out, n, seed);
  memset(back, 0, n);
  assert_ok(gpumem_copy(p, out, n));
  assert_ok(gpumem_copy(back, p, n));
  expect_bytes(back, out, n, "the bytes read back");
  free(out);
  free(back);
}

typedef enum {
  KIND_DEVICE,        /* gpumem_device_alloc */
  KIND_PINNED,        /* gpumem_host_alloc */
  KIND_PINNED_MAPPED, /* gpumem_host_alloc with GPUMEM_HOST_ALLOC_DEVICEMAP */
  KIND_REGISTERED,    /* whole pages from posix_memalign, gpumem_host_register */
  KIND_MANAGED,       /* gpumem_managed_alloc */
  KIND_PLAIN,         /* malloc */
  KIND_COUNT
} kind_t;

static inline const char* kind_name(kind_t kind) {
  static const char* const names[KIND_COUNT] = {
      "device", "pinned host", "pinned host (DEVICEMAP)", "registered host", "managed", "plain host",
  };
  return names[kind];
}

#define REGISTERED_PAGE 4096

/* Device memory on the device, managed memory owned by it; the host kinds do not use it. */
static inline unsigned char* memory_alloc(kind_t kind, int32_t device, size_t size) {
  void* p = NULL;
  switch (kind) {
    case KIND_DEVICE:
      assert_ok(gpumem_device_alloc(device, size, &p));
      break;
    case KIND_PINNED:
      assert_ok(gpumem_host_alloc(size, 0, &p));
      break;
    case KIND_PINNED_MAPPED:
      assert_ok(gpumem_host_alloc(size, GPUMEM_HOST_ALLOC_DEVICEMAP, &p));
      break;
    case KIND_REGISTERED: {
      /* Whole pages, so the registration covers nothing that another buffer could share. */
      const size_t rounded = (size + REGISTERED_PAGE - 1) / REGISTERED_PAGE * REGISTERED_PAGE;
      assert_int_equal(posix_memalign(&p, REGISTERED_PAGE, rounded), 0);
      assert_ok(gpumem_host_register(p, rounded, 0));
      break;
    }
    case KIND_MANAGED:
      assert_ok(gpumem_managed_alloc(device, size, 0, &p));
      break;
    case KIND_PLAIN:
      p = malloc(size);
      break;
    default:
      fail();
  }
  assert_non_null(p);
  return (unsigned char*)p;
}

static inline void memory_free(kind_t kind, unsigned char* p) {
  switch (kind) {
    case KIND_DEVICE:
      assert_ok(gpumem_device_free(p));
      break;
    case KIND_PINNED:
    case KIND_PINNED_MAPPED:
      assert_ok(gpumem_host_free(p));
      break;
    case KIND_REGISTERED:
      assert_ok(gpumem_host_unregister(p));
      free(p);
      break;
    case KIND_MANAGED:
      assert_ok(gpumem_managed_free(p));
      break;
    default:
      free(p);
      break;
  }
}

/* A CUDA array on a device; height 0 is 1D, depth 0 2D, as in gpumem_array_desc_t. */
static inline gpumem_array_t* array_create_on(int32_t device, int32_t format, uint32_t channels, size_t width,
                                              size_t height, size_t depth) {
  const gpumem_array_desc_t desc = {sizeof(gpumem_array_desc_t), device, format, channels, width, height, depth};
  gpumem_array_t* array = NULL;
  assert_ok(gpumem_array_create(&desc, &array));
  return array;
}

/* ---------------------------------------------------------------------------------------------
 * 2D and 3D copy descriptions
 * ------------------------------------------------------------------------------------------- */

/* One side of a copy: memory at ptr or an array (or, to test the checks, both or neither); the
 * region starts x bytes into row y of slice z; memory rows lie pitch bytes apart, rows to a slice
 * (0: the copy's width and height, as in the descriptions). */
typedef struct {
  void* ptr;
  gpumem_array_t* array;
  size_t x, y, z, pitch, rows;
} copy_side_t;

/* The fields in the order of the struct, as in GPUMEM_COPY3D_INIT. */
static inline gpumem_copy3d_t copy3d_of(copy_side_t dst, copy_side_t src, size_t width, size_t height, size_t depth) {
  const gpumem_copy3d_t c = {sizeof(gpumem_copy3d_t),
                             dst.ptr,
                             dst.array,
                             dst.x,
                             dst.y,
                             dst.z,
                             dst.pitch,
                             dst.rows,
                             src.ptr,
                             src.array,
                             src.x,
                             src.y,
                             src.z,
                             src.pitch,
                             src.rows,
                             width,
                             height,
                             depth};
  return c;
}

/* The first slice of a 3D copy as a 2D copy (fields in the order of the struct): its z, rows per
 * slice and depth are left out. */
static inline gpumem_copy2d_t copy2d_of_3d(const gpumem_copy3d_t* c) {
  const gpumem_copy2d_t d = {sizeof(gpumem_copy2d_t),
                             c->dst,
                             c->dst_array,
                             c->dst_x,
                             c->dst_y,
                             c->dst_pitch,
                             c->src,
                             c->src_array,
                             c->src_x,
                             c->src_y,
                             c->src_pitch,
                             c->width,
                             c->height};
  return d;
}

static inline gpumem_copy2d_t copy2d_of(copy_side_t dst, copy_side_t src, size_t width, size_t height) {
  const gpumem_copy3d_t c = copy3d_of(dst, src, width, height, 1);
  return copy2d_of_3d(&c);
}

#endif /* GPUMEM_TEST_BYTES_H */
