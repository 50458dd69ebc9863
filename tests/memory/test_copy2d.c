/* 2D and 3D copies (copy.h). Everywhere: every check made before a driver is needed, each refusal
 * leaving the destination as it was, and the descriptor initializers. On a GPU: every pair of
 * kinds of memory; the device-to-device kernel over many shapes and alignments; CUDA arrays of
 * every format and rank; and the checks that need the driver (array bounds, allocation bounds,
 * overlap). Each copy lands in a destination poisoned beforehand and is compared byte for byte,
 * margins included, with a reference model of the copy. Device memory and arrays are filled and
 * read whole through pinned memory, which gpumem never stages, so only the copy under test can
 * put a byte in the wrong place. */
#define _POSIX_C_SOURCE 200809L

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>

#include "test_bytes.h"
#include "test_cuda.h"

/* ---------------------------------------------------------------------------------------------
 * Helpers
 * ------------------------------------------------------------------------------------------- */

/* What a destination holds before a copy. Source patterns never contain it, so a byte that the
 * copy should have written and did not is seen, and so is a byte written outside the region. */
#define POISON 0xCD

/* The pattern with every POISON byte replaced. */
static void fill_unpoisoned(unsigned char* p, size_t n, unsigned seed) {
  fill_pattern(p, n, seed);
  for (size_t i = 0; i < n; i++)
    if (p[i] == POISON) p[i] = 0x5A;
}

/* Every filled object gets a pattern of its own, so data left by an earlier check cannot pass. */
static unsigned next_seed(void) {
  static unsigned seed = 1;
  return seed++;
}

/* The highest 16-byte-aligned address: a region of two rows from it wraps around. */
#define WRAPPING_ADDRESS ((void*)(uintptr_t)(UINTPTR_MAX - 15))

/* ---------------------------------------------------------------------------------------------
 * Issuing a copy. Every copy here is described in 3D; its 2D form is its first slice (depth 1,
 * z 0 on both sides), so one description and one reference model serve both.
 * ------------------------------------------------------------------------------------------- */

static gpumem_status_t issue2d(const gpumem_copy2d_t* c, bool async, gpumem_stream_t stream) {
  return async ? gpumem_copy2d_async(c, stream) : gpumem_copy2d(c);
}

static gpumem_status_t issue3d(const gpumem_copy3d_t* c, bool async, gpumem_stream_t stream) {
  return async ? gpumem_copy3d_async(c, stream) : gpumem_copy3d(c);
}

static gpumem_status_t issue(int dims, const gpumem_copy3d_t* c, bool async, gpumem_stream_t stream) {
  if (dims == 3) return issue3d(c, async, stream);
  assert_true(c->depth == 1 && c->dst_z == 0 && c->src_z == 0);
  const gpumem_copy2d_t c2 = copy2d_of_3d(c);
  return issue2d(&c2, async, stream);
}

/* The synchronous form, then the stream form on each default stream: none needs a driver to refuse. */
#define FORMS 4

static bool form_async(int form) { return form != 0; }

static gpumem_stream_t form_stream(int form) {
  return form == 2 ? GPUMEM_STREAM_LEGACY : form == 3 ? GPUMEM_STREAM_PER_THREAD : NULL;
}

static const char* form_name(int form) {
  static const char* const names[FORMS] = {"synchronous", "on NULL", "on GPUMEM_STREAM_LEGACY",
                                           "on GPUMEM_STREAM_PER_THREAD"};
  return names[form];
}

/* Every form gives the same answer; want may be GPUMEM_SUCCESS (detail then unused). */
static void expect_copy_refused(int dims, const gpumem_copy3d_t* c, gpumem_status_t want, const char* detail,
                                const char* what) {
  for (int form = 0; form < FORMS; form++) {
    char where[256];
    snprintf(where, sizeof where, "%s (%dD, %s)", what, dims, form_name(form));
    const gpumem_status_t got = issue(dims, c, form_async(form), form_stream(form));
    if (want == GPUMEM_SUCCESS)
      expect_ok(got, where);
    else
      expect_refusal(got, want, detail, where);
  }
}

/* A copy that must succeed: synchronous when stream is NULL, else on stream and waited for. */
static void run_copy(int dims, const gpumem_copy3d_t* c, gpumem_stream_t stream, const char* what) {
  expect_ok(issue(dims, c, stream != NULL, stream), what);
  if (stream) test_stream_sync(stream);
}

/* ---------------------------------------------------------------------------------------------
 * The two sides, for checks written once for both
 * ------------------------------------------------------------------------------------------- */

enum { DST, SRC };

static const char* const kSideNames[] = {"dst", "src"};

/* Sets a side's pointer and array (either or both may be NULL). */
static void set_side(gpumem_copy3d_t* c, int side, void* ptr, gpumem_array_t* array) {
  if (side == DST) {
    c->dst = ptr;
    c->dst_array = array;
  } else {
    c->src = ptr;
    c->src_array = array;
  }
}

/* What a memory side's region must keep within, the first dimension that defaults to the copy's
 * extent when 0: x + width within the pitch, or (3D) y + height within the rows of a slice. */
typedef struct {
  bool slice;
  const char* offset; /* "x" */
  const char* extent; /* "width" */
  const char* limit;  /* "pitch" */
  const char* field;  /* the field that the detail names after "dst_" or "src_" */
  const char* past;   /* what a region one more goes past */
  const char* unit;   /* what one more is */
  const char* outer;  /* the extent next out: with it 0 the copy is empty */
  const char* exact;  /* regions that fill the bound exactly */
  size_t overflowing; /* an offset that overflows with the extent added */
} bound_t;

enum { ROW_IN_PITCH, ROWS_IN_SLICE };

/* slice, offset, extent, limit, field, past, unit, outer, exact, overflowing */
static const bound_t kBounds[] = {
    {false, "x", "width", "pitch", "pitch", "pitch", "row", "height", "rows ending exactly at the pitch", SIZE_MAX - 7},
    {true, "y", "height", "slice height", "height", "slice", "rows", "depth", "slices filled exactly", SIZE_MAX - 1},
};

static size_t* bound_offset(gpumem_copy3d_t* c, const bound_t* b, int side) {
  if (b->slice) return side == DST ? &c->dst_y : &c->src_y;
  return side == DST ? &c->dst_x : &c->src_x;
}

static size_t* bound_limit(gpumem_copy3d_t* c, const bound_t* b, int side) {
  if (b->slice) return side == DST ? &c->dst_height : &c->src_height;
  return side == DST ? &c->dst_pitch : &c->src_pitch;
}

static size_t bound_extent(const gpumem_copy3d_t* c, const bound_t* b) { return b->slice ? c->height : c->width; }

static size_t* bound_outer(gpumem_copy3d_t* c, const bound_t* b) { return b->slice ? &c->depth : &c->height; }

/* Check 3 on each side of a valid copy of memory: a limit below the extent, a region one past the
 * limit, a region past the default limit, an offset that overflows; all refused naming the field.
 * It comes before the empty extent (check 5): with the outer extent 0 an exact fit passes and one
 * more does not. */
static void expect_bound_kept(int dims, const gpumem_copy3d_t* valid, const bound_t* b) {
  char detail[16];
  char what[128];
  for (int side = 0; side < 2; side++) {
    const char* const name = kSideNames[side];
    snprintf(detail, sizeof detail, "%s_%s", name, b->field);
    gpumem_copy3d_t c = *valid;
    size_t* const offset = bound_offset(&c, b, side);
    size_t* const limit = bound_limit(&c, b, side);
    const size_t extent = bound_extent(&c, b);

    *offset = 0;
    *limit = extent - 1;
    snprintf(what, sizeof what, "%s %s below the %s", name, b->limit, b->extent);
    expect_copy_refused(dims, &c, GPUMEM_ERROR_INVALID_ARGUMENT, detail, what);
    c = *valid;
    *offset = *limit - extent + 1;
    snprintf(what, sizeof what, "%s %s + %s one past the %s", name, b->offset, b->extent, b->past);
    expect_copy_refused(dims, &c, GPUMEM_ERROR_INVALID_ARGUMENT, detail, what);
    c = *valid;
    *offset = 1;
    *limit = 0;
    snprintf(what, sizeof what, "%s %s 1 with %s 0 (= %s)", name, b->offset, b->limit, b->extent);
    expect_copy_refused(dims, &c, GPUMEM_ERROR_INVALID_ARGUMENT, detail, what);
    c = *valid;
    *offset = b->overflowing;
    snprintf(what, sizeof what, "%s %s + %s overflowing", name, b->offset, b->extent);
    expect_copy_refused(dims, &c, GPUMEM_ERROR_INVALID_ARGUMENT, detail, what);
  }

  gpumem_copy3d_t c = *valid;
  *bound_outer(&c, b) = 0;
  for (int side = 0; side < 2; side++) *bound_offset(&c, b, side) = *bound_limit(&c, b, side) - bound_extent(&c, b);
  snprintf(what, sizeof what, "%s, %s 0", b->exact, b->outer);
  expect_copy_refused(dims, &c, GPUMEM_SUCCESS, NULL, what);
  for (int side = 0; side < 2; side++) {
    snprintf(detail, sizeof detail, "%s_%s", kSideNames[side], b->field);
    snprintf(what, sizeof what, "%s %s one past the %s, %s 0", kSideNames[side], b->unit, b->past, b->outer);
    ++*bound_offset(&c, b, side);
    expect_copy_refused(dims, &c, GPUMEM_ERROR_INVALID_ARGUMENT, detail, what);
    --*bound_offset(&c, b, side);
  }
}

/* ---------------------------------------------------------------------------------------------
 * The reference model
 * ------------------------------------------------------------------------------------------- */

/* Where a side's rows lie: bytes from one row to the next, and rows in a slice. */
typedef struct {
  size_t pitch;
  size_t rows;
} layout_t;

static layout_t memory_dst_layout(const gpumem_copy3d_t* c) {
  const layout_t l = {c->dst_pitch ? c->dst_pitch : c->width, c->dst_height ? c->dst_height : c->height};
  return l;
}

static layout_t memory_src_layout(const gpumem_copy3d_t* c) {
  const layout_t l = {c->src_pitch ? c->src_pitch : c->width, c->src_height ? c->src_height : c->height};
  return l;
}

/* Offset of row y of slice z of a region at (x, y0, z0), from the side's start. */
static size_t row_offset(layout_t l, size_t x, size_t y0, size_t z0, size_t y, size_t z) {
  return ((z0 + z) * l.rows + y0 + y) * l.pitch + x;
}

/* One past the last byte of a region, from the side's start. */
static size_t region_end(layout_t l, size_t x, size_t y, size_t z, const gpumem_copy3d_t* c) {
  return row_offset(l, x, y, z, c->height - 1, c->depth - 1) + c->width;
}

/* What the destination holds after the copy: dst is an image of it as it was before, src an image
 * of the source; each starts where the side's pointer points (an array: at its first element). */
static void model_copy(const gpumem_copy3d_t* c, unsigned char* dst, layout_t dl, const unsigned char* src,
                       layout_t sl) {
  for (size_t z = 0; z < c->depth; z++)
    for (size_t y = 0; y < c->height; y++)
      memcpy(dst + row_offset(dl, c->dst_x, c->dst_y, c->dst_z, y, z),
             src + row_offset(sl, c->src_x, c->src_y, c->src_z, y, z), c->width);
}

