/* (Over 500 lines: the 1D, pinned, capture and 2D/3D edges share one set of byte-exact helpers.)
 * Edges of the staging of copies between device memory and plain (pageable) host memory: sizes on
 * either side of the 1 MiB threshold, of the chunk size's growth past 512 KiB, of a buffer and of a
 * whole set, both directions, synchronous and on a stream, host pointers at odd offsets; host ranges
 * partly pinned (gpumem_pin) and partly pageable; a stream capture (a synchronous staged copy
 * refused and the capture kept; a pageable stream copy ending as the driver's own does); and 2D and
 * 3D copies with pageable host memory, whose bytes must be exact whichever path copies them, and
 * whose staging (memory held after a release and one copy) has tests of its own. Device memory is
 * written and read only through pinned memory, which is never staged, so a fault of the staged path
 * cannot hide itself. Many threads at once: test_threads_copy_staging_edges.c. */
#define _POSIX_C_SOURCE 200809L

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>

#include "test_bytes.h"
#include "test_cuda.h"
#include "test_staging.h"

#define KIB ((size_t)1 << 10)
#define MIB ((size_t)1 << 20)

/* ---------------------------------------------------------------------------------------------
 * Helpers
 * ------------------------------------------------------------------------------------------- */

static void release_staging(void) {
  assert_ok(gpumem_copy_staging_release());
  assert_int_equal(staging_held(), 0);
}

/* After a release and one copy: staged (staging memory held, within the limit) or not (none). */
static void expect_staged(bool staged, const char* what) {
  const size_t held = staging_held();
  if (staged ? held == 0 || held > GPUMEM_COPY_STAGING_LIMIT : held != 0) {
    print_error("after a release and a %s: %zu bytes of staging memory held, expected %s\n", what, held,
                staged ? "more than 0 (a staged copy)" : "0 (a copy by the driver)");
    fail();
  }
}

static const char* mode_name(gpumem_stream_t stream) { return stream ? "stream" : "synchronous"; }

/* The device region starts this far into its buffer, which extends this far past it; plain host
 * regions have this much poison before and after them. */
#define DEV_OFFSET 5
#define DEV_MARGIN 64
#define HOST_MARGIN 64

/* n bytes at block + at (host memory of any kind) to device memory: the whole device buffer is
 * checked, and the whole host block left as it was. */
static void check_h2d(unsigned char* block, size_t block_n, size_t at, size_t n, gpumem_stream_t stream, unsigned seed,
                      const char* what) {
  const size_t dn = DEV_OFFSET + n + DEV_MARGIN;
  unsigned char* dev = device_alloc(dn);
  unsigned char* expected = checked_malloc(dn > block_n ? dn : block_n);
  unsigned char* got = checked_malloc(dn);
  fill_pattern(block, block_n, seed);
  fill_pattern(expected, dn, seed + 1);
  /* Each byte of the region differs from what is to arrive, so every byte must be written. */
  for (size_t i = 0; i < n; i++) expected[DEV_OFFSET + i] = (unsigned char)~block[at + i];
  device_write(dev, expected, dn);

  copy_1d(dev + DEV_OFFSET, block + at, n, stream, what);

  memcpy(expected + DEV_OFFSET, block + at, n);
  device_read(got, dev, dn);
  expect_bytes(got, expected, dn, what);
  fill_pattern(expected, block_n, seed);
  expect_bytes(block, expected, block_n, "the host source after the copy");
  free(expected);
  free(got);
  assert_ok(gpumem_device_free(dev));
}

/* Device memory to n bytes at block + at: the whole host block is checked, and the device source. */
static void check_d2h(unsigned char* block, size_t block_n, size_t at, size_t n, gpumem_stream_t stream, unsigned seed,
                      const char* what) {
  const size_t dn = DEV_OFFSET + n + DEV_MARGIN;
  unsigned char* dev = device_alloc(dn);
  unsigned char* source = checked_malloc(dn);
  unsigned char* expected = checked_malloc(dn > block_n ? dn : block_n);
  fill_pattern(source, dn, seed);
  device_write(dev, source, dn);
  fill_pattern(block, block_n, seed + 1);
  for (size_t i = 0; i < n; i++) block[at + i] = (unsigned char)~source[DEV_OFFSET + i];
  memcpy(expected, block, block_n);

  copy_1d(block + at, dev + DEV_OFFSET, n, stream, what);

  memcpy(expected + at, source + DEV_OFFSET, n);
  expect_bytes(block, expected, block_n, what);
  device_read(expected, dev, dn);
  expect_bytes(expected, source, dn, "the device source after the copy");
  free(source);
  free(expected);
  assert_ok(gpumem_device_free(dev));
}

