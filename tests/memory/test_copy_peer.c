/* Copies between devices (peer): 1D, 2D and 3D between device memory of device 0 and device 1 in
 * both directions, synchronous and on a stream of either device; device 1 memory with a CUDA array
 * of device 0, and with managed, pinned and plain host memory; and many copies over the same pairs,
 * since peer access is enabled on first need and then remembered per pair. Every check covers the
 * whole destination buffer, so a byte written outside the region shows. */
#define _POSIX_C_SOURCE 200809L

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>

#include "test_bytes.h"
#include "test_cuda.h"

/* Where a region lies in its buffer, and the buffer's shape: x bytes into row y of slice z; the
 * buffer has rows of pitch bytes, rows rows per slice, and slices slices. A 1D buffer is one row. */
typedef struct {
  size_t x, y, z;
  size_t pitch, rows, slices;
} layout_t;

static size_t layout_bytes(const layout_t* l) { return l->pitch * l->rows * l->slices; }

static layout_t layout_1d(size_t offset, size_t bytes) {
  layout_t l = {offset, 0, 0, bytes, 1, 1};
  return l;
}

typedef struct {
  size_t width, height, depth;
} extent_t;

/* One side of a copy: memory (ptr) or an array, and the layout of the whole buffer behind it. */
typedef struct {
  unsigned char* ptr;
  gpumem_array_t* array;
  layout_t l;
} side_t;

typedef enum { SHAPE_1D, SHAPE_2D, SHAPE_3D } shape_t;

static const char* const shape_names[] = {"1D", "2D", "3D"};

/* The whole of an array as one 3D box, which also serves 1D and 2D arrays (one row, one slice). */
static gpumem_copy3d_t whole_array_copy(const layout_t* l) {
  gpumem_copy3d_t c = GPUMEM_COPY3D_INIT;
  c.width = l->pitch;
  c.height = l->rows;
  c.depth = l->slices;
  return c;
}

/* Sets a whole side's bytes from plain host memory: memory with gpumem_copy, an array with one 3D copy. */
static void side_write(const side_t* s, const unsigned char* bytes) {
  if (s->array) {
    gpumem_copy3d_t c = whole_array_copy(&s->l);
    c.dst_array = s->array;
    c.src = bytes;
    expect_ok(gpumem_copy3d(&c), "filling an array from plain host memory");
  } else {
    expect_ok(gpumem_copy(s->ptr, bytes, layout_bytes(&s->l)), "filling a buffer from plain host memory");
  }
}

static void side_read(const side_t* s, unsigned char* bytes) {
  if (s->array) {
    gpumem_copy3d_t c = whole_array_copy(&s->l);
    c.dst = bytes;
    c.src_array = s->array;
    expect_ok(gpumem_copy3d(&c), "reading an array into plain host memory");
  } else {
    expect_ok(gpumem_copy(bytes, s->ptr, layout_bytes(&s->l)), "reading a buffer into plain host memory");
  }
}

/* An array side has no pitch or rows of its own: they are the array's. */
static copy_side_t copy_side(const side_t* s) {
  const copy_side_t c = {s->ptr, s->array, s->l.x, s->l.y, s->l.z, s->array ? 0 : s->l.pitch, s->array ? 0 : s->l.rows};
  return c;
}

/* stream NULL: the synchronous call; otherwise the _async call, then a wait for the stream. */
static void do_copy(shape_t shape, const side_t* d, const side_t* s, extent_t e, gpumem_stream_t stream,
                    const char* what) {
  const gpumem_copy3d_t c3 = copy3d_of(copy_side(d), copy_side(s), e.width, e.height, e.depth);
  const gpumem_copy2d_t c2 = copy2d_of_3d(&c3);
  gpumem_status_t status;
  if (shape == SHAPE_1D) {
    unsigned char* const to = d->ptr + d->l.x;
    const unsigned char* const from = s->ptr + s->l.x;
    status = stream ? gpumem_copy_async(to, from, e.width, stream) : gpumem_copy(to, from, e.width);
  } else if (shape == SHAPE_2D) {
    status = stream ? gpumem_copy2d_async(&c2, stream) : gpumem_copy2d(&c2);
  } else {
    status = stream ? gpumem_copy3d_async(&c3, stream) : gpumem_copy3d(&c3);
  }
  expect_ok(status, what);
  if (stream) test_stream_sync(stream);
}