/* Whether two memory regions in one buffer share a byte, counted byte by byte. */
static bool regions_share_byte(const gpumem_copy3d_t* c, const unsigned char* base, size_t n) {
  const layout_t dl = memory_dst_layout(c);
  const layout_t sl = memory_src_layout(c);
  const size_t dst_at = (size_t)((const unsigned char*)c->dst - base);
  const size_t src_at = (size_t)((const unsigned char*)c->src - base);
  assert_true(dst_at + region_end(dl, c->dst_x, c->dst_y, c->dst_z, c) <= n);
  assert_true(src_at + region_end(sl, c->src_x, c->src_y, c->src_z, c) <= n);
  unsigned char* marks = calloc(n, 1);
  assert_non_null(marks);
  for (size_t z = 0; z < c->depth; z++)
    for (size_t y = 0; y < c->height; y++)
      memset(marks + src_at + row_offset(sl, c->src_x, c->src_y, c->src_z, y, z), 1, c->width);
  bool shared = false;
  for (size_t z = 0; z < c->depth; z++)
    for (size_t y = 0; y < c->height; y++)
      for (size_t x = 0; x < c->width; x++)
        shared = shared || marks[dst_at + row_offset(dl, c->dst_x, c->dst_y, c->dst_z, y, z) + x];
  free(marks);
  return shared;
}

/* A copy description with offsets, pitches and extents; sides are set where it is used. The tables
 * below list the fields in this order. */
typedef struct {
  const char* name;
  size_t width, height, depth;
  size_t dst_x, dst_y, dst_z, dst_pitch, dst_height;
  size_t src_x, src_y, src_z, src_pitch, src_height;
} shape_t;

static gpumem_copy3d_t shape_copy(const shape_t* s, int dims) {
  const copy_side_t dst = {NULL, NULL, s->dst_x, s->dst_y, s->dst_z, s->dst_pitch, s->dst_height};
  const copy_side_t src = {NULL, NULL, s->src_x, s->src_y, s->src_z, s->src_pitch, s->src_height};
  return copy3d_of(dst, src, s->width, s->height, dims == 2 ? 1 : s->depth);
}

/* ---------------------------------------------------------------------------------------------
 * Host buffers for the checks made before the driver
 * ------------------------------------------------------------------------------------------- */

#define HOST_BYTES 2048

typedef struct {
  unsigned char dst[HOST_BYTES];
  unsigned char src[HOST_BYTES];
  unsigned char dst_before[HOST_BYTES];
  unsigned char src_before[HOST_BYTES];
  /* A made-up array handle: it points at bytes that must stay as they are. */
  unsigned char fake_array[64];
  unsigned char fake_before[64];
} host_buffers_t;

static void host_buffers_init(host_buffers_t* h) {
  fill_unpoisoned(h->dst_before, HOST_BYTES, next_seed());
  fill_unpoisoned(h->src_before, HOST_BYTES, next_seed());
  fill_unpoisoned(h->fake_before, sizeof h->fake_before, next_seed());
  memcpy(h->dst, h->dst_before, HOST_BYTES);
  memcpy(h->src, h->src_before, HOST_BYTES);
  memcpy(h->fake_array, h->fake_before, sizeof h->fake_array);
}

static void host_buffers_unchanged(const host_buffers_t* h, const char* what) {
  char where[160];
  snprintf(where, sizeof where, "%s: destination", what);
  expect_bytes_poisoned(h->dst, h->dst_before, HOST_BYTES, POISON, where);
  snprintf(where, sizeof where, "%s: source", what);
  expect_bytes_poisoned(h->src, h->src_before, HOST_BYTES, POISON, where);
  snprintf(where, sizeof where, "%s: made-up array handle", what);
  expect_bytes_poisoned(h->fake_array, h->fake_before, sizeof h->fake_array, POISON, where);
}

static gpumem_array_t* fake_array(host_buffers_t* h) { return (gpumem_array_t*)(void*)h->fake_array; }

static unsigned char* host_side(host_buffers_t* h, int side) { return side == DST ? h->dst : h->src; }

/* A valid copy between the two host buffers: 20 bytes x 4 rows (x 1 slice), with offsets and
 * pitches on both sides and room for two more slices. */
static gpumem_copy3d_t host_copy(host_buffers_t* h) {
  const copy_side_t dst = {h->dst, NULL, 3, 1, 0, 40, 6};
  const copy_side_t src = {h->src, NULL, 5, 2, 0, 48, 7};
  return copy3d_of(dst, src, 20, 4, 1);
}

/* Each side's checks below are also made with an empty extent: the width for dst, the height for
 * src. */
static size_t* emptied_extent(gpumem_copy3d_t* c, int side) { return side == DST ? &c->width : &c->height; }

static const char* const kEmptiedNames[] = {"width", "height"};

/* A refused variant of the valid host copy, made on each side in turn: what it changes there; the
 * status and the detail (%s: the side); and what to call it (%s: the side; a second %s: the emptied
 * extent, or else the other side). */
enum {
  POINTER_AND_ARRAY = 1,   /* the side's array set too */
  NO_POINTER = 2,          /* neither a pointer nor an array */
  MADE_UP_ARRAY = 4,       /* a made-up array instead of the pointer */
  BAD_PITCH = 8,           /* pitch 1 */
  EMPTY = 16,              /* its extent emptied */
  OTHER_MADE_UP_ARRAY = 32 /* a made-up array instead of the other side's pointer */
};

typedef struct {
  unsigned changes;
  gpumem_status_t want;
  const char* detail;
  const char* what;
} side_case_t;

static void expect_side_cases(host_buffers_t* h, int dims, const side_case_t* cases, size_t count) {
  for (int side = 0; side < 2; side++) {
    for (size_t i = 0; i < count; i++) {
      const unsigned changes = cases[i].changes;
      gpumem_copy3d_t c = host_copy(h);
      if (changes & POINTER_AND_ARRAY) set_side(&c, side, host_side(h, side), fake_array(h));
      if (changes & NO_POINTER) set_side(&c, side, NULL, NULL);
      if (changes & MADE_UP_ARRAY) set_side(&c, side, NULL, fake_array(h));
      if (changes & BAD_PITCH) *bound_limit(&c, &kBounds[ROW_IN_PITCH], side) = 1;
      if (changes & EMPTY) *emptied_extent(&c, side) = 0;
      if (changes & OTHER_MADE_UP_ARRAY) set_side(&c, 1 - side, NULL, fake_array(h));
      char detail[64];
      char what[96];
      snprintf(detail, sizeof detail, cases[i].detail, kSideNames[side]);
      snprintf(what, sizeof what, cases[i].what, kSideNames[side],
               changes & EMPTY ? kEmptiedNames[side] : kSideNames[1 - side]);
      expect_copy_refused(dims, &c, cases[i].want, detail, what);
    }
  }
}

static const int kDims[] = {2, 3};
#define DIMS_COUNT 2

/* ---------------------------------------------------------------------------------------------
 * Initializers (no driver)
 * ------------------------------------------------------------------------------------------- */

#define FILL 0xA5

/* At file scope: the macros are constant initializers. */
static const gpumem_copy2d_t kCopy2dInit = GPUMEM_COPY2D_INIT;
static const gpumem_copy3d_t kCopy3dInit = GPUMEM_COPY3D_INIT;

/* The fields of the descriptions, pointers apart, so that a mismatch names its field. */
#define COPY2D_POINTERS(X) X(dst) X(dst_array) X(src) X(src_array)
#define COPY2D_SIZES(X) X(struct_size) X(dst_x) X(dst_y) X(dst_pitch) X(src_x) X(src_y) X(src_pitch) X(width) X(height)
#define COPY3D_SIZES(X) COPY2D_SIZES(X) X(dst_z) X(dst_height) X(src_z) X(src_height) X(depth)
#define EXPECT_POINTER_EQUAL(field) assert_ptr_equal(a->field, b->field);
#define EXPECT_SIZE_EQUAL(field) assert_int_equal(a->field, b->field);

static void expect_copy2d_equal(const gpumem_copy2d_t* a, const gpumem_copy2d_t* b) {
  COPY2D_POINTERS(EXPECT_POINTER_EQUAL)
  COPY2D_SIZES(EXPECT_SIZE_EQUAL)
}

static void expect_copy3d_equal(const gpumem_copy3d_t* a, const gpumem_copy3d_t* b) {
  COPY2D_POINTERS(EXPECT_POINTER_EQUAL)
  COPY3D_SIZES(EXPECT_SIZE_EQUAL)
}

static void test_copy2d_init_null_refused(void** state) {
  (void)state;
  assert_status(gpumem_copy2d_init(NULL, sizeof(gpumem_copy2d_t)), GPUMEM_ERROR_INVALID_ARGUMENT);
  assert_detail_contains("is NULL");
  assert_status(gpumem_copy3d_init(NULL, sizeof(gpumem_copy3d_t)), GPUMEM_ERROR_INVALID_ARGUMENT);
  assert_detail_contains("is NULL");
}

/* struct_size values too small for the description of a rank. */
static const size_t* small_sizes(int dims, size_t* count) {
  static const size_t sizes2[] = {0, sizeof(size_t), sizeof(gpumem_copy2d_t) - 1};
  static const size_t sizes3[] = {0, sizeof(size_t), sizeof(gpumem_copy2d_t), sizeof(gpumem_copy3d_t) - 1};
  *count = dims == 2 ? sizeof sizes2 / sizeof sizes2[0] : sizeof sizes3 / sizeof sizes3[0];
  return dims == 2 ? sizes2 : sizes3;
}

static void test_copy2d_init_small_struct_size_refused(void** state) {
  (void)state;
  for (int d = 0; d < DIMS_COUNT; d++) {
    const int dims = kDims[d];
    const size_t full = dims == 2 ? sizeof(gpumem_copy2d_t) : sizeof(gpumem_copy3d_t);
    size_t count = 0;
    const size_t* const sizes = small_sizes(dims, &count);
    for (size_t i = 0; i < count; i++) {
      const size_t size = sizes[i];
      union {
        gpumem_copy2d_t c2;
        gpumem_copy3d_t c3;
      } c;
      memset(&c, FILL, sizeof c);
      assert_status(dims == 2 ? gpumem_copy2d_init(&c.c2, size) : gpumem_copy3d_init(&c.c3, size),
                    GPUMEM_ERROR_INVALID_ARGUMENT);
      assert_detail_contains("struct_size");
      /* The caller's struct may be only that large: nothing is written past it. */
      for (size_t b = size; b < full; b++) assert_int_equal(((const unsigned char*)&c)[b], FILL);
    }
  }
}