/* Between device memory and plain host memory at malloc + HOST_MARGIN + offset, one direction. */
static void check_pageable(size_t n, size_t offset, bool to_device, gpumem_stream_t stream, unsigned seed) {
  const size_t block_n = HOST_MARGIN + offset + n + HOST_MARGIN;
  unsigned char* block = checked_malloc(block_n);
  char what[160];
  snprintf(what, sizeof what, "%s copy of %zu bytes %s plain host memory (malloc + %zu)", mode_name(stream), n,
           to_device ? "to device memory from" : "from device memory to", HOST_MARGIN + offset);
  (to_device ? check_h2d : check_d2h)(block, block_n, HOST_MARGIN + offset, n, stream, seed, what);
  free(block);
}

/* ---------------------------------------------------------------------------------------------
 * 1D sizes at the edges (GPU)
 * ------------------------------------------------------------------------------------------- */

/* The threshold; where the chunk size (a quarter, rounded up to 64 KiB) starts growing past 512
 * KiB; one buffer; one whole set (4 chunks of 4 MiB) and one byte more; past it by one host piece. */
/* clang-format off */
static const size_t kEdgeSizes[] = {
    MIB - 1, MIB, MIB + 1, 2 * MIB - 1, 2 * MIB, 2 * MIB + 1, 4 * MIB - 1, 4 * MIB, 4 * MIB + 1,
    16 * MIB - 1, 16 * MIB, 16 * MIB + 1, 16 * MIB + 128 * KIB + 1,
};
/* clang-format on */
#define EDGE_COUNT (sizeof kEdgeSizes / sizeof kEdgeSizes[0])

/* Every size in both directions; the host offsets run through 1, 3, 5 and 7. */
static void every_edge_size(gpumem_stream_t stream, unsigned seed) {
  for (size_t i = 0; i < EDGE_COUNT; i++) {
    check_pageable(kEdgeSizes[i], 1 + 2 * (i % 4), true, stream, seed + 4 * (unsigned)i);
    check_pageable(kEdgeSizes[i], 1 + 2 * ((i + 1) % 4), false, stream, seed + 4 * (unsigned)i + 2);
  }
}

static void test_copy_staging_edges_sizes_sync(void** state) {
  (void)state;
  require_gpu();
  every_edge_size(NULL, 100);
}

static void test_copy_staging_edges_sizes_async(void** state) {
  (void)state;
  require_gpu();
  gpumem_stream_t stream = test_stream_create(0);
  every_edge_size(stream, 200);
  test_stream_destroy(stream);
}

/* After a release, a copy of 1 MiB - 1 leaves nothing held and one of 1 MiB leaves buffers held: the
 * threshold is where it is said to be, in both directions, synchronous and on a stream. */
static void test_copy_staging_edges_threshold_is_1mib(void** state) {
  (void)state;
  require_gpu();
  gpumem_stream_t stream = test_stream_create(0);
  unsigned seed = 300;
  for (int k = 0; k < 4; k++) {
    const bool to_device = k & 1;
    gpumem_stream_t s = k & 2 ? stream : NULL;
    for (size_t n = MIB - 1; n <= MIB; n++, seed += 2) {
      char what[120];
      snprintf(what, sizeof what, "%s copy of %zu bytes %s plain host memory", mode_name(s), n,
               to_device ? "from" : "to");
      release_staging();
      check_pageable(n, 3, to_device, s, seed);
      expect_staged(n >= MIB, what);
    }
  }
  test_stream_destroy(stream);
}