/* Puts the box of src at its place in dst, as the copy should; complemented when asked. */
static void box_apply(unsigned char* dst, const layout_t* d, const unsigned char* src, const layout_t* s, extent_t e,
                      bool complement) {
  for (size_t k = 0; k < e.depth; k++) {
    for (size_t r = 0; r < e.height; r++) {
      unsigned char* to = dst + ((d->z + k) * d->rows + d->y + r) * d->pitch + d->x;
      const unsigned char* from = src + ((s->z + k) * s->rows + s->y + r) * s->pitch + s->x;
      if (complement)
        for (size_t i = 0; i < e.width; i++) to[i] = (unsigned char)~from[i];
      else
        memcpy(to, from, e.width);
    }
  }
}

/* Fills the source with a pattern and the whole destination with another (the poison), copies,
 * and checks every byte of the destination (the region, and the margins left alone) and that the
 * source is unchanged. */
static void check_copy(shape_t shape, const side_t* d, const side_t* s, extent_t e, gpumem_stream_t stream,
                       unsigned seed, const char* what) {
  const size_t dn = layout_bytes(&d->l);
  const size_t sn = layout_bytes(&s->l);
  unsigned char* source = checked_malloc(sn);
  unsigned char* before = checked_malloc(dn);
  unsigned char* expected = checked_malloc(dn);
  unsigned char* got = checked_malloc(dn > sn ? dn : sn);
  fill_pattern(source, sn, seed);
  fill_pattern(before, dn, seed ^ 0x5A5A5A5Au);
  /* Each byte of the region differs from what is to arrive, so even a 1-byte copy must happen. */
  box_apply(before, &d->l, source, &s->l, e, true);
  side_write(s, source);
  side_write(d, before);

  do_copy(shape, d, s, e, stream, what);

  memcpy(expected, before, dn);
  box_apply(expected, &d->l, source, &s->l, e, false);
  side_read(d, got);
  expect_bytes(got, expected, dn, what);
  side_read(s, got);
  expect_bytes(got, source, sn, what);
  free(source);
  free(before);
  free(expected);
  free(got);
}

static side_t memory_side(kind_t kind, int32_t device, layout_t l) {
  side_t s = {memory_alloc(kind, device, layout_bytes(&l)), NULL, l};
  return s;
}

/* The streams a copy between two devices can run on, besides none (synchronous). */
typedef enum { MODE_SYNC, MODE_SRC_STREAM, MODE_DST_STREAM, MODE_COUNT } copy_mode_t;

static const char* const mode_names[MODE_COUNT] = {
    "synchronous",
    "on a stream of the source device",
    "on a stream of the destination device",
};

#define MAX_DEVICES 4

typedef struct {
  gpumem_stream_t on[MAX_DEVICES];
  int32_t count;
} streams_t;

static streams_t streams_create(int32_t count) {
  streams_t s;
  memset(&s, 0, sizeof s);
  s.count = count;
  for (int32_t d = 0; d < count; d++) s.on[d] = test_stream_create(d);
  return s;
}

static void streams_destroy(streams_t* s) {
  for (int32_t d = 0; d < s->count; d++) test_stream_destroy(s->on[d]);
}

static gpumem_stream_t stream_for(const streams_t* s, copy_mode_t mode, int32_t src_device, int32_t dst_device) {
  if (mode == MODE_SRC_STREAM) return s->on[src_device];
  if (mode == MODE_DST_STREAM) return s->on[dst_device];
  return NULL;
}

/* One end of copies between devices: memory of a kind or an array, the device whose stream a copy
 * from or to it may run on, and what to call it. */
typedef struct {
  side_t s;
  kind_t kind; /* memory only */
  int32_t device;
  const char* name;
} end_t;

static end_t memory_end(kind_t kind, int32_t device, layout_t l, const char* name) {
  const end_t e = {memory_side(kind, device, l), kind, device, name};
  return e;
}

static void end_free(end_t* e) {
  if (e->s.array)
    assert_ok(gpumem_array_destroy(e->s.array));
  else
    memory_free(e->kind, e->s.ptr);
}

