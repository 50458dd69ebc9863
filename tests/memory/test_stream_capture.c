/* Synchronous calls while a stream is being captured into a CUDA graph: refused with
 * GPUMEM_ERROR_STREAM_CAPTURE, not queued into the graph or run out of order; stream-ordered
 * calls on the capturing stream are captured, and the graph does their work each time it is
 * launched. */
#include <stdlib.h>

#include "test_cuda.h"

typedef int (*test_cu_fn_begin_capture)(gpumem_stream_t s, int mode);
typedef int (*test_cu_fn_end_capture)(gpumem_stream_t s, void** graph);
typedef int (*test_cu_fn_graph_destroy)(void* graph);
typedef int (*test_cu_fn_graph_instantiate)(void** exec, void* graph, unsigned long long flags);
typedef int (*test_cu_fn_graph_launch)(void* exec, gpumem_stream_t s);
typedef int (*test_cu_fn_graph_exec_destroy)(void* exec);

enum { kSize = 4096 };

/* A blocking stream (flags 0): work on the legacy stream would have to wait for it. */
static gpumem_stream_t begin_global_capture(void) {
  gpumem_stream_t s = NULL;
  test_cu_push(0);
  assert_int_equal(((test_cu_fn_stream_create)test_cu_symbol("cuStreamCreate"))(&s, 0), 0);
  test_cu_pop();
  assert_int_equal(((test_cu_fn_begin_capture)test_cu_symbol("cuStreamBeginCapture_v2"))(s, 0 /* GLOBAL */), 0);
  return s;
}

static void end_capture(gpumem_stream_t s, bool expect_valid) {
  void* graph = NULL;
  int r = ((test_cu_fn_end_capture)test_cu_symbol("cuStreamEndCapture"))(s, &graph);
  if (expect_valid) assert_int_equal(r, 0);
  if (graph) assert_int_equal(((test_cu_fn_graph_destroy)test_cu_symbol("cuGraphDestroy"))(graph), 0);
  test_stream_destroy(s);
}

static void test_stream_capture_refuses_sync_copy_and_memset(void** state) {
  (void)state;
  require_gpu();
  void* dev = NULL;
  assert_ok(gpumem_device_alloc(0, kSize, &dev));
  unsigned char host[kSize];
  memset(host, 0x5a, sizeof host);

  gpumem_stream_t s = begin_global_capture();
  assert_status(gpumem_copy(dev, host, kSize), GPUMEM_ERROR_STREAM_CAPTURE);
  assert_detail_contains("CUDA_ERROR_STREAM_CAPTURE");
  assert_status(gpumem_memset(dev, 1, 1, kSize), GPUMEM_ERROR_STREAM_CAPTURE);
  assert_detail_contains("CUDA_ERROR_STREAM_CAPTURE");
  end_capture(s, false);

  /* Nothing was half done: after the capture the same calls work and the bytes are right. */
  assert_ok(gpumem_copy(dev, host, kSize));
  unsigned char back[kSize];
  assert_ok(gpumem_copy(back, dev, kSize));
  assert_memory_equal(back, host, kSize);
  assert_ok(gpumem_device_free(dev));
}

static void test_stream_capture_refuses_sync_alloc(void** state) {
  (void)state;
  require_gpu();
  gpumem_stream_t s = begin_global_capture();
  void* dev = (void*)0x1;
  assert_status(gpumem_device_alloc(0, kSize, &dev), GPUMEM_ERROR_STREAM_CAPTURE);
  assert_null(dev);
  end_capture(s, false);
}

static void test_stream_capture_records_async_memset(void** state) {
  (void)state;
  require_gpu();
  void* dev = NULL;
  assert_ok(gpumem_device_alloc(0, kSize, &dev));
  gpumem_stream_t s = begin_global_capture();
  assert_ok(gpumem_memset_async(dev, 0x11, 1, kSize, s));
  end_capture(s, true);
  assert_ok(gpumem_device_free(dev));
}

/* A byte sequence with no short period, so that a shifted or partial copy cannot match it. */
static void fill_pattern(unsigned char* p, size_t n, unsigned seed) {
  for (size_t i = 0; i < n; i++) {
    uint32_t x = (uint32_t)i * 2654435761u + seed * 40503u + 0x9E3779B9u;
    x ^= x >> 15;
    x *= 0x2C1B3C6Du;
    x ^= x >> 12;
    p[i] = (unsigned char)x;
  }
}

/* Where a region lies in a buffer: x bytes into row y of slice z, rows of pitch bytes, rows rows per
 * slice. */