/* ---------------------------------------------------------------------------------------------
 * Host ranges partly pinned, partly pageable (GPU)
 * ------------------------------------------------------------------------------------------- */

#define PARTLY_BYTES (8 * MIB)

/* A page-aligned 8 MiB buffer (with a page of plain memory either side) of which pin_n bytes at
 * pin_at are pinned: the whole 8 MiB, and the pinned part with 3 bytes before it and 5 after, copied
 * to and from the device, synchronous and on a stream. */
static void partly_pinned(size_t pin_at, size_t pin_n, unsigned seed) {
  const size_t page = (size_t)sysconf(_SC_PAGESIZE);
  const size_t block_n = page + PARTLY_BYTES + page;
  void* p = NULL;
  assert_int_equal(posix_memalign(&p, page, block_n), 0);
  unsigned char* block = p;
  assert_ok(gpumem_pin(block + page + pin_at, pin_n, 0));
  gpumem_stream_t stream = test_stream_create(0);
  const size_t starts[2] = {page, page + pin_at - 3};
  const size_t sizes[2] = {PARTLY_BYTES, 3 + pin_n + 5};
  for (int k = 0; k < 4; k++, seed += 4) {
    const size_t at = starts[k / 2], n = sizes[k / 2];
    gpumem_stream_t s = k & 1 ? stream : NULL;
    char what[200];
    snprintf(what, sizeof what,
             "%s copy of %zu bytes to device memory from host memory at %zu of a block pinned at %zu", mode_name(s), n,
             at, page + pin_at);
    check_h2d(block, block_n, at, n, s, seed, what);
    snprintf(what, sizeof what,
             "%s copy of %zu bytes from device memory to host memory at %zu of a block pinned at %zu", mode_name(s), n,
             at, page + pin_at);
    check_d2h(block, block_n, at, n, s, seed + 2, what);
  }
  test_stream_destroy(stream);
  assert_ok(gpumem_unpin(block + page + pin_at, pin_n));
  assert_ok(gpumem_pin_forget(block, block_n));
  free(block);
}

static void test_copy_staging_edges_partly_pinned_first_half(void** state) {
  (void)state;
  require_gpu();
  partly_pinned(0, PARTLY_BYTES / 2, 400);
}

static void test_copy_staging_edges_partly_pinned_second_half(void** state) {
  (void)state;
  require_gpu();
  partly_pinned(PARTLY_BYTES / 2, PARTLY_BYTES / 2, 500);
}

static void test_copy_staging_edges_partly_pinned_middle(void** state) {
  (void)state;
  require_gpu();
  partly_pinned(PARTLY_BYTES / 2 - MIB / 2, MIB, 600);
}

/* ---------------------------------------------------------------------------------------------
 * Stream capture (GPU)
 * ------------------------------------------------------------------------------------------- */

typedef int (*cu_begin_capture_fn)(gpumem_stream_t s, int mode);
typedef int (*cu_end_capture_fn)(gpumem_stream_t s, void** graph);
typedef int (*cu_is_capturing_fn)(gpumem_stream_t s, int* status);
typedef int (*cu_graph_destroy_fn)(void* graph);
typedef int (*cu_memcpy_htod_async_fn)(unsigned long long dst, const void* src, size_t n, gpumem_stream_t s);

/* cuda.h's values. */
enum { CAPTURE_MODE_GLOBAL = 0, CAPTURE_ACTIVE = 1 };

#define CAPTURE_BYTES (2 * MIB)

/* The stream being captured, NULL when none, so that a test that fails mid-capture has it ended. */
static gpumem_stream_t capturing;

/* A global-mode capture on a new blocking stream, which blocks the legacy stream as well. */
static gpumem_stream_t capture_begin(void) {
  assert_null(capturing);
  gpumem_stream_t s = NULL;
  test_cu_push(0);
  assert_int_equal(((test_cu_fn_stream_create)test_cu_symbol("cuStreamCreate"))(&s, 0), 0);
  assert_int_equal(((cu_begin_capture_fn)test_cu_symbol("cuStreamBeginCapture_v2"))(s, CAPTURE_MODE_GLOBAL), 0);
  test_cu_pop();
  capturing = s;
  return s;
}