/* Every field but struct_size is zero (NULL), as the macro gives. */
static void test_copy2d_init_fills_defaults(void** state) {
  (void)state;
  gpumem_copy2d_t zero2;
  gpumem_copy3d_t zero3;
  memset(&zero2, 0, sizeof zero2);
  memset(&zero3, 0, sizeof zero3);
  zero2.struct_size = sizeof zero2;
  zero3.struct_size = sizeof zero3;
  gpumem_copy2d_t c2;
  gpumem_copy3d_t c3;
  memset(&c2, FILL, sizeof c2);
  memset(&c3, FILL, sizeof c3);
  assert_ok(gpumem_copy2d_init(&c2, sizeof c2));
  assert_ok(gpumem_copy3d_init(&c3, sizeof c3));
  const gpumem_copy2d_t macro2 = GPUMEM_COPY2D_INIT;
  const gpumem_copy3d_t macro3 = GPUMEM_COPY3D_INIT;
  const gpumem_copy2d_t* const want2[] = {&zero2, &macro2, &kCopy2dInit};
  const gpumem_copy3d_t* const want3[] = {&zero3, &macro3, &kCopy3dInit};
  for (int i = 0; i < 3; i++) {
    expect_copy2d_equal(&c2, want2[i]);
    expect_copy3d_equal(&c3, want3[i]);
  }
}

/* ---------------------------------------------------------------------------------------------
 * Checks 1-5, made before the driver: the same answer with or without a GPU
 * ------------------------------------------------------------------------------------------- */

static void test_copy2d_null_copy_refused(void** state) {
  (void)state;
  for (int form = 0; form < FORMS; form++) {
    char what[96];
    snprintf(what, sizeof what, "gpumem_copy2d(NULL) %s", form_name(form));
    expect_refusal(issue2d(NULL, form_async(form), form_stream(form)), GPUMEM_ERROR_INVALID_ARGUMENT, "copy is NULL",
                   what);
    snprintf(what, sizeof what, "gpumem_copy3d(NULL) %s", form_name(form));
    expect_refusal(issue3d(NULL, form_async(form), form_stream(form)), GPUMEM_ERROR_INVALID_ARGUMENT, "copy is NULL",
                   what);
  }
}

/* The description of c with another struct_size: the 2D one is its first slice. */
static gpumem_status_t issue_sized(int dims, const gpumem_copy3d_t* c, size_t struct_size, int form) {
  if (dims == 3) {
    gpumem_copy3d_t c3 = *c;
    c3.struct_size = struct_size;
    return issue3d(&c3, form_async(form), form_stream(form));
  }
  gpumem_copy2d_t c2 = copy2d_of_3d(c);
  c2.struct_size = struct_size;
  return issue2d(&c2, form_async(form), form_stream(form));
}

static void test_copy2d_small_struct_size_refused(void** state) {
  (void)state;
  host_buffers_t h;
  host_buffers_init(&h);
  const gpumem_copy3d_t valid = host_copy(&h);
  for (int form = 0; form < FORMS; form++) {
    for (int d = 0; d < DIMS_COUNT; d++) {
      const int dims = kDims[d];
      size_t count = 0;
      const size_t* const sizes = small_sizes(dims, &count);
      for (size_t i = 0; i < count; i++) {
        const size_t size = sizes[i];
        char what[128];
        snprintf(what, sizeof what, "%dD copy with struct_size %zu, %s", dims, size, form_name(form));
        expect_refusal(issue_sized(dims, &valid, size, form), GPUMEM_ERROR_INVALID_ARGUMENT, "struct_size", what);
        /* It comes first: a side with neither pointer nor array is not what is reported. */
        gpumem_copy3d_t missing = valid;
        set_side(&missing, dims == 2 ? DST : SRC, NULL, NULL);
        expect_refusal(issue_sized(dims, &missing, size, form), GPUMEM_ERROR_INVALID_ARGUMENT, "struct_size", what);
      }
    }
  }
  host_buffers_unchanged(&h, "after copies with a small struct_size");
}

/* A caller built against a newer header passes a larger struct, its newer fields zero. */
static void test_copy2d_larger_struct_size_accepted(void** state) {
  (void)state;
  host_buffers_t h;
  host_buffers_init(&h);
  const gpumem_copy3d_t valid = host_copy(&h);
  struct {
    gpumem_copy2d_t c;
    size_t newer[4];
  } c2;
  struct {
    gpumem_copy3d_t c;
    size_t newer[4];
  } c3;
  memset(&c2, 0, sizeof c2);
  memset(&c3, 0, sizeof c3);
  c2.c = copy2d_of_3d(&valid);
  c2.c.struct_size = sizeof c2;
  c2.c.width = 0;
  c3.c = valid;
  c3.c.struct_size = sizeof c3;
  c3.c.depth = 0;
  /* The empty extent keeps the driver out; a refused struct_size would be reported first. */
  for (int form = 0; form < FORMS; form++) {
    expect_ok(issue2d(&c2.c, form_async(form), form_stream(form)), "2D copy with a larger struct_size");
    expect_ok(issue3d(&c3.c, form_async(form), form_stream(form)), "3D copy with a larger struct_size");
  }
  host_buffers_unchanged(&h, "after empty copies with a larger struct_size");
}

static void test_copy2d_both_pointer_and_array_refused(void** state) {
  (void)state;
  host_buffers_t h;
  host_buffers_init(&h);
  /* Reported before a bad pitch (check 3) and before an empty extent (check 5). */
  static const side_case_t cases[] = {
      {POINTER_AND_ARRAY, GPUMEM_ERROR_INVALID_ARGUMENT, "%s has both a pointer and an array",
       "%s with a pointer and an array"},
      {POINTER_AND_ARRAY | BAD_PITCH, GPUMEM_ERROR_INVALID_ARGUMENT, "%s has both a pointer and an array",
       "%s with a pointer, an array and a bad pitch"},
      {POINTER_AND_ARRAY | EMPTY, GPUMEM_ERROR_INVALID_ARGUMENT, "%s has both a pointer and an array",
       "%s with a pointer and an array, %s 0"},
  };
  for (int d = 0; d < DIMS_COUNT; d++) expect_side_cases(&h, kDims[d], cases, sizeof cases / sizeof cases[0]);
  host_buffers_unchanged(&h, "after copies with both a pointer and an array");
}

static void test_copy2d_neither_pointer_nor_array_refused(void** state) {
  (void)state;
  host_buffers_t h;
  host_buffers_init(&h);
  /* An empty extent does not excuse a missing side. */
  static const side_case_t cases[] = {
      {NO_POINTER, GPUMEM_ERROR_INVALID_ARGUMENT, "%s has neither a pointer nor an array", "%s with neither"},
      {NO_POINTER | EMPTY, GPUMEM_ERROR_INVALID_ARGUMENT, "%s has neither a pointer nor an array",
       "%s with neither, %s 0"},
  };
  for (int d = 0; d < DIMS_COUNT; d++) expect_side_cases(&h, kDims[d], cases, sizeof cases / sizeof cases[0]);
  host_buffers_unchanged(&h, "after copies with a missing side");
}

/* x + width > pitch, the pitch defaulting to the width. */
static void test_copy2d_row_past_pitch_refused(void** state) {
  (void)state;
  host_buffers_t h;
  host_buffers_init(&h);
  const gpumem_copy3d_t valid = host_copy(&h);
  /* Checked before the array handle (check 4): the made-up array on the other side is not reported. */
  static const side_case_t made_up_other[] = {
      {BAD_PITCH | OTHER_MADE_UP_ARRAY, GPUMEM_ERROR_INVALID_ARGUMENT, "%s_pitch", "bad %s pitch, made-up %s array"},
  };
  for (int d = 0; d < DIMS_COUNT; d++) {
    expect_bound_kept(kDims[d], &valid, &kBounds[ROW_IN_PITCH]);
    expect_side_cases(&h, kDims[d], made_up_other, 1);
  }
  host_buffers_unchanged(&h, "after copies with rows past the pitch");
}

/* 3D memory side: y + height > rows per slice, which default to the height. */
static void test_copy3d_rows_past_slice_height_refused(void** state) {
  (void)state;
  host_buffers_t h;
  host_buffers_init(&h);
  const gpumem_copy3d_t valid = host_copy(&h);
  expect_bound_kept(3, &valid, &kBounds[ROWS_IN_SLICE]);
  host_buffers_unchanged(&h, "after copies with rows past the slice");
}

static void test_copy2d_dead_array_refused(void** state) {
  (void)state;
  host_buffers_t h;
  host_buffers_init(&h);
  /* Before the empty extent. */
  static const side_case_t cases[] = {
      {MADE_UP_ARRAY, GPUMEM_ERROR_INVALID_HANDLE, "not a live gpumem array", "made-up %s array"},
      {MADE_UP_ARRAY | EMPTY, GPUMEM_ERROR_INVALID_HANDLE, "not a live gpumem array", "made-up %s array, %s 0"},
  };
  for (int d = 0; d < DIMS_COUNT; d++) {
    const int dims = kDims[d];
    expect_side_cases(&h, dims, cases, sizeof cases / sizeof cases[0]);
    /* The host fixture itself, taken for an array. */
    gpumem_copy3d_t c = host_copy(&h);
    set_side(&c, SRC, NULL, (gpumem_array_t*)(void*)&h);
    expect_copy_refused(dims, &c, GPUMEM_ERROR_INVALID_HANDLE, "not a live gpumem array", "a host struct as src array");
  }
  host_buffers_unchanged(&h, "after copies with made-up arrays");
}

/* A width, height or depth of 0 succeeds and writes nothing, however odd the rest. */
static void test_copy2d_empty_extent_writes_nothing(void** state) {
  (void)state;
  host_buffers_t h;
  host_buffers_init(&h);
  for (int d = 0; d < DIMS_COUNT; d++) {
    const int dims = kDims[d];
    gpumem_copy3d_t c = host_copy(&h);
    c.width = 0;
    expect_copy_refused(dims, &c, GPUMEM_SUCCESS, NULL, "width 0");
    c = host_copy(&h);
    c.height = 0;
    expect_copy_refused(dims, &c, GPUMEM_SUCCESS, NULL, "height 0");
    c.width = 0;
    expect_copy_refused(dims, &c, GPUMEM_SUCCESS, NULL, "width and height 0");
    /* Overlap is checked later (check 8): an empty copy of a region onto itself is fine. */
    c = host_copy(&h);
    c.src = h.dst;
    c.src_x = c.dst_x;
    c.src_y = c.dst_y;
    c.src_pitch = c.dst_pitch;
    c.src_height = c.dst_height;
    c.width = 0;
    expect_copy_refused(dims, &c, GPUMEM_SUCCESS, NULL, "empty copy of a region onto itself");
  }
  gpumem_copy3d_t c = host_copy(&h);
  c.depth = 0;
  expect_copy_refused(3, &c, GPUMEM_SUCCESS, NULL, "depth 0");
  c.dst_z = 5;
  c.src_z = 9;
  expect_copy_refused(3, &c, GPUMEM_SUCCESS, NULL, "depth 0 at slices past the buffers");
  host_buffers_unchanged(&h, "after empty copies");
}

/* ---------------------------------------------------------------------------------------------
 * Objects on a GPU: memory of each kind, or a CUDA array, filled and read whole
 * ------------------------------------------------------------------------------------------- */

/* An object that is a CUDA array rather than memory of a kind. */
#define KIND_ARRAY KIND_COUNT