typedef struct {
  size_t x, y, z, pitch, rows;
} place_t;

/* Copies a width x height x depth box as the copy under test should, to compute what to expect. */
static void box_apply(unsigned char* dst, const place_t* d, const unsigned char* src, const place_t* s, size_t width,
                      size_t height, size_t depth) {
  for (size_t k = 0; k < depth; k++)
    for (size_t r = 0; r < height; r++)
      memcpy(dst + ((d->z + k) * d->rows + d->y + r) * d->pitch + d->x,
             src + ((s->z + k) * s->rows + s->y + r) * s->pitch + s->x, width);
}

static gpumem_copy2d_t copy2d_of(void* dst, const place_t* d, const void* src, const place_t* s, size_t width,
                                 size_t height) {
  gpumem_copy2d_t c = GPUMEM_COPY2D_INIT;
  c.dst = dst;
  c.dst_x = d->x;
  c.dst_y = d->y;
  c.dst_pitch = d->pitch;
  c.src = src;
  c.src_x = s->x;
  c.src_y = s->y;
  c.src_pitch = s->pitch;
  c.width = width;
  c.height = height;
  return c;
}

static gpumem_copy3d_t copy3d_of(void* dst, const place_t* d, const void* src, const place_t* s, size_t width,
                                 size_t height, size_t depth) {
  gpumem_copy3d_t c = GPUMEM_COPY3D_INIT;
  c.dst = dst;
  c.dst_x = d->x;
  c.dst_y = d->y;
  c.dst_z = d->z;
  c.dst_pitch = d->pitch;
  c.dst_height = d->rows;
  c.src = src;
  c.src_x = s->x;
  c.src_y = s->y;
  c.src_z = s->z;
  c.src_pitch = s->pitch;
  c.src_height = s->rows;
  c.width = width;
  c.height = height;
  c.depth = depth;
  return c;
}

/* 2D: 64 rows of 64 bytes; 3D: 4 slices of 16 rows of 64 bytes; both kSize bytes in all. */
static const place_t k2dPlace = {8, 2, 0, 64, 64};
static const place_t k3dPlace = {4, 1, 1, 64, 16};

/* Each synchronous 2D and 3D copy is refused, whether it would run gpumem's kernel (device to
 * device) or the driver (with host memory), and writes nothing to device or host memory. */
static void test_stream_capture_refuses_sync_copy2d_and_copy3d(void** state) {
  (void)state;
  require_gpu();
  void* dev_a = NULL;
  void* dev_b = NULL;
  assert_ok(gpumem_device_alloc(0, kSize, &dev_a));
  assert_ok(gpumem_device_alloc(0, kSize, &dev_b));
  unsigned char a[kSize];
  unsigned char b[kSize];
  unsigned char host[kSize];
  unsigned char host_before[kSize];
  unsigned char back[kSize];
  fill_pattern(a, kSize, 1);
  fill_pattern(b, kSize, 2);
  fill_pattern(host_before, kSize, 3);
  memcpy(host, host_before, kSize);
  assert_ok(gpumem_copy(dev_a, a, kSize));
  assert_ok(gpumem_copy(dev_b, b, kSize));

  const gpumem_copy2d_t d2d_2 = copy2d_of(dev_b, &k2dPlace, dev_a, &k2dPlace, 48, 60);
  const gpumem_copy2d_t h2d_2 = copy2d_of(dev_b, &k2dPlace, host, &k2dPlace, 48, 60);
  const gpumem_copy2d_t d2h_2 = copy2d_of(host, &k2dPlace, dev_a, &k2dPlace, 48, 60);
  const gpumem_copy3d_t d2d_3 = copy3d_of(dev_b, &k3dPlace, dev_a, &k3dPlace, 40, 12, 3);
  const gpumem_copy3d_t h2d_3 = copy3d_of(dev_b, &k3dPlace, host, &k3dPlace, 40, 12, 3);
  const gpumem_copy3d_t d2h_3 = copy3d_of(host, &k3dPlace, dev_a, &k3dPlace, 40, 12, 3);

  gpumem_stream_t s = begin_global_capture();
  assert_status(gpumem_copy2d(&d2d_2), GPUMEM_ERROR_STREAM_CAPTURE);
  assert_detail_contains("capture");
  assert_status(gpumem_copy2d(&h2d_2), GPUMEM_ERROR_STREAM_CAPTURE);
  assert_detail_contains("capture");
  assert_status(gpumem_copy2d(&d2h_2), GPUMEM_ERROR_STREAM_CAPTURE);
  assert_detail_contains("capture");
  assert_status(gpumem_copy3d(&d2d_3), GPUMEM_ERROR_STREAM_CAPTURE);
  assert_detail_contains("capture");
  assert_status(gpumem_copy3d(&h2d_3), GPUMEM_ERROR_STREAM_CAPTURE);
  assert_detail_contains("capture");
  assert_status(gpumem_copy3d(&d2h_3), GPUMEM_ERROR_STREAM_CAPTURE);
  assert_detail_contains("capture");
  assert_memory_equal(host, host_before, kSize);
  end_capture(s, false);

  assert_ok(gpumem_copy(back, dev_b, kSize));
  assert_memory_equal(back, b, kSize);
  assert_ok(gpumem_copy(back, dev_a, kSize));
  assert_memory_equal(back, a, kSize);
  assert_memory_equal(host, host_before, kSize);

  /* Nothing was left half done: after the capture the same copies work. */
  assert_ok(gpumem_copy2d(&d2d_2));
  unsigned char expected[kSize];
  memcpy(expected, b, kSize);
  box_apply(expected, &k2dPlace, a, &k2dPlace, 48, 60, 1);
  assert_ok(gpumem_copy(back, dev_b, kSize));
  assert_memory_equal(back, expected, kSize);
  assert_ok(gpumem_copy3d(&d2h_3));
  memcpy(expected, host_before, kSize);
  box_apply(expected, &k3dPlace, a, &k3dPlace, 40, 12, 3);
  assert_memory_equal(host, expected, kSize);

  assert_ok(gpumem_device_free(dev_a));
  assert_ok(gpumem_device_free(dev_b));
}