static int capture_status(gpumem_stream_t s) {
  int status = -1;
  test_cu_push(0);
  assert_int_equal(((cu_is_capturing_fn)test_cu_symbol("cuStreamIsCapturing"))(s, &status), 0);
  test_cu_pop();
  return status;
}

/* Ends the capture and destroys its stream; the driver's answer: 0 with a graph, else what broke it. */
static int capture_end(gpumem_stream_t s, bool* out_graph) {
  void* graph = NULL;
  capturing = NULL;
  test_cu_push(0);
  const int r = ((cu_end_capture_fn)test_cu_symbol("cuStreamEndCapture"))(s, &graph);
  test_cu_pop();
  *out_graph = graph != NULL;
  if (graph) assert_int_equal(((cu_graph_destroy_fn)test_cu_symbol("cuGraphDestroy"))(graph), 0);
  test_stream_destroy(s);
  return r;
}

static int end_open_capture(void** state) {
  (void)state;
  bool graph = false;
  if (capturing) capture_end(capturing, &graph);
  return 0;
}

/* Synchronous 2 MiB copies with plain host memory, which would be staged, are refused during a
 * capture: the capture goes on and ends with a graph, and neither side changed. */
static void test_copy_staging_edges_capture_refuses_sync_copy(void** state) {
  (void)state;
  require_gpu();
  const size_t n = CAPTURE_BYTES;
  unsigned char* dev = device_alloc(n);
  unsigned char* dev_before = checked_malloc(n);
  unsigned char* host = checked_malloc(n + 1);
  unsigned char* host_before = checked_malloc(n);
  fill_pattern(dev_before, n, 700);
  device_write(dev, dev_before, n);
  fill_pattern(host + 1, n, 701);
  memcpy(host_before, host + 1, n);
  release_staging();

  gpumem_stream_t s = capture_begin();
  expect_refusal(gpumem_copy(dev, host + 1, n), GPUMEM_ERROR_STREAM_CAPTURE, "gpumem_copy: refused",
                 "gpumem_copy of 2 MiB from plain host memory during a capture");
  expect_refusal(gpumem_copy(host + 1, dev, n), GPUMEM_ERROR_STREAM_CAPTURE, "gpumem_copy: refused",
                 "gpumem_copy of 2 MiB to plain host memory during a capture");
  assert_int_equal(capture_status(s), CAPTURE_ACTIVE);
  bool graph = false;
  assert_int_equal(capture_end(s, &graph), 0);
  assert_true(graph);

  expect_bytes(host + 1, host_before, n, "plain host memory after a refused copy to it");
  unsigned char* got = checked_malloc(n);
  device_read(got, dev, n);
  expect_bytes(got, dev_before, n, "device memory after a refused copy to it");
  assert_int_equal(staging_held(), 0);
  free(got);
  free(dev_before);
  free(host);
  free(host_before);
  assert_ok(gpumem_device_free(dev));
}

typedef struct {
  int result;       /* the call's: a CUresult, or a gpumem_status_t */
  int status_after; /* the capture's, after the call */
  int end;          /* cuStreamEndCapture's answer */
  bool graph;
  bool device_changed;
} capture_outcome_t;

/* A 2 MiB copy from plain host memory to the device on a capturing stream, by the driver
 * (cuMemcpyHtoDAsync) or by gpumem_copy_async, under a capture of its own. */