typedef struct {
  kind_t kind;
  unsigned char* ptr;    /* memory */
  gpumem_array_t* array; /* array */
  size_t elem;           /* array: bytes per element */
  size_t width, height, depth;
  size_t size; /* bytes of the memory, or of the array's elements */
} object_t;

static const char* object_name(const object_t* o) { return o->kind == KIND_ARRAY ? "array" : kind_name(o->kind); }

/* Poisoned bytes after every region, so that a write past its end shows. */
#define TAIL 61

static object_t memory_create(kind_t kind, size_t size) {
  object_t o;
  memset(&o, 0, sizeof o);
  o.kind = kind;
  o.size = size;
  o.ptr = memory_alloc(kind, 0, size);
  return o;
}

static size_t format_bytes(int32_t format) {
  switch (format) {
    case GPUMEM_FORMAT_U8:
    case GPUMEM_FORMAT_I8:
      return 1;
    case GPUMEM_FORMAT_U16:
    case GPUMEM_FORMAT_I16:
    case GPUMEM_FORMAT_F16:
      return 2;
    default:
      return 4;
  }
}

/* height 0 is 1D, depth 0 2D, as in gpumem_array_desc_t. */
static object_t array_create(int32_t format, uint32_t channels, size_t width, size_t height, size_t depth) {
  object_t o;
  memset(&o, 0, sizeof o);
  o.kind = KIND_ARRAY;
  o.array = array_create_on(0, format, channels, width, height, depth);
  o.elem = format_bytes(format) * channels;
  o.width = width;
  o.height = height;
  o.depth = depth;
  o.size = width * o.elem * (height ? height : 1) * (depth ? depth : 1);
  return o;
}

static void object_destroy(object_t* o) {
  if (o->kind == KIND_ARRAY)
    assert_ok(gpumem_array_destroy(o->array));
  else
    memory_free(o->kind, o->ptr);
  memset(o, 0, sizeof *o);
}

/* An array's elements as rows packed one after another: the layout of its image. */
static layout_t array_layout(const object_t* a) {
  const layout_t l = {a->width * a->elem, a->height ? a->height : 1};
  return l;
}

static gpumem_copy3d_t whole_array_copy(const object_t* a) {
  const layout_t l = array_layout(a);
  gpumem_copy3d_t c = GPUMEM_COPY3D_INIT;
  c.width = l.pitch;
  c.height = l.rows;
  c.depth = a->depth ? a->depth : 1;
  return c;
}

/* Device and managed memory through gpumem_copy, arrays through a whole 3D copy, always from and
 * to pinned images; the host reaches the rest directly. */
static void object_write(const object_t* o, const unsigned char* image) {
  if (o->kind == KIND_ARRAY) {
    gpumem_copy3d_t c = whole_array_copy(o);
    c.dst_array = o->array;
    c.src = image;
    expect_ok(gpumem_copy3d(&c), "filling an array whole from pinned memory");
  } else if (o->kind == KIND_DEVICE || o->kind == KIND_MANAGED) {
    expect_ok(gpumem_copy(o->ptr, image, o->size), "filling memory from pinned memory");
  } else {
    memcpy(o->ptr, image, o->size);
  }
}

static void object_read(const object_t* o, unsigned char* image) {
  if (o->kind == KIND_ARRAY) {
    gpumem_copy3d_t c = whole_array_copy(o);
    c.dst = image;
    c.src_array = o->array;
    expect_ok(gpumem_copy3d(&c), "reading an array whole into pinned memory");
  } else if (o->kind == KIND_DEVICE || o->kind == KIND_MANAGED) {
    expect_ok(gpumem_copy(image, o->ptr, o->size), "reading memory into pinned memory");
  } else {
    memcpy(image, o->ptr, o->size);
  }
}

static layout_t dst_layout(const object_t* o, const gpumem_copy3d_t* c) {
  return o->kind == KIND_ARRAY ? array_layout(o) : memory_dst_layout(c);
}

static layout_t src_layout(const object_t* o, const gpumem_copy3d_t* c) {
  return o->kind == KIND_ARRAY ? array_layout(o) : memory_src_layout(c);
}

/* Where a side's pointer points in its object's image (an array side starts at its first element). */
static size_t offset_in(const object_t* o, const void* p) {
  if (o->kind == KIND_ARRAY) return 0;
  const size_t at = (size_t)((const unsigned char*)p - o->ptr);
  assert_true(at <= o->size);
  return at;
}

/* Bytes a memory side needs for a region at its start, poisoned tail included. */
static size_t dst_bytes(const gpumem_copy3d_t* c) {
  return region_end(memory_dst_layout(c), c->dst_x, c->dst_y, c->dst_z, c) + TAIL;
}

static size_t src_bytes(const gpumem_copy3d_t* c) {
  return region_end(memory_src_layout(c), c->src_x, c->src_y, c->src_z, c) + TAIL;
}

/* Pinned host images of an object: what the source holds, what the destination should hold, what
 * was read back. */
typedef struct {
  unsigned char* source;
  unsigned char* expected;
  unsigned char* got;
  size_t size;
} images_t;

static images_t images_create(size_t size) {
  const images_t im = {memory_alloc(KIND_PINNED, 0, size), memory_alloc(KIND_PINNED, 0, size),
                       memory_alloc(KIND_PINNED, 0, size), size};
  return im;
}

static void images_destroy(images_t* im) {
  memory_free(KIND_PINNED, im->source);
  memory_free(KIND_PINNED, im->expected);
  memory_free(KIND_PINNED, im->got);
}

/* The check of every successful copy: the source holds a fresh pattern and the destination poison;
 * after the copy the destination matches the model byte for byte (the region holds the source's
 * bytes, everything else is still poison) and the source is unchanged. c has its sides set. */
static void check_copy(int dims, const gpumem_copy3d_t* c, const object_t* dst, const object_t* src, images_t* im,
                       gpumem_stream_t stream, const char* what) {
  assert_true(dst->size <= im->size && src->size <= im->size);
  fill_unpoisoned(im->source, src->size, next_seed());
  object_write(src, im->source);
  memset(im->expected, POISON, dst->size);
  object_write(dst, im->expected);

  run_copy(dims, c, stream, what);

  model_copy(c, im->expected + offset_in(dst, c->dst), dst_layout(dst, c), im->source + offset_in(src, c->src),
             src_layout(src, c));
  char where[320];
  snprintf(where, sizeof where, "%s (%dD, %s, %s to %s): destination", what, dims,
           stream ? "on a stream" : "synchronous", object_name(src), object_name(dst));
  object_read(dst, im->got);
  expect_bytes_poisoned(im->got, im->expected, dst->size, POISON, where);
  snprintf(where, sizeof where, "%s (%dD, %s, %s to %s): source", what, dims, stream ? "on a stream" : "synchronous",
           object_name(src), object_name(dst));
  object_read(src, im->got);
  expect_bytes_poisoned(im->got, im->source, src->size, POISON, where);
}

/* Synchronously, then on the stream. */
static void check_copy_both_forms(int dims, const gpumem_copy3d_t* c, const object_t* dst, const object_t* src,
                                  images_t* im, gpumem_stream_t stream, const char* what) {
  check_copy(dims, c, dst, src, im, NULL, what);
  check_copy(dims, c, dst, src, im, stream, what);
}

/* A copy within one object (rows of one buffer, boxes of one array) that share no byte. */
static void check_copy_within(int dims, const gpumem_copy3d_t* c, const object_t* o, images_t* im,
                              gpumem_stream_t stream, const char* what) {
  assert_true(o->size <= im->size);
  fill_unpoisoned(im->source, o->size, next_seed());
  object_write(o, im->source);

  run_copy(dims, c, stream, what);

  memcpy(im->expected, im->source, o->size);
  model_copy(c, im->expected + offset_in(o, c->dst), dst_layout(o, c), im->source + offset_in(o, c->src),
             src_layout(o, c));
  char where[320];
  snprintf(where, sizeof where, "%s (%dD, %s, within %s)", what, dims, stream ? "on a stream" : "synchronous",
           object_name(o));
  object_read(o, im->got);
  expect_bytes_poisoned(im->got, im->expected, o->size, POISON, where);
}

/* Every form gives want (and the detail) and leaves every object as it was. */
static void check_refused(int dims, const gpumem_copy3d_t* c, const object_t* const* objects, size_t count,
                          images_t* im, gpumem_status_t want, const char* detail, const char* what) {
  unsigned seeds[4];
  assert_true(count <= 4);
  for (size_t k = 0; k < count; k++) {
    assert_true(objects[k]->size <= im->size);
    seeds[k] = next_seed();
    fill_unpoisoned(im->source, objects[k]->size, seeds[k]);
    object_write(objects[k], im->source);
  }
  expect_copy_refused(dims, c, want, detail, what);
  for (size_t k = 0; k < count; k++) {
    char where[320];
    snprintf(where, sizeof where, "%s (%dD): %s after the refusal", what, dims, object_name(objects[k]));
    fill_unpoisoned(im->source, objects[k]->size, seeds[k]);
    object_read(objects[k], im->got);
    expect_bytes_poisoned(im->got, im->source, objects[k]->size, POISON, where);
  }
}

/* ---------------------------------------------------------------------------------------------
 * Every pair of kinds of memory (GPU)
 * ------------------------------------------------------------------------------------------- */

/* name, width, height, depth, dst: x, y, z, pitch, height, src: x, y, z, pitch, height */
static const shape_t kPairShape = {"pair", 29, 4, 3, 2, 2, 2, 37, 6, 5, 1, 1, 41, 7};

static const shape_t kPairShape2d = {"pair", 45, 6, 0, 9, 1, 0, 67, 0, 3, 2, 0, 61, 0};

#define PAIR_KINDS 5
static const kind_t kPairKinds[PAIR_KINDS] = {KIND_DEVICE, KIND_PINNED, KIND_REGISTERED, KIND_MANAGED, KIND_PLAIN};

static void copy_every_pair(int dims, gpumem_stream_t stream) {
  gpumem_copy3d_t c = shape_copy(dims == 2 ? &kPairShape2d : &kPairShape, dims);
  const size_t dst_size = dst_bytes(&c);
  const size_t src_size = src_bytes(&c);
  images_t im = images_create(dst_size > src_size ? dst_size : src_size);
  object_t dst[PAIR_KINDS];
  object_t src[PAIR_KINDS];
  for (int k = 0; k < PAIR_KINDS; k++) {
    dst[k] = memory_create(kPairKinds[k], dst_size);
    src[k] = memory_create(kPairKinds[k], src_size);
  }
  for (int from = 0; from < PAIR_KINDS; from++) {
    for (int to = 0; to < PAIR_KINDS; to++) {
      c.dst = dst[to].ptr;
      c.src = src[from].ptr;
      check_copy(dims, &c, &dst[to], &src[from], &im, stream, "pair of kinds");
    }
  }
  for (int k = 0; k < PAIR_KINDS; k++) {
    object_destroy(&dst[k]);
    object_destroy(&src[k]);
  }
  images_destroy(&im);
}

static void test_copy2d_every_pair_of_kinds(void** state) {
  (void)state;
  require_gpu();
  copy_every_pair(2, NULL);
}