/* The graph's buffers: a 1D chain (pinned -> device, a memset inside, device -> pinned), and a 2D
 * and a 3D chain (pinned -> device by the driver, device -> device by gpumem's kernel, device ->
 * pinned by the driver). Layouts differ on every side so that a mixed-up pitch or offset shows. */
enum { k1dBytes = 65536, k1dMemsetOffset = 4096, k1dMemsetCount = 1000 };
static const uint32_t k1dMemsetValue = 0xC0FFEE11u;

static const place_t k2dIn = {3, 1, 0, 301, 40};
static const place_t k2dDevSrc = {5, 2, 0, 257, 45};
static const place_t k2dDevDst = {7, 4, 0, 263, 44};
static const place_t k2dOut = {9, 3, 0, 250, 42};
enum { k2dWidth = 201, k2dHeight = 37 };

static const place_t k3dIn = {2, 1, 1, 131, 20};
static const place_t k3dDevSrc = {4, 3, 0, 127, 22};
static const place_t k3dDevDst = {1, 0, 2, 140, 19};
static const place_t k3dOut = {6, 2, 1, 129, 21};
enum { k3dWidth = 111, k3dHeight = 17, k3dDepth = 5, k3dSlices = 7 };

static size_t place_bytes(const place_t* p, size_t slices) { return p->pitch * p->rows * slices; }

typedef struct {
  unsigned char* in1;
  unsigned char* out1;
  void* dev1;
  unsigned char* in2;
  unsigned char* out2;
  void* dev_src2;
  void* dev_dst2;
  unsigned char* in3;
  unsigned char* out3;
  void* dev_src3;
  void* dev_dst3;
} graph_buffers_t;

static unsigned char* pinned_buffer(size_t n) {
  void* p = NULL;
  assert_ok(gpumem_host_alloc(n, 0, &p));
  return p;
}

static void* device_buffer(size_t n) {
  void* p = NULL;
  assert_ok(gpumem_device_alloc(0, n, &p));
  return p;
}

/* New sources, and poison in every destination, so that each launch has to write every byte
 * checked afterwards. */
static void graph_inputs(const graph_buffers_t* b, unsigned seed) {
  fill_pattern(b->in1, k1dBytes, seed);
  fill_pattern(b->out1, k1dBytes, seed + 1);
  fill_pattern(b->in2, place_bytes(&k2dIn, 1), seed + 2);
  fill_pattern(b->out2, place_bytes(&k2dOut, 1), seed + 3);
  fill_pattern(b->in3, place_bytes(&k3dIn, k3dSlices), seed + 4);
  fill_pattern(b->out3, place_bytes(&k3dOut, k3dSlices), seed + 5);
  const size_t n2 = place_bytes(&k2dDevDst, 1);
  const size_t n3 = place_bytes(&k3dDevDst, k3dSlices);
  unsigned char* poison = malloc(n2 > n3 ? n2 : n3);
  assert_non_null(poison);
  fill_pattern(poison, n2, seed + 6);
  assert_ok(gpumem_copy(b->dev_dst2, poison, n2));
  fill_pattern(poison, n3, seed + 7);
  assert_ok(gpumem_copy(b->dev_dst3, poison, n3));
  free(poison);
}