static capture_outcome_t capture_pageable_copy(bool by_driver, unsigned char* dev, const unsigned char* host,
                                               const unsigned char* dev_before) {
  const size_t n = CAPTURE_BYTES;
  capture_outcome_t o;
  device_write(dev, dev_before, n);
  gpumem_stream_t s = capture_begin();
  if (by_driver) {
    test_cu_push(0);
    o.result = ((cu_memcpy_htod_async_fn)test_cu_symbol("cuMemcpyHtoDAsync_v2"))((unsigned long long)(uintptr_t)dev,
                                                                                 host, n, s);
    test_cu_pop();
  } else {
    o.result = gpumem_copy_async(dev, host, n, s);
    if (o.result != GPUMEM_SUCCESS) print_message("gpumem_copy_async: %s\n", gpumem_last_error_detail());
  }
  o.status_after = capture_status(s);
  o.end = capture_end(s, &o.graph);
  unsigned char* got = checked_malloc(n);
  device_read(got, dev, n);
  o.device_changed = memcmp(got, dev_before, n) != 0;
  free(got);
  print_message("%s: returned %d, capture status %d after it, cuStreamEndCapture %d (%s), device memory %s\n",
                by_driver ? "cuMemcpyHtoDAsync" : "gpumem_copy_async", o.result, o.status_after, o.end,
                o.graph ? "a graph" : "no graph", o.device_changed ? "changed" : "unchanged");
  return o;
}

/* gpumem_copy_async of pageable memory on a capturing stream is not staged (host work cannot be
 * captured): it ends as the driver's own pageable copy does in the same capture. */
static void test_copy_staging_edges_capture_async_pageable_as_driver(void** state) {
  (void)state;
  require_gpu();
  unsigned char* dev = device_alloc(CAPTURE_BYTES);
  unsigned char* dev_before = checked_malloc(CAPTURE_BYTES);
  unsigned char* host = checked_malloc(CAPTURE_BYTES + 3);
  fill_pattern(dev_before, CAPTURE_BYTES, 800);
  fill_pattern(host + 3, CAPTURE_BYTES, 801);

  const capture_outcome_t driver = capture_pageable_copy(true, dev, host + 3, dev_before);
  release_staging();
  const capture_outcome_t ours = capture_pageable_copy(false, dev, host + 3, dev_before);
  assert_int_equal(staging_held(), 0);

  assert_int_equal(driver.result == 0, ours.result == GPUMEM_SUCCESS);
  assert_int_equal(driver.status_after == CAPTURE_ACTIVE, ours.status_after == CAPTURE_ACTIVE);
  assert_int_equal(driver.end == 0, ours.end == 0);
  assert_int_equal(driver.graph, ours.graph);
  assert_int_equal(driver.device_changed, ours.device_changed);
  free(dev_before);
  free(host);
  assert_ok(gpumem_device_free(dev));
}

/* ---------------------------------------------------------------------------------------------
 * 2D and 3D copies with plain host memory (GPU)
 * ------------------------------------------------------------------------------------------- */

/* Where a region lies in its buffer: x bytes into row y of slice z; rows of pitch bytes, rows rows
 * to a slice, slices slices. */
typedef struct {
  size_t x, y, z, pitch, rows, slices;
} place_t;

typedef struct {
  const char* name;
  size_t width, height, depth;
  place_t host, dev;
} box_t;

static size_t place_bytes(const place_t* p) { return p->pitch * p->rows * p->slices; }

static copy_side_t side_at(void* p, const place_t* l) {
  const copy_side_t side = {p, NULL, l->x, l->y, l->z, l->pitch, l->rows};
  return side;
}

/* Copies the box as the copy under test should, to compute what to expect. */
static void box_apply(unsigned char* dst, const place_t* d, const unsigned char* src, const place_t* s,
                      const box_t* b) {
  for (size_t k = 0; k < b->depth; k++)
    for (size_t r = 0; r < b->height; r++)
      memcpy(dst + ((d->z + k) * d->rows + d->y + r) * d->pitch + d->x,
             src + ((s->z + k) * s->rows + s->y + r) * s->pitch + s->x, b->width);
}

static gpumem_status_t copy_box(const gpumem_copy3d_t* c3, bool three_d, gpumem_stream_t stream) {
  const gpumem_copy2d_t c2 = copy2d_of_3d(c3);
  if (three_d) return stream ? gpumem_copy3d_async(c3, stream) : gpumem_copy3d(c3);
  return stream ? gpumem_copy2d_async(&c2, stream) : gpumem_copy2d(&c2);
}

/* One 2D (the first slice) or 3D copy between plain host memory at an odd address and device
 * memory: the whole destination buffer is checked, and the source left as it was. */