static void test_copy2d_async_every_pair_of_kinds(void** state) {
  (void)state;
  require_gpu();
  gpumem_stream_t stream = test_stream_create(0);
  copy_every_pair(2, stream);
  test_stream_destroy(stream);
}

static void test_copy3d_every_pair_of_kinds(void** state) {
  (void)state;
  require_gpu();
  copy_every_pair(3, NULL);
}

static void test_copy3d_async_every_pair_of_kinds(void** state) {
  (void)state;
  require_gpu();
  gpumem_stream_t stream = test_stream_create(0);
  copy_every_pair(3, stream);
  test_stream_destroy(stream);
}

/* ---------------------------------------------------------------------------------------------
 * Device to device on one device: gpumem's kernel (GPU)
 * ------------------------------------------------------------------------------------------- */

#define MIB ((size_t)1 << 20)

/* name, width, height, depth, dst: x, y, z, pitch, height, src: x, y, z, pitch, height */
static const shape_t kDeviceShapes2d[] = {
    {"one byte", 1, 1, 0, 5, 0, 0, 8, 0, 11, 0, 0, 13, 0},
    {"rows of one byte, odd pitches", 1, 17, 0, 4, 1, 0, 5, 0, 1, 3, 0, 3, 0},
    {"3-byte rows", 3, 9, 0, 13, 2, 0, 23, 0, 2, 1, 0, 19, 0},
    {"7-byte rows", 7, 33, 0, 1, 4, 0, 27, 0, 15, 2, 0, 31, 0},
    {"1001-byte rows", 1001, 7, 0, 6, 1, 0, 1033, 0, 9, 3, 0, 1021, 0},
    {"one row", 4099, 1, 0, 14, 0, 0, 4127, 0, 3, 2, 0, 4111, 0},
    {"packed rows (pitch 0)", 777, 13, 0, 0, 3, 0, 0, 0, 0, 2, 0, 0, 0},
    {"16-byte aligned rows", 4096, 64, 0, 0, 0, 0, 4096, 0, 0, 1, 0, 8192, 0},
    {"rows ending exactly at the pitch", 250, 20, 0, 7, 0, 0, 257, 0, 1, 0, 0, 251, 0},
    {"tall and thin", 1, 5000, 0, 1, 0, 0, 2, 0, 2, 0, 0, 3, 0},
    {"wide and short", MIB, 3, 0, 7, 1, 0, MIB + 64, 0, 13, 0, 0, MIB + 13, 0},
    {"big, aligned", 24000, 2048, 0, 0, 0, 0, 32768, 0, 0, 0, 0, 32768, 0},
    {"big, odd offsets and pitch", 24000, 2048, 0, 5, 0, 0, 24007, 0, 1, 1, 0, 32768, 0},
};

/* name, width, height, depth, dst: x, y, z, pitch, height, src: x, y, z, pitch, height */
static const shape_t kDeviceShapes3d[] = {
    {"odd slice heights", 13, 5, 4, 6, 4, 2, 31, 9, 3, 1, 1, 29, 7},
    {"packed slices (pitch and height 0)", 64, 8, 6, 0, 0, 1, 0, 0, 0, 0, 2, 0, 0},
    {"one-byte rows, many slices", 1, 3, 101, 0, 0, 0, 1, 3, 1, 2, 0, 2, 5},
    {"1001-byte rows", 1001, 3, 7, 2, 2, 0, 1003, 5, 17, 1, 3, 1019, 11},
    {"one slice", 77, 9, 1, 3, 0, 3, 80, 10, 0, 1, 0, 77, 13},
    {"one row per slice", 333, 1, 40, 1, 0, 0, 335, 1, 5, 3, 0, 339, 4},
    {"big slices", 3000, 300, 8, 5, 2, 1, 3011, 303, 3, 1, 0, 4096, 301},
};

/* Each shape synchronously, then on a stream. */
static void copy_device_shapes(int dims, const shape_t* shapes, size_t count) {
  gpumem_stream_t stream = test_stream_create(0);
  size_t biggest = 0;
  for (size_t i = 0; i < count; i++) {
    const gpumem_copy3d_t c = shape_copy(&shapes[i], dims);
    if (dst_bytes(&c) > biggest) biggest = dst_bytes(&c);
    if (src_bytes(&c) > biggest) biggest = src_bytes(&c);
  }
  images_t im = images_create(biggest);
  for (size_t i = 0; i < count; i++) {
    gpumem_copy3d_t c = shape_copy(&shapes[i], dims);
    object_t dst = memory_create(KIND_DEVICE, dst_bytes(&c));
    object_t src = memory_create(KIND_DEVICE, src_bytes(&c));
    c.dst = dst.ptr;
    c.src = src.ptr;
    check_copy_both_forms(dims, &c, &dst, &src, &im, stream, shapes[i].name);
    object_destroy(&dst);
    object_destroy(&src);
  }
  images_destroy(&im);
  test_stream_destroy(stream);
}

static void test_copy2d_device_shapes(void** state) {
  (void)state;
  require_gpu();
  copy_device_shapes(2, kDeviceShapes2d, sizeof kDeviceShapes2d / sizeof kDeviceShapes2d[0]);
}

static void test_copy3d_device_shapes(void** state) {
  (void)state;
  require_gpu();
  copy_device_shapes(3, kDeviceShapes3d, sizeof kDeviceShapes3d / sizeof kDeviceShapes3d[0]);
}

/* Every x offset from 0 to 15 on each side, independently, for rows of 1, 3, 7 and 1001 bytes with
 * odd pitches: every alignment of source against destination. */
static void test_copy2d_device_every_x_offset(void** state) {
  (void)state;
  require_gpu();
  static const size_t widths[] = {1, 3, 7, 1001};
  gpumem_stream_t stream = test_stream_create(0);
  const size_t size = 5 * ((1001 + 20) | 1) + TAIL;
  object_t dst = memory_create(KIND_DEVICE, size);
  object_t src = memory_create(KIND_DEVICE, size);
  images_t im = images_create(size);
  for (size_t w = 0; w < sizeof widths / sizeof widths[0]; w++) {
    for (size_t src_x = 0; src_x < 16; src_x++) {
      for (size_t dst_x = 0; dst_x < 16; dst_x++) {
        const gpumem_copy3d_t c = copy3d_of(
            (copy_side_t){.ptr = dst.ptr, .x = dst_x, .y = 2, .pitch = (widths[w] + 20) | 1},
            (copy_side_t){.ptr = src.ptr, .x = src_x, .y = 1, .pitch = (widths[w] + 16) | 1}, widths[w], 3, 1);
        assert_true(dst_bytes(&c) <= size && src_bytes(&c) <= size);
        char what[96];
        snprintf(what, sizeof what, "%zu-byte rows, src x %zu, dst x %zu", widths[w], src_x, dst_x);
        check_copy_both_forms(2, &c, &dst, &src, &im, stream, what);
      }
    }
  }
  images_destroy(&im);
  object_destroy(&dst);
  object_destroy(&src);
  test_stream_destroy(stream);
}

/* ---------------------------------------------------------------------------------------------
 * Regions of one buffer: interleaved (allowed) and overlapping (refused) (GPU)
 * ------------------------------------------------------------------------------------------- */

typedef struct {
  int dims;
  shape_t s;
  size_t dst_offset;
  size_t src_offset;
} within_t;

#define WITHIN_BYTES 4096

/* dims, shape (as above), dst and src offsets into the buffer. Their bytes interleave or touch,
 * and none is shared. */
static const within_t kInterleaved[] = {
    {2, {"source rows and destination rows alternate", 37, 20, 0, 37, 0, 0, 74, 0, 0, 0, 0, 74, 0}, 0, 0},
    {2, {"the two halves of each row touch", 7, 30, 0, 8, 0, 0, 17, 0, 1, 0, 0, 17, 0}, 0, 0},
    {2, {"different pitches, dst rows between src rows", 2, 4, 0, 4, 0, 0, 16, 0, 0, 0, 0, 8, 0}, 0, 0},
    {2, {"src ends just before dst starts", 4, 3, 0, 0, 0, 0, 100, 0, 0, 0, 0, 10, 0}, 24, 0},
    {3, {"source slices and destination slices alternate", 16, 4, 5, 0, 4, 0, 16, 8, 0, 0, 0, 16, 8}, 0, 0},
    {3, {"different slice heights, disjoint columns", 5, 2, 3, 5, 0, 0, 10, 3, 0, 0, 0, 10, 4}, 0, 0},
};

/* Each shares at least one byte, some only one. */
static const within_t kOverlapping[] = {
    {2, {"the same region", 32, 4, 0, 0, 0, 0, 64, 0, 0, 0, 0, 64, 0}, 0, 0},
    {2, {"one byte of each row", 8, 4, 0, 7, 0, 0, 32, 0, 0, 0, 0, 32, 0}, 0, 0},
    {2, {"one shared row", 20, 4, 0, 0, 3, 0, 32, 0, 0, 0, 0, 32, 0}, 0, 0},
    {2, {"only the source's last byte, different pitches", 4, 3, 0, 0, 0, 0, 100, 0, 0, 0, 0, 10, 0}, 23, 0},
    {2, {"only the destination's last byte, different pitches", 4, 3, 0, 0, 0, 0, 10, 0, 0, 0, 0, 100, 0}, 0, 23},
    {2, {"different pitches, one row crossing another", 2, 4, 0, 0, 0, 0, 12, 0, 0, 0, 0, 8, 0}, 4, 0},
    {3, {"one shared slice", 16, 4, 2, 0, 0, 1, 16, 4, 0, 0, 0, 16, 4}, 0, 0},
    {3, {"only the source's last byte, 3D", 16, 4, 3, 0, 0, 0, 16, 4, 0, 0, 0, 16, 4}, 191, 0},
};

static gpumem_copy3d_t within_copy(const within_t* w, const object_t* o) {
  gpumem_copy3d_t c = shape_copy(&w->s, w->dims);
  c.dst = o->ptr + w->dst_offset;
  c.src = o->ptr + w->src_offset;
  return c;
}

static void test_copy2d_interleaved_rows_in_one_buffer(void** state) {
  (void)state;
  require_gpu();
  gpumem_stream_t stream = test_stream_create(0);
  images_t im = images_create(WITHIN_BYTES);
  const kind_t kinds[] = {KIND_DEVICE, KIND_PLAIN};
  for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++) {
    object_t o = memory_create(kinds[k], WITHIN_BYTES);
    for (size_t i = 0; i < sizeof kInterleaved / sizeof kInterleaved[0]; i++) {
      const within_t* w = &kInterleaved[i];
      const gpumem_copy3d_t c = within_copy(w, &o);
      /* The fixture itself: no shared byte. */
      assert_false(regions_share_byte(&c, o.ptr, o.size));
      check_copy_within(w->dims, &c, &o, &im, NULL, w->s.name);
      check_copy_within(w->dims, &c, &o, &im, stream, w->s.name);
    }
    object_destroy(&o);
  }
  images_destroy(&im);
  test_stream_destroy(stream);
}