/* What a launch must have produced from the inputs graph_inputs(seed) set. */
static void graph_check(const graph_buffers_t* b, unsigned seed, const char* what) {
  print_message("checking the graph's output after the %s\n", what);
  const size_t n2in = place_bytes(&k2dIn, 1);
  const size_t n3in = place_bytes(&k3dIn, k3dSlices);
  const size_t n2out = place_bytes(&k2dOut, 1);
  const size_t n3out = place_bytes(&k3dOut, k3dSlices);
  const size_t n2dev = place_bytes(&k2dDevDst, 1);
  const size_t n3dev = place_bytes(&k3dDevDst, k3dSlices);
  unsigned char* source = malloc(k1dBytes + n2in + n3in);
  unsigned char* expected = malloc(k1dBytes + n2out + n3out + n2dev + n3dev);
  unsigned char* got = malloc(n2dev + n3dev);
  assert_non_null(source);
  assert_non_null(expected);
  assert_non_null(got);

  fill_pattern(source, k1dBytes, seed);
  for (size_t i = 0; i < k1dMemsetCount; i++) memcpy(source + k1dMemsetOffset + 4 * i, &k1dMemsetValue, 4);
  assert_memory_equal(b->out1, source, k1dBytes);

  fill_pattern(source, n2in, seed + 2);
  fill_pattern(expected, n2out, seed + 3);
  box_apply(expected, &k2dOut, source, &k2dIn, k2dWidth, k2dHeight, 1);
  assert_memory_equal(b->out2, expected, n2out);
  fill_pattern(expected, n2dev, seed + 6);
  box_apply(expected, &k2dDevDst, source, &k2dIn, k2dWidth, k2dHeight, 1);
  assert_ok(gpumem_copy(got, b->dev_dst2, n2dev));
  assert_memory_equal(got, expected, n2dev);

  fill_pattern(source, n3in, seed + 4);
  fill_pattern(expected, n3out, seed + 5);
  box_apply(expected, &k3dOut, source, &k3dIn, k3dWidth, k3dHeight, k3dDepth);
  assert_memory_equal(b->out3, expected, n3out);
  fill_pattern(expected, n3dev, seed + 7);
  box_apply(expected, &k3dDevDst, source, &k3dIn, k3dWidth, k3dHeight, k3dDepth);
  assert_ok(gpumem_copy(got, b->dev_dst3, n3dev));
  assert_memory_equal(got, expected, n3dev);

  free(source);
  free(expected);
  free(got);
}

static void graph_launch_and_wait(void* exec, gpumem_stream_t stream) {
  assert_int_equal(((test_cu_fn_graph_launch)test_cu_symbol("cuGraphLaunch"))(exec, stream), 0);
  test_stream_sync(stream);
}

/* The async copies and memset on the capturing stream become graph nodes: the graph does the work
 * when launched, and again, from the sources' new bytes, when launched a second time. */