static void check_box(const box_t* b, bool three_d, bool to_device, gpumem_stream_t stream, unsigned seed) {
  const size_t hn = place_bytes(&b->host), dn = place_bytes(&b->dev);
  unsigned char* host_block = checked_malloc(hn + 3);
  unsigned char* host = host_block + 3;
  unsigned char* dev = device_alloc(dn);
  unsigned char* dev_before = checked_malloc(dn);
  unsigned char* got = checked_malloc(dn);
  unsigned char* expected = checked_malloc(hn > dn ? hn : dn);
  fill_pattern(host, hn, seed);
  fill_pattern(dev_before, dn, seed + 1);
  device_write(dev, dev_before, dn);
  const copy_side_t h = side_at(host, &b->host), d = side_at(dev, &b->dev);
  const gpumem_copy3d_t c =
      to_device ? copy3d_of(d, h, b->width, b->height, b->depth) : copy3d_of(h, d, b->width, b->height, b->depth);
  char what[200];
  snprintf(what, sizeof what, "%s %s copy (%s: %zu x %zu x %zu bytes) %s plain host memory", mode_name(stream),
           three_d ? "3D" : "2D", b->name, b->width, b->height, b->depth, to_device ? "from" : "to");

  expect_ok(copy_box(&c, three_d, stream), what);
  if (stream) test_stream_sync(stream);

  device_read(got, dev, dn);
  if (to_device) {
    memcpy(expected, dev_before, dn);
    box_apply(expected, &b->dev, host, &b->host, b);
    expect_bytes(got, expected, dn, what);
    fill_pattern(expected, hn, seed);
    expect_bytes(host, expected, hn, "the host source after the copy");
  } else {
    fill_pattern(expected, hn, seed);
    box_apply(expected, &b->host, dev_before, &b->dev, b);
    expect_bytes(host, expected, hn, what);
    expect_bytes(got, dev_before, dn, "the device source after the copy");
  }
  free(host_block);
  free(dev_before);
  free(got);
  free(expected);
  assert_ok(gpumem_device_free(dev));
}

/* Offsets on both sides, the two sides' pitches (and rows per slice) different. */
static const box_t kBoxes2d[] = {
    {"wide rows", 3 * MIB + 7, 3, 1, {13, 1, 0, 3 * MIB + 64, 5, 1}, {41, 2, 0, 3 * MIB + 512, 6, 1}},
    {"rows wider than a buffer", 5 * MIB + 3, 2, 1, {5, 1, 0, 5 * MIB + 11, 3, 1}, {17, 1, 0, 5 * MIB + 64, 4, 1}},
    {"narrow rows", 1001, 2000, 1, {1, 3, 0, 1003, 2005, 1}, {19, 5, 0, 1024, 2010, 1}},
    {"contiguous host rows", 2001, 700, 1, {0, 2, 0, 2001, 703, 1}, {31, 4, 0, 2048, 706, 1}},
    {"1 MiB", 1024, 1024, 1, {3, 1, 0, 1031, 1026, 1}, {8, 2, 0, 1088, 1027, 1}},
    {"1 MiB - 1", 1025, 1023, 1, {3, 1, 0, 1031, 1025, 1}, {8, 2, 0, 1088, 1026, 1}},
    {"1000 x 1000", 1000, 1000, 1, {5, 2, 0, 1009, 1003, 1}, {24, 1, 0, 1024, 1001, 1}},
};

static const box_t kBoxes3d[] = {
    {"slices", 4101, 100, 5, {3, 2, 1, 4107, 103, 7}, {29, 4, 2, 4352, 107, 8}},
    {"slices larger than a buffer", 65539, 70, 3, {7, 1, 1, 65552, 72, 4}, {13, 2, 0, 65600, 73, 3}},
    {"rows longer than a buffer", 4 * MIB + 9, 1, 3, {5, 1, 1, 4 * MIB + 32, 2, 4}, {11, 0, 1, 4 * MIB + 64, 2, 4}},
    {"1 MiB", 64, 64, 256, {1, 1, 1, 67, 66, 258}, {2, 0, 0, 128, 64, 256}},
    {"1 MiB - 1", 75, 341, 41, {2, 1, 1, 79, 343, 43}, {9, 3, 2, 96, 345, 44}},
    {"100 x 100 x 100", 100, 100, 100, {1, 2, 1, 103, 104, 102}, {4, 0, 3, 128, 101, 104}},
};