/* Copies one region from one end to the other and back, in every mode (seeds from seed on, two a
 * mode); then frees both ends. */
static void both_ways(shape_t shape, end_t from, end_t to, extent_t e, const streams_t* streams, unsigned seed) {
  for (int m = 0; m < MODE_COUNT; m++) {
    for (int back = 0; back < 2; back++) {
      const end_t* src = back ? &to : &from;
      const end_t* dst = back ? &from : &to;
      char what[192];
      snprintf(what, sizeof what, "%s copy of %zu x %zu x %zu bytes, %s to %s, %s", shape_names[shape], e.width,
               e.height, e.depth, src->name, dst->name, mode_names[m]);
      check_copy(shape, &dst->s, &src->s, e, stream_for(streams, (copy_mode_t)m, src->device, dst->device),
                 seed + 2 * (unsigned)m + (unsigned)back, what);
    }
  }
  end_free(&from);
  end_free(&to);
}

static void device_pair_both_ways(shape_t shape, int32_t a, int32_t b, layout_t la, layout_t lb, extent_t e,
                                  const streams_t* streams, unsigned seed) {
  static const char* const names[MAX_DEVICES] = {"device 0", "device 1", "device 2", "device 3"};
  both_ways(shape, memory_end(KIND_DEVICE, a, la, names[a]), memory_end(KIND_DEVICE, b, lb, names[b]), e, streams,
            seed);
}

/* Memory of a kind, owned by device 0 where that means anything, and device 1 memory. */
static void kind_and_device1_both_ways(kind_t kind, const char* kind_name, shape_t shape, layout_t lk, layout_t l1,
                                       extent_t e, const streams_t* streams, unsigned seed) {
  both_ways(shape, memory_end(kind, 0, lk, kind_name), memory_end(KIND_DEVICE, 1, l1, "device 1"), e, streams, seed);
}

/* Odd pitches, offsets and widths on both sides, different on each, so that a side mixed up with
 * the other or a pitch taken for the width shows. */
static const layout_t k2dSrc = {17, 5, 0, 1283, 50, 1};
static const layout_t k2dDst = {33, 3, 0, 1111, 45, 1};
static const extent_t k2dExtent = {1001, 40, 1};

static const layout_t k2dBigSrc = {3, 1, 0, 4200, 1030, 1};
static const layout_t k2dBigDst = {1, 4, 0, 4111, 1031, 1};
static const extent_t k2dBigExtent = {4099, 1025, 1};

static const layout_t k3dSrc = {7, 2, 1, 531, 23, 9};
static const layout_t k3dDst = {11, 4, 2, 613, 29, 8};
static const extent_t k3dExtent = {509, 19, 6};

/* ---------------------------------------------------------------------------------------------
 * Device memory on two devices
 * ------------------------------------------------------------------------------------------- */

static void test_copy_peer_1d_device_memory_both_directions(void** state) {
  (void)state;
  streams_t streams = streams_create(2);
  const size_t sizes[] = {1, 4099, ((size_t)3 << 20) + 5};
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
    const extent_t e = {sizes[i], 1, 1};
    device_pair_both_ways(SHAPE_1D, 0, 1, layout_1d(3, sizes[i] + 64), layout_1d(37, sizes[i] + 64), e, &streams,
                          100 + 10 * (unsigned)i);
  }
  streams_destroy(&streams);
}

static void test_copy_peer_2d_device_memory_both_directions(void** state) {
  (void)state;
  streams_t streams = streams_create(2);
  device_pair_both_ways(SHAPE_2D, 0, 1, k2dSrc, k2dDst, k2dExtent, &streams, 200);
  device_pair_both_ways(SHAPE_2D, 0, 1, k2dBigSrc, k2dBigDst, k2dBigExtent, &streams, 210);
  /* Rows of one byte, far apart. */
  const layout_t thin_a = {5, 0, 0, 517, 300, 1};
  const layout_t thin_b = {0, 7, 0, 1, 310, 1};
  const extent_t thin = {1, 300, 1};
  device_pair_both_ways(SHAPE_2D, 0, 1, thin_a, thin_b, thin, &streams, 220);
  streams_destroy(&streams);
}