static void test_stream_capture_graph_of_async_copies_replays(void** state) {
  (void)state;
  require_gpu();
  graph_buffers_t b;
  b.in1 = pinned_buffer(k1dBytes);
  b.out1 = pinned_buffer(k1dBytes);
  b.dev1 = device_buffer(k1dBytes);
  b.in2 = pinned_buffer(place_bytes(&k2dIn, 1));
  b.out2 = pinned_buffer(place_bytes(&k2dOut, 1));
  b.dev_src2 = device_buffer(place_bytes(&k2dDevSrc, 1));
  b.dev_dst2 = device_buffer(place_bytes(&k2dDevDst, 1));
  b.in3 = pinned_buffer(place_bytes(&k3dIn, k3dSlices));
  b.out3 = pinned_buffer(place_bytes(&k3dOut, k3dSlices));
  b.dev_src3 = device_buffer(place_bytes(&k3dDevSrc, k3dSlices));
  b.dev_dst3 = device_buffer(place_bytes(&k3dDevDst, k3dSlices));
  gpumem_stream_t launch = test_stream_create(0);
  graph_inputs(&b, 10);

  const gpumem_copy2d_t in2 = copy2d_of(b.dev_src2, &k2dDevSrc, b.in2, &k2dIn, k2dWidth, k2dHeight);
  const gpumem_copy2d_t mid2 = copy2d_of(b.dev_dst2, &k2dDevDst, b.dev_src2, &k2dDevSrc, k2dWidth, k2dHeight);
  const gpumem_copy2d_t out2 = copy2d_of(b.out2, &k2dOut, b.dev_dst2, &k2dDevDst, k2dWidth, k2dHeight);
  const gpumem_copy3d_t in3 = copy3d_of(b.dev_src3, &k3dDevSrc, b.in3, &k3dIn, k3dWidth, k3dHeight, k3dDepth);
  const gpumem_copy3d_t mid3 = copy3d_of(b.dev_dst3, &k3dDevDst, b.dev_src3, &k3dDevSrc, k3dWidth, k3dHeight, k3dDepth);
  const gpumem_copy3d_t out3 = copy3d_of(b.out3, &k3dOut, b.dev_dst3, &k3dDevDst, k3dWidth, k3dHeight, k3dDepth);

  gpumem_stream_t s = begin_global_capture();
  assert_ok(gpumem_copy_async(b.dev1, b.in1, k1dBytes, s));
  assert_ok(gpumem_memset_async((unsigned char*)b.dev1 + k1dMemsetOffset, k1dMemsetValue, 4, k1dMemsetCount, s));
  assert_ok(gpumem_copy_async(b.out1, b.dev1, k1dBytes, s));
  assert_ok(gpumem_copy2d_async(&in2, s));
  assert_ok(gpumem_copy2d_async(&mid2, s));
  assert_ok(gpumem_copy2d_async(&out2, s));
  assert_ok(gpumem_copy3d_async(&in3, s));
  assert_ok(gpumem_copy3d_async(&mid3, s));
  assert_ok(gpumem_copy3d_async(&out3, s));
  void* graph = NULL;
  assert_int_equal(((test_cu_fn_end_capture)test_cu_symbol("cuStreamEndCapture"))(s, &graph), 0);
  assert_non_null(graph);
  test_stream_destroy(s);

  /* Captured, not run: the destinations still hold their poison. */
  unsigned char* poison = malloc(k1dBytes);
  assert_non_null(poison);
  fill_pattern(poison, k1dBytes, 11);
  assert_memory_equal(b.out1, poison, k1dBytes);
  free(poison);

  void* exec = NULL;
  test_cu_push(0); /* the driver instantiates in the current context */
  assert_int_equal(((test_cu_fn_graph_instantiate)test_cu_symbol("cuGraphInstantiateWithFlags"))(&exec, graph, 0), 0);
  test_cu_pop();
  assert_non_null(exec);

  graph_launch_and_wait(exec, launch);
  graph_check(&b, 10, "first launch");

  graph_inputs(&b, 20);
  graph_launch_and_wait(exec, launch);
  graph_check(&b, 20, "second launch, with new sources");

  assert_int_equal(((test_cu_fn_graph_exec_destroy)test_cu_symbol("cuGraphExecDestroy"))(exec), 0);
  assert_int_equal(((test_cu_fn_graph_destroy)test_cu_symbol("cuGraphDestroy"))(graph), 0);
  test_stream_destroy(launch);
  assert_ok(gpumem_host_free(b.in1));
  assert_ok(gpumem_host_free(b.out1));
  assert_ok(gpumem_device_free(b.dev1));
  assert_ok(gpumem_host_free(b.in2));
  assert_ok(gpumem_host_free(b.out2));
  assert_ok(gpumem_device_free(b.dev_src2));
  assert_ok(gpumem_device_free(b.dev_dst2));
  assert_ok(gpumem_host_free(b.in3));
  assert_ok(gpumem_host_free(b.out3));
  assert_ok(gpumem_device_free(b.dev_src3));
  assert_ok(gpumem_device_free(b.dev_dst3));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_stream_capture_refuses_sync_copy_and_memset),
      cmocka_unit_test(test_stream_capture_refuses_sync_alloc),
      cmocka_unit_test(test_stream_capture_records_async_memset),
      cmocka_unit_test(test_stream_capture_refuses_sync_copy2d_and_copy3d),
      cmocka_unit_test(test_stream_capture_graph_of_async_copies_replays),
  };
  if (!gpu_available()) {
    printf("all tests need a GPU: %s\n", gpumem_last_error_detail());
    return 77;
  }
  return cmocka_run_group_tests(tests, NULL, NULL);
}