static void test_copy2d_overlapping_regions_refused(void** state) {
  (void)state;
  require_gpu();
  images_t im = images_create(WITHIN_BYTES);
  const kind_t kinds[] = {KIND_DEVICE, KIND_MANAGED, KIND_PINNED, KIND_PLAIN};
  for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++) {
    object_t o = memory_create(kinds[k], WITHIN_BYTES);
    const object_t* objects[] = {&o};
    for (size_t i = 0; i < sizeof kOverlapping / sizeof kOverlapping[0]; i++) {
      const within_t* w = &kOverlapping[i];
      const gpumem_copy3d_t c = within_copy(w, &o);
      assert_true(regions_share_byte(&c, o.ptr, o.size));
      char what[160];
      snprintf(what, sizeof what, "%s in %s memory", w->s.name, object_name(&o));
      check_refused(w->dims, &c, objects, 1, &im, GPUMEM_ERROR_INVALID_ARGUMENT, "overlap", what);
    }
    object_destroy(&o);
  }
  images_destroy(&im);
}

/* Random regions of one buffer, told apart byte by byte: those that share a byte are refused and
 * leave the buffer as it was, the others are copied, however their rows and slices interleave. */
#define EXACT_BYTES 2048
#define EXACT_ROUNDS 600

static size_t rng_below(uint64_t* s, size_t n) {
  *s = *s * 6364136223846793005ull + 1442695040888963407ull;
  return (size_t)(*s >> 33) % n;
}

static void random_side(uint64_t* rng, int dims, size_t width, size_t height, size_t* x, size_t* y, size_t* z,
                        size_t* pitch, size_t* rows) {
  *pitch = width + rng_below(rng, 13);
  *x = rng_below(rng, *pitch - width + 1);
  *rows = height + rng_below(rng, 4);
  *y = rng_below(rng, *rows - height + 1);
  *z = dims == 3 ? rng_below(rng, 2) : 0;
}

/* A random copy between two regions of one buffer (at base), at dst_at and src_at. One round in
 * three puts the two side by side in rows of one pitch, touching or sharing a column, with rows and
 * slices of their own: bytes interleave closely there, and only some rows meet. */
static gpumem_copy3d_t random_copy(uint64_t* rng, int round, unsigned char* base, size_t* dst_at, size_t* src_at) {
  const int dims = 2 + round % 2;
  gpumem_copy3d_t c = GPUMEM_COPY3D_INIT;
  c.width = 1 + rng_below(rng, 24);
  c.height = 1 + rng_below(rng, 5);
  c.depth = dims == 3 ? 1 + rng_below(rng, 3) : 1;
  random_side(rng, dims, c.width, c.height, &c.dst_x, &c.dst_y, &c.dst_z, &c.dst_pitch, &c.dst_height);
  random_side(rng, dims, c.width, c.height, &c.src_x, &c.src_y, &c.src_z, &c.src_pitch, &c.src_height);
  *dst_at = rng_below(rng, 128);
  *src_at = rng_below(rng, 128);
  if (round % 3 == 2) {
    const size_t pitch = 2 * c.width + rng_below(rng, 8);
    c.dst_pitch = pitch;
    c.src_pitch = pitch;
    c.src_x = rng_below(rng, pitch - 2 * c.width + 1);
    c.dst_x = c.src_x + c.width - rng_below(rng, 2);
    if (rng_below(rng, 2)) {
      const size_t x = c.dst_x;
      c.dst_x = c.src_x;
      c.src_x = x;
    }
    *dst_at = *src_at;
  }
  c.dst = base + *dst_at;
  c.src = base + *src_at;
  return c;
}

/* Whether the spans from each region's first byte to its last meet. */
static bool spans_meet(const gpumem_copy3d_t* c, const unsigned char* base) {
  const layout_t dl = memory_dst_layout(c);
  const layout_t sl = memory_src_layout(c);
  const size_t dst_at = (size_t)((const unsigned char*)c->dst - base);
  const size_t src_at = (size_t)((const unsigned char*)c->src - base);
  const size_t dst_first = dst_at + row_offset(dl, c->dst_x, c->dst_y, c->dst_z, 0, 0);
  const size_t dst_end = dst_at + region_end(dl, c->dst_x, c->dst_y, c->dst_z, c);
  const size_t src_first = src_at + row_offset(sl, c->src_x, c->src_y, c->src_z, 0, 0);
  const size_t src_end = src_at + region_end(sl, c->src_x, c->src_y, c->src_z, c);
  return dst_first < src_end && src_first < dst_end;
}

static void test_copy2d_overlap_is_exact(void** state) {
  (void)state;
  require_gpu();
  gpumem_stream_t stream = test_stream_create(0);
  object_t o = memory_create(KIND_DEVICE, EXACT_BYTES);
  const object_t* objects[] = {&o};
  images_t im = images_create(EXACT_BYTES);
  uint64_t rng = 12345;
  int shared = 0, apart = 0, interleaved = 0;
  for (int round = 0; round < EXACT_ROUNDS; round++) {
    const int dims = 2 + round % 2;
    size_t dst_at = 0, src_at = 0;
    const gpumem_copy3d_t c = random_copy(&rng, round, o.ptr, &dst_at, &src_at);
    char what[256];
    snprintf(what, sizeof what,
             "round %d: %zu x %zu x %zu, dst at %zu (x %zu y %zu z %zu pitch %zu rows %zu), "
             "src at %zu (x %zu y %zu z %zu pitch %zu rows %zu)",
             round, c.width, c.height, c.depth, dst_at, c.dst_x, c.dst_y, c.dst_z, c.dst_pitch, c.dst_height, src_at,
             c.src_x, c.src_y, c.src_z, c.src_pitch, c.src_height);
    if (regions_share_byte(&c, o.ptr, o.size)) {
      shared++;
      check_refused(dims, &c, objects, 1, &im, GPUMEM_ERROR_INVALID_ARGUMENT, "overlap", what);
    } else {
      apart++;
      if (spans_meet(&c, o.ptr)) interleaved++;
      check_copy_within(dims, &c, &o, &im, round % 4 < 2 ? NULL : stream, what);
    }
  }
  /* Each outcome came up often enough to mean something. */
  print_message("%d shared a byte, %d did not (%d of them interleaved)\n", shared, apart, interleaved);
  assert_true(shared >= EXACT_ROUNDS / 5);
  assert_true(apart >= EXACT_ROUNDS / 5);
  assert_true(interleaved >= EXACT_ROUNDS / 10);
  images_destroy(&im);
  object_destroy(&o);
  test_stream_destroy(stream);
}

/* ---------------------------------------------------------------------------------------------
 * Memory past the end of its allocation, and regions that wrap (GPU)
 * ------------------------------------------------------------------------------------------- */

/* A multiple of the driver's 2 MiB allocation granularity, so the allocation ends exactly there. */
#define EDGE_ALLOCATION ((size_t)2 << 20)
#define EDGE_OTHER ((size_t)64 << 10)

/* The last row reaches the end of the allocation, and its pitch would reach past it. Fields as in
 * kPairShape. */
static const shape_t kEdgeShape2d = {
    "2D region at the end of an allocation", 1000, 5, 0, 24, 0, 0, 4096, 0, 24, 0, 0, 4096, 0};

static const shape_t kEdgeShape3d = {
    "3D region at the end of an allocation", 100, 4, 3, 8, 1, 0, 512, 6, 8, 1, 0, 512, 6};

static void test_copy2d_past_end_of_allocation_refused(void** state) {
  (void)state;
  require_gpu();
  images_t im = images_create(EDGE_ALLOCATION);
  object_t other = memory_create(KIND_PLAIN, EDGE_OTHER);
  const kind_t kinds[] = {KIND_DEVICE, KIND_MANAGED};
  for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++) {
    object_t edge = memory_create(kinds[k], EDGE_ALLOCATION);
    const object_t* objects[] = {&edge, &other};
    unsigned char* const end = edge.ptr + EDGE_ALLOCATION;
    for (int d = 0; d < DIMS_COUNT; d++) {
      const int dims = kDims[d];
      const shape_t* s = dims == 2 ? &kEdgeShape2d : &kEdgeShape3d;
      gpumem_copy3d_t c = shape_copy(s, dims);
      const size_t length = region_end(memory_dst_layout(&c), c.dst_x, c.dst_y, c.dst_z, &c);
      assert_true(length <= EDGE_OTHER);
      char what[160];

      /* The destination, then the source, one byte past the end, then exactly at it. */
      for (int side = 0; side < 2; side++) {
        const char* const role = side == DST ? "destination" : "source";
        set_side(&c, 1 - side, other.ptr, NULL);
        set_side(&c, side, end - length + 1, NULL);
        snprintf(what, sizeof what, "%s, %s %s one byte past", s->name, object_name(&edge), role);
        check_refused(dims, &c, objects, 2, &im, GPUMEM_ERROR_INVALID_POINTER, "past the end of its allocation", what);
        set_side(&c, side, end - length, NULL);
        snprintf(what, sizeof what, "%s, %s %s", s->name, object_name(&edge), role);
        check_copy(dims, &c, side == DST ? &edge : &other, side == DST ? &other : &edge, &im, NULL, what);
      }

      /* A whole row (2D) or slice (3D) past. */
      c.dst = end - length;
      c.src = other.ptr;
      if (dims == 2)
        c.dst_y = 1;
      else
        c.dst_z = 1;
      snprintf(what, sizeof what, "%s, %s destination a row or slice past", s->name, object_name(&edge));
      check_refused(dims, &c, objects, 2, &im, GPUMEM_ERROR_INVALID_POINTER, "past the end of its allocation", what);
    }
    object_destroy(&edge);
  }
  object_destroy(&other);
  images_destroy(&im);
}

static void test_copy2d_wrapping_region_refused(void** state) {
  (void)state;
  require_gpu();
  images_t im = images_create(HOST_BYTES);
  object_t dst = memory_create(KIND_PLAIN, HOST_BYTES);
  object_t src = memory_create(KIND_PLAIN, HOST_BYTES);
  const object_t* objects[] = {&dst, &src};
  for (int d = 0; d < DIMS_COUNT; d++) {
    const int dims = kDims[d];
    const gpumem_copy3d_t rows =
        copy3d_of((copy_side_t){.ptr = dst.ptr, .pitch = 64}, (copy_side_t){.ptr = src.ptr, .pitch = 64}, 32, 2, 1);
    for (int side = 0; side < 2; side++) {
      char what[64];
      gpumem_copy3d_t c = rows;
      set_side(&c, side, WRAPPING_ADDRESS, NULL);
      snprintf(what, sizeof what, "%s rows wrapping around", kSideNames[side]);
      check_refused(dims, &c, objects, 2, &im, GPUMEM_ERROR_INVALID_ARGUMENT, "wraps", what);
      /* pitch x rows overflows before any address is added. */
      c = rows;
      c.height = 3;
      *bound_limit(&c, &kBounds[ROW_IN_PITCH], side) = SIZE_MAX / 2 + 1;
      snprintf(what, sizeof what, "%s pitch x height overflowing", kSideNames[side]);
      check_refused(dims, &c, objects, 2, &im, GPUMEM_ERROR_INVALID_ARGUMENT, "wraps", what);
    }
  }
  /* pitch x rows per slice x slices overflows. */
  const gpumem_copy3d_t slices =
      copy3d_of((copy_side_t){.ptr = dst.ptr, .pitch = 64}, (copy_side_t){.ptr = src.ptr, .pitch = 64}, 32, 1, 2);
  for (int side = 0; side < 2; side++) {
    char what[64];
    gpumem_copy3d_t c = slices;
    *bound_limit(&c, &kBounds[ROWS_IN_SLICE], side) = SIZE_MAX / 32;
    snprintf(what, sizeof what, "%s slices overflowing", kSideNames[side]);
    check_refused(3, &c, objects, 2, &im, GPUMEM_ERROR_INVALID_ARGUMENT, "wraps", what);
  }
  object_destroy(&dst);
  object_destroy(&src);
  images_destroy(&im);
}