static void test_copy_peer_3d_device_memory_both_directions(void** state) {
  (void)state;
  streams_t streams = streams_create(2);
  device_pair_both_ways(SHAPE_3D, 0, 1, k3dSrc, k3dDst, k3dExtent, &streams, 300);
  /* Packed on one side (pitch = width, rows = height): the whole buffer is the region. */
  const layout_t packed = {0, 0, 0, 509, 19, 6};
  device_pair_both_ways(SHAPE_3D, 1, 0, packed, k3dDst, k3dExtent, &streams, 310);
  streams_destroy(&streams);
}

/* ---------------------------------------------------------------------------------------------
 * Device 1 memory and a CUDA array on device 0
 * ------------------------------------------------------------------------------------------- */

/* An array on device 0 and a region of it; the box's pitch, rows and slices are the array's. */
typedef struct {
  shape_t shape;
  int32_t format;
  uint32_t channels;
  size_t element_bytes;
  size_t width, height, depth; /* elements; height 0 is 1D, depth 0 2D */
  layout_t box;
  layout_t l1; /* the device 1 side */
  extent_t e;
  unsigned seed;
} array_case_t;

/* Elements of 4 bytes: x 13 elements in, 200 elements wide. */
static const array_case_t k2dArrayCase = {
    SHAPE_2D, GPUMEM_FORMAT_U16, 2, 4, 300, 70, 0, {13 * 4, 9, 0, 0, 0, 0}, {5, 2, 0, 1021, 60, 1}, {200 * 4, 50, 1},
    400};

/* Elements of 2 bytes: x 3 elements in, 40 elements wide. */
static const array_case_t k3dArrayCase = {
    SHAPE_3D, GPUMEM_FORMAT_I16, 1, 2, 64, 16, 8, {3 * 2, 2, 1, 0, 0, 0}, {9, 1, 2, 997, 14, 8}, {40 * 2, 11, 5}, 500};

static void array_and_device1_both_ways(const array_case_t* c) {
  streams_t streams = streams_create(2);
  end_t array = {{NULL, array_create_on(0, c->format, c->channels, c->width, c->height, c->depth), c->box},
                 KIND_DEVICE,
                 0,
                 "an array on device 0"};
  array.s.l.pitch = c->width * c->element_bytes;
  array.s.l.rows = c->height ? c->height : 1;
  array.s.l.slices = c->depth ? c->depth : 1;
  both_ways(c->shape, memory_end(KIND_DEVICE, 1, c->l1, "device 1 memory"), array, c->e, &streams, c->seed);
  streams_destroy(&streams);
}

static void test_copy_peer_device1_memory_and_2d_array_on_device0(void** state) {
  (void)state;
  array_and_device1_both_ways(&k2dArrayCase);
}

static void test_copy_peer_device1_memory_and_3d_array_on_device0(void** state) {
  (void)state;
  array_and_device1_both_ways(&k3dArrayCase);
}

/* ---------------------------------------------------------------------------------------------
 * Device 1 memory and host or managed memory
 * ------------------------------------------------------------------------------------------- */

/* 1D, 2D and 3D, seeds seed, seed + 10 and seed + 20. */
static void kind_and_device1_every_shape(kind_t kind, const char* kind_name, unsigned seed) {
  streams_t streams = streams_create(2);
  const extent_t e1 = {100003, 1, 1};
  kind_and_device1_both_ways(kind, kind_name, SHAPE_1D, layout_1d(5, 100100), layout_1d(11, 100200), e1, &streams,
                             seed);
  kind_and_device1_both_ways(kind, kind_name, SHAPE_2D, k2dSrc, k2dDst, k2dExtent, &streams, seed + 10);
  kind_and_device1_both_ways(kind, kind_name, SHAPE_3D, k3dSrc, k3dDst, k3dExtent, &streams, seed + 20);
  streams_destroy(&streams);
}

static void test_copy_peer_managed_of_device0_and_device1(void** state) {
  (void)state;
  kind_and_device1_every_shape(KIND_MANAGED, "managed memory of device 0", 600);
}

static void test_copy_peer_pinned_host_and_device1(void** state) {
  (void)state;
  kind_and_device1_every_shape(KIND_PINNED, "pinned host memory", 700);
}