#define COUNT_2D (sizeof kBoxes2d / sizeof kBoxes2d[0])
#define COUNT_3D (sizeof kBoxes3d / sizeof kBoxes3d[0])

static bool box_staged_size(const box_t* b) { return b->width * b->height * b->depth >= MIB; }

/* Each box in both directions, synchronous and on a stream; with `held`, only the boxes of 1 MiB or
 * more (staged) or only those under it (staged: false), each after a release, then the memory held. */
static void every_box(const box_t* boxes, size_t count, bool three_d, bool held, bool staged, unsigned seed) {
  gpumem_stream_t stream = test_stream_create(0);
  for (size_t i = 0; i < count; i++) {
    if (held && box_staged_size(&boxes[i]) != staged) continue;
    for (int k = 0; k < 4; k++, seed += 2) {
      if (held) release_staging();
      check_box(&boxes[i], three_d, k & 1, k & 2 ? stream : NULL, seed);
      char what[160];
      snprintf(what, sizeof what, "%s %s copy %s plain host memory (%s)", mode_name(k & 2 ? stream : NULL),
               three_d ? "3D" : "2D", k & 1 ? "from" : "to", boxes[i].name);
      if (held) expect_staged(staged, what);
    }
  }
  test_stream_destroy(stream);
}

static void test_copy_staging_edges_copy2d_pageable_bytes(void** state) {
  (void)state;
  require_gpu();
  every_box(kBoxes2d, COUNT_2D, false, false, false, 900);
}

static void test_copy_staging_edges_copy3d_pageable_bytes(void** state) {
  (void)state;
  require_gpu();
  every_box(kBoxes3d, COUNT_3D, true, false, false, 1000);
}

static void test_copy_staging_edges_copy2d_pageable_is_staged(void** state) {
  (void)state;
  require_gpu();
  every_box(kBoxes2d, COUNT_2D, false, true, true, 1100);
}

static void test_copy_staging_edges_copy3d_pageable_is_staged(void** state) {
  (void)state;
  require_gpu();
  every_box(kBoxes3d, COUNT_3D, true, true, true, 1200);
}

/* Regions under 1 MiB in all go to the driver, in 2D and 3D. */
static void test_copy_staging_edges_copy2d_copy3d_under_1mib_not_staged(void** state) {
  (void)state;
  require_gpu();
  every_box(kBoxes2d, COUNT_2D, false, true, false, 1300);
  every_box(kBoxes3d, COUNT_3D, true, true, false, 1400);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_copy_staging_edges_sizes_sync),
      cmocka_unit_test(test_copy_staging_edges_sizes_async),
      cmocka_unit_test(test_copy_staging_edges_threshold_is_1mib),
      cmocka_unit_test(test_copy_staging_edges_partly_pinned_first_half),
      cmocka_unit_test(test_copy_staging_edges_partly_pinned_second_half),
      cmocka_unit_test(test_copy_staging_edges_partly_pinned_middle),
      cmocka_unit_test_teardown(test_copy_staging_edges_capture_refuses_sync_copy, end_open_capture),
      cmocka_unit_test_teardown(test_copy_staging_edges_capture_async_pageable_as_driver, end_open_capture),
      cmocka_unit_test(test_copy_staging_edges_copy2d_pageable_bytes),
      cmocka_unit_test(test_copy_staging_edges_copy3d_pageable_bytes),
      cmocka_unit_test(test_copy_staging_edges_copy2d_pageable_is_staged),
      cmocka_unit_test(test_copy_staging_edges_copy3d_pageable_is_staged),
      cmocka_unit_test(test_copy_staging_edges_copy2d_copy3d_under_1mib_not_staged),
  };
  const int failed = cmocka_run_group_tests(tests, NULL, group_teardown);
  /* Every test needs a GPU: without one, CTest is told they were skipped. */
  return failed == 0 && !gpu_available() ? 77 : failed;
}