/* ---------------------------------------------------------------------------------------------
 * CUDA arrays (GPU)
 * ------------------------------------------------------------------------------------------- */

static const int32_t kFormats[] = {GPUMEM_FORMAT_U8,  GPUMEM_FORMAT_U16, GPUMEM_FORMAT_U32, GPUMEM_FORMAT_I8,
                                   GPUMEM_FORMAT_I16, GPUMEM_FORMAT_I32, GPUMEM_FORMAT_F16, GPUMEM_FORMAT_F32};
static const char* const kFormatNames[] = {"U8", "U16", "U32", "I8", "I16", "I32", "F16", "F32"};
static const uint32_t kChannels[] = {1, 2, 4};

#define ARRAY_IMAGES ((size_t)256 << 10)

/* Device memory into a sub-region of a 2D array of each format, and a sub-region of the array
 * (ending at its last element) back into device memory; synchronous and on a stream. Floats are
 * bytes here: NaN and denormal patterns must come back unchanged. */
static void test_copy2d_array_every_format(void** state) {
  (void)state;
  require_gpu();
  gpumem_stream_t stream = test_stream_create(0);
  images_t im = images_create(ARRAY_IMAGES);
  for (size_t f = 0; f < sizeof kFormats / sizeof kFormats[0]; f++) {
    for (size_t ch = 0; ch < sizeof kChannels / sizeof kChannels[0]; ch++) {
      object_t a = array_create(kFormats[f], kChannels[ch], 37, 11, 0);
      const size_t e = a.elem;
      const size_t pitch = 41 * e + 3;
      object_t dev_src = memory_create(KIND_DEVICE, pitch * 12 + TAIL);
      object_t dev_dst = memory_create(KIND_DEVICE, pitch * 12 + TAIL);
      char what[96];
      snprintf(what, sizeof what, "%s x %u", kFormatNames[f], (unsigned)kChannels[ch]);
      for (int form = 0; form < 2; form++) {
        gpumem_stream_t s = form ? stream : NULL;
        /* A pitch of 1 on the array sides: ignored there. */
        const gpumem_copy3d_t in =
            copy3d_of((copy_side_t){.array = a.array, .x = 3 * e, .y = 2, .pitch = 1},
                      (copy_side_t){.ptr = dev_src.ptr, .x = 5, .y = 1, .pitch = pitch}, 20 * e, 5, 1);
        check_copy(2, &in, &a, &dev_src, &im, s, what);
        const gpumem_copy3d_t out =
            copy3d_of((copy_side_t){.ptr = dev_dst.ptr, .x = 7, .y = 3, .pitch = pitch},
                      (copy_side_t){.array = a.array, .x = 10 * e, .y = 4, .pitch = 1}, 27 * e, 7, 1);
        check_copy(2, &out, &dev_dst, &a, &im, s, what);
      }
      object_destroy(&dev_src);
      object_destroy(&dev_dst);
      object_destroy(&a);
    }
  }
  images_destroy(&im);
  test_stream_destroy(stream);
}

/* A 1D array has one row: the 2D and the 3D forms with offsets into it. */
static void test_copy2d_array_1d(void** state) {
  (void)state;
  require_gpu();
  gpumem_stream_t stream = test_stream_create(0);
  images_t im = images_create(ARRAY_IMAGES);
  object_t a = array_create(GPUMEM_FORMAT_U16, 2, 100, 0, 0);
  const size_t e = a.elem;
  object_t dev = memory_create(KIND_DEVICE, 100 * e + 64);
  object_t pinned = memory_create(KIND_PINNED, 100 * e + 64);
  for (int d = 0; d < DIMS_COUNT; d++) {
    const int dims = kDims[d];
    gpumem_copy3d_t c = copy3d_of((copy_side_t){.array = a.array, .x = 7 * e},
                                  (copy_side_t){.ptr = dev.ptr, .x = 3, .pitch = 3 + 50 * e}, 50 * e, 1, 1);
    check_copy_both_forms(dims, &c, &a, &dev, &im, stream, "device memory into a 1D array");

    /* To the last element. */
    c = copy3d_of((copy_side_t){.ptr = pinned.ptr, .x = 5, .pitch = 5 + 40 * e},
                  (copy_side_t){.array = a.array, .x = 60 * e}, 40 * e, 1, 1);
    check_copy_both_forms(dims, &c, &pinned, &a, &im, stream, "the end of a 1D array into pinned memory");
  }
  object_destroy(&dev);
  object_destroy(&pinned);
  object_destroy(&a);
  images_destroy(&im);
  test_stream_destroy(stream);
}

/* A 3D array: boxes with offsets in x, y and z both ways; and the 2D form, which reaches its first
 * slice only. */
static void test_copy3d_array_3d(void** state) {
  (void)state;
  require_gpu();
  gpumem_stream_t stream = test_stream_create(0);
  images_t im = images_create(ARRAY_IMAGES);
  object_t a = array_create(GPUMEM_FORMAT_F16, 4, 9, 7, 5);
  const size_t e = a.elem;
  gpumem_copy3d_t in = copy3d_of((copy_side_t){.array = a.array, .x = 2 * e, .y = 1, .z = 1},
                                 (copy_side_t){.x = 3, .y = 1, .z = 1, .pitch = 9 * e + 5, .rows = 9}, 5 * e, 4, 3);
  object_t dev = memory_create(KIND_DEVICE, src_bytes(&in));
  in.src = dev.ptr;
  check_copy_both_forms(3, &in, &a, &dev, &im, stream, "device memory into a box of a 3D array");

  /* A box ending at the array's last element, into pinned memory. */
  gpumem_copy3d_t out = copy3d_of((copy_side_t){.x = 9, .y = 1, .z = 1, .pitch = 5 * e + 13, .rows = 6},
                                  (copy_side_t){.array = a.array, .x = 4 * e, .y = 3, .z = 2}, 5 * e, 4, 3);
  object_t pinned = memory_create(KIND_PINNED, dst_bytes(&out));
  out.dst = pinned.ptr;
  check_copy_both_forms(3, &out, &pinned, &a, &im, stream, "a box of a 3D array into pinned memory");

  /* The 2D form: rows of slice 0; the other slices keep their poison. */
  const gpumem_copy3d_t first = copy3d_of((copy_side_t){.array = a.array, .y = 3},
                                          (copy_side_t){.ptr = dev.ptr, .x = 1, .pitch = 9 * e + 1}, 9 * e, 2, 1);
  check_copy_both_forms(2, &first, &a, &dev, &im, stream, "device memory into the first slice of a 3D array");
  const gpumem_copy3d_t back = copy3d_of((copy_side_t){.ptr = dev.ptr, .x = 4, .pitch = 8 * e + 4},
                                         (copy_side_t){.array = a.array, .x = e, .y = 2}, 8 * e, 5, 1);
  check_copy_both_forms(2, &back, &dev, &a, &im, stream, "the first slice of a 3D array into device memory");

  object_destroy(&dev);
  object_destroy(&pinned);
  object_destroy(&a);
  images_destroy(&im);
  test_stream_destroy(stream);
}

static void test_copy2d_array_to_array(void** state) {
  (void)state;
  require_gpu();
  gpumem_stream_t stream = test_stream_create(0);
  images_t im = images_create(ARRAY_IMAGES);

  object_t a = array_create(GPUMEM_FORMAT_U32, 1, 20, 10, 0);
  object_t b = array_create(GPUMEM_FORMAT_U32, 1, 16, 12, 0);
  const size_t e = a.elem;
  const gpumem_copy3d_t c = copy3d_of((copy_side_t){.array = b.array, .x = 5 * e, .y = 1},
                                      (copy_side_t){.array = a.array, .x = 2 * e, .y = 3}, 9 * e, 4, 1);
  for (int d = 0; d < DIMS_COUNT; d++) {
    check_copy_both_forms(kDims[d], &c, &b, &a, &im, stream, "2D array to 2D array");
  }

  /* Boxes of one array that share no element: apart, and touching. */
  const copy_side_t corner = {.array = a.array};
  const gpumem_copy3d_t apart = copy3d_of((copy_side_t){.array = a.array, .x = 10 * e, .y = 5}, corner, 5 * e, 4, 1);
  check_copy_within(2, &apart, &a, &im, NULL, "boxes of one 2D array, apart");
  const gpumem_copy3d_t touching = copy3d_of((copy_side_t){.array = a.array, .x = 5 * e}, corner, 5 * e, 4, 1);
  check_copy_within(2, &touching, &a, &im, stream, "boxes of one 2D array, touching");

  object_t p = array_create(GPUMEM_FORMAT_F32, 2, 6, 5, 4);
  object_t q = array_create(GPUMEM_FORMAT_F32, 2, 7, 6, 3);
  const size_t e3 = p.elem;
  const gpumem_copy3d_t c3 = copy3d_of((copy_side_t){.array = q.array, .x = 2 * e3, .y = 2},
                                       (copy_side_t){.array = p.array, .x = e3, .y = 1, .z = 1}, 5 * e3, 4, 3);
  check_copy_both_forms(3, &c3, &q, &p, &im, stream, "3D array to 3D array");
  /* Slices 0-1 to slices 2-3 of one array. */
  const gpumem_copy3d_t slices =
      copy3d_of((copy_side_t){.array = p.array, .z = 2}, (copy_side_t){.array = p.array}, 6 * e3, 5, 2);
  check_copy_within(3, &slices, &p, &im, NULL, "slices of one 3D array");

  /* A 2D array into the first slice of a 3D one, in the 2D form. */
  object_t r = array_create(GPUMEM_FORMAT_F32, 2, 6, 5, 0);
  const gpumem_copy3d_t c2 = copy3d_of((copy_side_t){.array = q.array, .x = e3, .y = 2},
                                       (copy_side_t){.array = r.array, .y = 1}, 6 * e3, 4, 1);
  check_copy(2, &c2, &q, &r, &im, NULL, "2D array into the first slice of a 3D array");

  object_destroy(&a);
  object_destroy(&b);
  object_destroy(&p);
  object_destroy(&q);
  object_destroy(&r);
  images_destroy(&im);
  test_stream_destroy(stream);
}