/* Above 8 MiB a copy with plain host memory is staged through gpumem's page-locked buffers; here
 * the device at the other end is not device 0. Odd host offsets, so no staging chunk is aligned. */
static void test_copy_peer_plain_host_and_device1_staged(void** state) {
  (void)state;
  streams_t streams = streams_create(2);
  const size_t n = ((size_t)8 << 20) + 4099;
  const extent_t e = {n, 1, 1};
  kind_and_device1_both_ways(KIND_PLAIN, "plain host memory", SHAPE_1D, layout_1d(3, n + 70), layout_1d(33, n + 40), e,
                             &streams, 800);
  streams_destroy(&streams);
}

/* ---------------------------------------------------------------------------------------------
 * The same pairs again and again
 * ------------------------------------------------------------------------------------------- */

/* Every ordered pair of the first few devices, several rounds each way, synchronous and on
 * streams in turn: the first copy of a pair enables peer access, the later ones find it enabled. */
static void test_copy_peer_repeated_copies_both_directions(void** state) {
  (void)state;
  int32_t count = gpu_count();
  if (count > MAX_DEVICES) count = MAX_DEVICES;
  streams_t streams = streams_create(count);
  unsigned char* buffers[MAX_DEVICES][2];
  const size_t n = 70001;
  const size_t bytes = layout_bytes(&k2dDst) > n + 64 ? layout_bytes(&k2dDst) : n + 64;
  for (int32_t d = 0; d < count; d++) {
    buffers[d][0] = memory_alloc(KIND_DEVICE, d, bytes);
    buffers[d][1] = memory_alloc(KIND_DEVICE, d, bytes);
  }
  unsigned seed = 900;
  for (int round = 0; round < 6; round++) {
    for (int32_t a = 0; a < count; a++) {
      for (int32_t b = 0; b < count; b++) {
        if (a == b) continue;
        const copy_mode_t mode = (copy_mode_t)((round + a + b) % MODE_COUNT);
        char what[192];
        side_t s = {buffers[a][0], NULL, layout_1d(7, n + 64)};
        side_t d = {buffers[b][0], NULL, layout_1d(13, n + 64)};
        const extent_t e1 = {n - 13, 1, 1};
        snprintf(what, sizeof what, "round %d: 1D copy, device %d to device %d, %s", round, a, b, mode_names[mode]);
        check_copy(SHAPE_1D, &d, &s, e1, stream_for(&streams, mode, a, b), seed++, what);

        side_t s2 = {buffers[a][1], NULL, k2dSrc};
        side_t d2 = {buffers[b][1], NULL, k2dDst};
        snprintf(what, sizeof what, "round %d: 2D copy, device %d to device %d, %s", round, a, b, mode_names[mode]);
        check_copy(SHAPE_2D, &d2, &s2, k2dExtent, stream_for(&streams, mode, a, b), seed++, what);
      }
    }
  }
  for (int32_t d = 0; d < count; d++) {
    memory_free(KIND_DEVICE, buffers[d][0]);
    memory_free(KIND_DEVICE, buffers[d][1]);
  }
  streams_destroy(&streams);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_copy_peer_1d_device_memory_both_directions),
      cmocka_unit_test(test_copy_peer_2d_device_memory_both_directions),
      cmocka_unit_test(test_copy_peer_3d_device_memory_both_directions),
      cmocka_unit_test(test_copy_peer_device1_memory_and_2d_array_on_device0),
      cmocka_unit_test(test_copy_peer_device1_memory_and_3d_array_on_device0),
      cmocka_unit_test(test_copy_peer_managed_of_device0_and_device1),
      cmocka_unit_test(test_copy_peer_pinned_host_and_device1),
      cmocka_unit_test(test_copy_peer_plain_host_and_device1_staged),
      cmocka_unit_test(test_copy_peer_repeated_copies_both_directions),
  };
  const int32_t count = gpu_count();
  if (count < 2) {
    printf("all tests need 2 GPUs, found %d%s%s\n", count, count == 0 ? ": " : "",
           count == 0 ? gpumem_last_error_detail() : "");
    return 77;
  }
  return cmocka_run_group_tests(tests, NULL, NULL);
}