static void test_copy2d_array_pinned_host(void** state) {
  (void)state;
  require_gpu();
  gpumem_stream_t stream = test_stream_create(0);
  images_t im = images_create(ARRAY_IMAGES);
  object_t a = array_create(GPUMEM_FORMAT_I8, 2, 33, 9, 0);
  const size_t e = a.elem;
  object_t in = memory_create(KIND_PINNED, 101 * 9 + TAIL);
  object_t out = memory_create(KIND_PINNED, 77 * 6 + TAIL);
  for (int d = 0; d < DIMS_COUNT; d++) {
    const int dims = kDims[d];
    gpumem_copy3d_t c = copy3d_of((copy_side_t){.array = a.array, .x = 4 * e, .y = 1},
                                  (copy_side_t){.ptr = in.ptr, .x = 7, .y = 2, .pitch = 101, .rows = 9}, 20 * e, 6, 1);
    check_copy_both_forms(dims, &c, &a, &in, &im, stream, "pinned memory into an array");

    /* Whole rows, down to the last one. */
    c = copy3d_of((copy_side_t){.ptr = out.ptr, .x = 9, .pitch = 77}, (copy_side_t){.array = a.array, .y = 3}, 33 * e,
                  6, 1);
    check_copy_both_forms(dims, &c, &out, &a, &im, stream, "an array into pinned memory");
  }
  object_destroy(&in);
  object_destroy(&out);
  object_destroy(&a);
  images_destroy(&im);
  test_stream_destroy(stream);
}

/* Check 6: x and width in whole elements, the region inside the array; nothing written otherwise. */
typedef struct {
  const char* name;
  int dims;
  int array; /* 1: the 1D array, 2: the 2D one, 3: the 3D one */
  bool array_is_dst;
  size_t x, y, z, width, height, depth;
  const char* detail;
} array_bad_t;

static const array_bad_t kArrayBad[] = {
    /* 4-byte elements everywhere. */
    {"x of 1 byte", 2, 2, true, 1, 0, 0, 8, 1, 1, "whole elements"},
    {"x of 6 bytes", 2, 2, true, 6, 0, 0, 8, 1, 1, "whole elements"},
    {"width of 2.5 elements", 2, 2, true, 0, 0, 0, 10, 2, 1, "whole elements"},
    {"src x of 2 bytes", 2, 2, false, 2, 0, 0, 8, 1, 1, "whole elements"},
    {"src width of 1 byte", 2, 2, false, 0, 0, 0, 1, 1, 1, "whole elements"},
    {"3D array, width of 1.5 elements", 3, 3, true, 4, 0, 0, 6, 1, 1, "whole elements"},
    {"x + width one element past the row", 2, 2, true, 13 * 4, 0, 0, 4 * 4, 1, 1, "past the end of"},
    {"y + height one row past", 2, 2, true, 0, 5, 0, 4, 4, 1, "past the end of"},
    {"src width one element more than the row", 2, 2, false, 0, 0, 0, 17 * 4, 1, 1, "past the end of"},
    {"x + width overflowing", 2, 2, true, SIZE_MAX - 3, 0, 0, 8, 1, 1, "past the end of"},
    {"y + height overflowing", 2, 2, true, 0, SIZE_MAX, 0, 4, 2, 1, "past the end of"},
    {"2 slices of a 2D array", 3, 2, true, 0, 0, 0, 4, 1, 2, "past the end of"},
    {"slice 1 of a 2D array", 3, 2, false, 0, 0, 1, 4, 1, 1, "past the end of"},
    {"2 rows of a 1D array", 2, 1, true, 0, 0, 0, 4, 2, 1, "past the end of"},
    {"row 1 of a 1D array", 2, 1, false, 0, 1, 0, 4, 1, 1, "past the end of"},
    {"2 slices of a 1D array", 3, 1, true, 0, 0, 0, 4, 1, 2, "past the end of"},
    {"z + depth one slice past", 3, 3, true, 0, 0, 2, 4, 1, 3, "past the end of"},
    {"2D form, rows past the first slice", 2, 3, false, 0, 3, 0, 4, 3, 1, "past the end of"},
};

static void test_copy2d_array_bad_region_refused(void** state) {
  (void)state;
  require_gpu();
  images_t im = images_create(ARRAY_IMAGES);
  object_t arrays[4];
  arrays[1] = array_create(GPUMEM_FORMAT_F32, 1, 32, 0, 0);
  arrays[2] = array_create(GPUMEM_FORMAT_U32, 1, 16, 8, 0);
  arrays[3] = array_create(GPUMEM_FORMAT_U16, 2, 6, 5, 4);
  object_t mem = memory_create(KIND_DEVICE, 4096);
  for (size_t i = 0; i < sizeof kArrayBad / sizeof kArrayBad[0]; i++) {
    const array_bad_t* b = &kArrayBad[i];
    const object_t* a = &arrays[b->array];
    const object_t* objects[] = {a, &mem};
    const copy_side_t array = {.array = a->array, .x = b->x, .y = b->y, .z = b->z};
    const copy_side_t memory = {.ptr = mem.ptr, .pitch = 128};
    const gpumem_copy3d_t c = b->array_is_dst ? copy3d_of(array, memory, b->width, b->height, b->depth)
                                              : copy3d_of(memory, array, b->width, b->height, b->depth);
    check_refused(b->dims, &c, objects, 2, &im, GPUMEM_ERROR_INVALID_ARGUMENT, b->detail, b->name);
  }
  /* An empty extent comes first (check 5): partial elements with width 0 succeed, writing nothing. */
  const gpumem_copy3d_t c =
      copy3d_of((copy_side_t){.array = arrays[2].array, .x = 1}, (copy_side_t){.ptr = mem.ptr, .pitch = 128}, 0, 1, 1);
  const object_t* objects[] = {&arrays[2], &mem};
  for (int d = 0; d < DIMS_COUNT; d++)
    check_refused(kDims[d], &c, objects, 2, &im, GPUMEM_SUCCESS, NULL, "x of 1 byte, width 0");
  for (int k = 1; k <= 3; k++) object_destroy(&arrays[k]);
  object_destroy(&mem);
  images_destroy(&im);
}

/* Boxes of one array that share an element. */
static void test_copy2d_array_overlap_refused(void** state) {
  (void)state;
  require_gpu();
  images_t im = images_create(ARRAY_IMAGES);
  object_t a = array_create(GPUMEM_FORMAT_U32, 1, 20, 10, 0);
  const object_t* objects2[] = {&a};
  gpumem_copy3d_t c = copy3d_of((copy_side_t){.array = a.array, .x = 4 * a.elem, .y = 3},
                                (copy_side_t){.array = a.array}, 5 * a.elem, 4, 1);
  for (int d = 0; d < DIMS_COUNT; d++)
    check_refused(kDims[d], &c, objects2, 1, &im, GPUMEM_ERROR_INVALID_ARGUMENT, "overlap",
                  "boxes of one 2D array sharing one element");
  c.dst_x = 0;
  c.dst_y = 0;
  check_refused(2, &c, objects2, 1, &im, GPUMEM_ERROR_INVALID_ARGUMENT, "overlap", "a box of an array onto itself");

  object_t p = array_create(GPUMEM_FORMAT_U16, 2, 6, 5, 4);
  const object_t* objects3[] = {&p};
  const gpumem_copy3d_t c3 =
      copy3d_of((copy_side_t){.array = p.array, .z = 1}, (copy_side_t){.array = p.array}, 6 * p.elem, 5, 2);
  check_refused(3, &c3, objects3, 1, &im, GPUMEM_ERROR_INVALID_ARGUMENT, "overlap",
                "slices 0-1 onto slices 1-2 of one 3D array");
  object_destroy(&a);
  object_destroy(&p);
  images_destroy(&im);
}

/* Check 4 with a real handle: once destroyed it is refused on either side, memory left as it was. */
static void test_copy2d_destroyed_array_refused(void** state) {
  (void)state;
  require_gpu();
  images_t im = images_create(ARRAY_IMAGES);
  object_t a = array_create(GPUMEM_FORMAT_U32, 1, 16, 8, 0);
  gpumem_array_t* dead = a.array;
  assert_ok(gpumem_array_destroy(dead));
  object_t mem = memory_create(KIND_DEVICE, 4096);
  const object_t* objects[] = {&mem};
  for (int d = 0; d < DIMS_COUNT; d++) {
    const int dims = kDims[d];
    const copy_side_t dead_side = {.array = dead};
    const copy_side_t memory = {.ptr = mem.ptr, .pitch = 64};
    gpumem_copy3d_t c = copy3d_of(dead_side, memory, 64, 8, 1);
    check_refused(dims, &c, objects, 1, &im, GPUMEM_ERROR_INVALID_HANDLE, "not a live gpumem array",
                  "a destroyed dst array");
    c.width = 0;
    check_refused(dims, &c, objects, 1, &im, GPUMEM_ERROR_INVALID_HANDLE, "not a live gpumem array",
                  "a destroyed dst array, width 0");
    c = copy3d_of(memory, dead_side, 64, 8, 1);
    check_refused(dims, &c, objects, 1, &im, GPUMEM_ERROR_INVALID_HANDLE, "not a live gpumem array",
                  "a destroyed src array");
  }
  object_destroy(&mem);
  images_destroy(&im);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_copy2d_init_null_refused),
      cmocka_unit_test(test_copy2d_init_small_struct_size_refused),
      cmocka_unit_test(test_copy2d_init_fills_defaults),
      cmocka_unit_test(test_copy2d_null_copy_refused),
      cmocka_unit_test(test_copy2d_small_struct_size_refused),
      cmocka_unit_test(test_copy2d_larger_struct_size_accepted),
      cmocka_unit_test(test_copy2d_both_pointer_and_array_refused),
      cmocka_unit_test(test_copy2d_neither_pointer_nor_array_refused),
      cmocka_unit_test(test_copy2d_row_past_pitch_refused),
      cmocka_unit_test(test_copy3d_rows_past_slice_height_refused),
      cmocka_unit_test(test_copy2d_dead_array_refused),
      cmocka_unit_test(test_copy2d_empty_extent_writes_nothing),
      cmocka_unit_test(test_copy2d_every_pair_of_kinds),
      cmocka_unit_test(test_copy2d_async_every_pair_of_kinds),
      cmocka_unit_test(test_copy3d_every_pair_of_kinds),
      cmocka_unit_test(test_copy3d_async_every_pair_of_kinds),
      cmocka_unit_test(test_copy2d_device_shapes),
      cmocka_unit_test(test_copy3d_device_shapes),
      cmocka_unit_test(test_copy2d_device_every_x_offset),
      cmocka_unit_test(test_copy2d_interleaved_rows_in_one_buffer),
      cmocka_unit_test(test_copy2d_overlapping_regions_refused),
      cmocka_unit_test(test_copy2d_overlap_is_exact),
      cmocka_unit_test(test_copy2d_past_end_of_allocation_refused),
      cmocka_unit_test(test_copy2d_wrapping_region_refused),
      cmocka_unit_test(test_copy2d_array_every_format),
      cmocka_unit_test(test_copy2d_array_1d),
      cmocka_unit_test(test_copy3d_array_3d),
      cmocka_unit_test(test_copy2d_array_to_array),
      cmocka_unit_test(test_copy2d_array_pinned_host),
      cmocka_unit_test(test_copy2d_array_bad_region_refused),
      cmocka_unit_test(test_copy2d_array_overlap_refused),
      cmocka_unit_test(test_copy2d_destroyed_array_refused),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
