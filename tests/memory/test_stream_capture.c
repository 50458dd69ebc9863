/* Synchronous calls while a stream is being captured into a CUDA graph: refused with
 * GPUMEM_ERROR_STREAM_CAPTURE, not queued into the graph or run out of order; stream-ordered
 * calls on the capturing stream are captured, and the graph does their work each time it is
 * launched. */
#define _POSIX_C_SOURCE 200809L

#include <stdlib.h>

#include "test_bytes.h"
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

/* Where a region lies in a buffer: x bytes into row y of slice z, rows of pitch bytes, rows rows per
 * slice. */
typedef struct {
  size_t x, y, z, pitch, rows;
} place_t;

static copy_side_t at(void* p, const place_t* l) {
  const copy_side_t side = {p, NULL, l->x, l->y, l->z, l->pitch, l->rows};
  return side;
}

/* Copies a width x height x depth box as the copy under test should, to compute what to expect. */
static void box_apply(unsigned char* dst, const place_t* d, const unsigned char* src, const place_t* s, size_t width,
                      size_t height, size_t depth) {
  for (size_t k = 0; k < depth; k++)
    for (size_t r = 0; r < height; r++)
      memcpy(dst + ((d->z + k) * d->rows + d->y + r) * d->pitch + d->x,
             src + ((s->z + k) * s->rows + s->y + r) * s->pitch + s->x, width);
}

/* 2D: 64 rows of 64 bytes; 3D: 4 slices of 16 rows of 64 bytes; both kSize bytes in all. */
static const place_t k2dPlace = {8, 2, 0, 64, 64};
static const place_t k3dPlace = {4, 1, 1, 64, 16};

/* Each synchronous 2D and 3D copy is refused, whether it would run gpumem's kernel (device to
 * device) or the driver (with host memory), and writes nothing to device or host memory. */
static void test_stream_capture_refuses_sync_copy2d_and_copy3d(void** state) {
  (void)state;
  require_gpu();
  unsigned char* dev_a = memory_alloc(KIND_DEVICE, 0, kSize);
  unsigned char* dev_b = memory_alloc(KIND_DEVICE, 0, kSize);
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

  static const char* const directions[] = {"device to device", "host to device", "device to host"};
  void* const dsts[] = {dev_b, dev_b, host};
  void* const srcs[] = {dev_a, host, dev_a};
  gpumem_copy2d_t c2[3];
  gpumem_copy3d_t c3[3];
  for (int i = 0; i < 3; i++) {
    c2[i] = copy2d_of(at(dsts[i], &k2dPlace), at(srcs[i], &k2dPlace), 48, 60);
    c3[i] = copy3d_of(at(dsts[i], &k3dPlace), at(srcs[i], &k3dPlace), 40, 12, 3);
  }

  gpumem_stream_t s = begin_global_capture();
  for (int i = 0; i < 3; i++) {
    print_message("2D, %s\n", directions[i]);
    assert_status(gpumem_copy2d(&c2[i]), GPUMEM_ERROR_STREAM_CAPTURE);
    assert_detail_contains("capture");
  }
  for (int i = 0; i < 3; i++) {
    print_message("3D, %s\n", directions[i]);
    assert_status(gpumem_copy3d(&c3[i]), GPUMEM_ERROR_STREAM_CAPTURE);
    assert_detail_contains("capture");
  }
  assert_memory_equal(host, host_before, kSize);
  end_capture(s, false);

  assert_ok(gpumem_copy(back, dev_b, kSize));
  assert_memory_equal(back, b, kSize);
  assert_ok(gpumem_copy(back, dev_a, kSize));
  assert_memory_equal(back, a, kSize);
  assert_memory_equal(host, host_before, kSize);

  /* Nothing was left half done: after the capture the same copies work. */
  assert_ok(gpumem_copy2d(&c2[0]));
  unsigned char expected[kSize];
  memcpy(expected, b, kSize);
  box_apply(expected, &k2dPlace, a, &k2dPlace, 48, 60, 1);
  assert_ok(gpumem_copy(back, dev_b, kSize));
  assert_memory_equal(back, expected, kSize);
  assert_ok(gpumem_copy3d(&c3[2]));
  memcpy(expected, host_before, kSize);
  box_apply(expected, &k3dPlace, a, &k3dPlace, 40, 12, 3);
  assert_memory_equal(host, expected, kSize);

  memory_free(KIND_DEVICE, dev_a);
  memory_free(KIND_DEVICE, dev_b);
}

/* The graph's buffers: a 1D chain (pinned -> device, a memset inside, device -> pinned), and a 2D
 * and a 3D chain (pinned -> device by the driver, device -> device by gpumem's kernel, device ->
 * pinned by the driver). Layouts differ on every side so that a mixed-up pitch or offset shows. */
enum { k1dBytes = 65536, k1dMemsetOffset = 4096, k1dMemsetCount = 1000 };
static const uint32_t k1dMemsetValue = 0xC0FFEE11u;

/* A 2D or 3D chain copies one region from stage to stage: pinned, device (by the driver), device
 * (by gpumem's kernel), pinned (by the driver). */
enum { STAGES = 4, CHAINS = 2 };
static const kind_t kStageKinds[STAGES] = {KIND_PINNED, KIND_DEVICE, KIND_DEVICE, KIND_PINNED};

typedef struct {
  int dims;
  size_t width, height, depth, slices;
  place_t place[STAGES]; /* where the region lies in the buffer of each stage */
} chain_t;

static const chain_t kChains[CHAINS] = {
    {2, 201, 37, 1, 1, {{3, 1, 0, 301, 40}, {5, 2, 0, 257, 45}, {7, 4, 0, 263, 44}, {9, 3, 0, 250, 42}}},
    {3, 111, 17, 5, 7, {{2, 1, 1, 131, 20}, {4, 3, 0, 127, 22}, {1, 0, 2, 140, 19}, {6, 2, 1, 129, 21}}},
};

static size_t stage_bytes(int chain, int stage) {
  const chain_t* c = &kChains[chain];
  return c->place[stage].pitch * c->place[stage].rows * c->slices;
}

typedef struct {
  unsigned char* in1;
  unsigned char* out1;
  unsigned char* dev1;
  unsigned char* stage[CHAINS][STAGES];
} graph_buffers_t;

static graph_buffers_t graph_buffers_create(void) {
  graph_buffers_t b;
  b.in1 = memory_alloc(KIND_PINNED, 0, k1dBytes);
  b.out1 = memory_alloc(KIND_PINNED, 0, k1dBytes);
  b.dev1 = memory_alloc(KIND_DEVICE, 0, k1dBytes);
  for (int k = 0; k < CHAINS; k++)
    for (int i = 0; i < STAGES; i++) b.stage[k][i] = memory_alloc(kStageKinds[i], 0, stage_bytes(k, i));
  return b;
}

static void graph_buffers_destroy(graph_buffers_t* b) {
  memory_free(KIND_PINNED, b->in1);
  memory_free(KIND_PINNED, b->out1);
  memory_free(KIND_DEVICE, b->dev1);
  for (int k = 0; k < CHAINS; k++)
    for (int i = 0; i < STAGES; i++) memory_free(kStageKinds[i], b->stage[k][i]);
}

/* New sources, and poison in every destination, so that each launch has to write every byte
 * checked afterwards. The 1D chain takes seeds seed and seed + 1; chain k seed + 2 + 2k (its
 * source), seed + 3 + 2k (its pinned destination) and seed + 6 + k (its device destination). */
static void graph_inputs(const graph_buffers_t* b, unsigned seed) {
  fill_pattern(b->in1, k1dBytes, seed);
  fill_pattern(b->out1, k1dBytes, seed + 1);
  for (int k = 0; k < CHAINS; k++) {
    const size_t n = stage_bytes(k, 2);
    fill_pattern(b->stage[k][0], stage_bytes(k, 0), seed + 2 + 2 * (unsigned)k);
    fill_pattern(b->stage[k][3], stage_bytes(k, 3), seed + 3 + 2 * (unsigned)k);
    unsigned char* poison = checked_malloc(n);
    fill_pattern(poison, n, seed + 6 + (unsigned)k);
    assert_ok(gpumem_copy(b->stage[k][2], poison, n));
    free(poison);
  }
}

/* What a launch must have produced from the inputs graph_inputs(seed) set. */
static void graph_check(const graph_buffers_t* b, unsigned seed, const char* what) {
  print_message("checking the graph's output after the %s\n", what);
  unsigned char* source = checked_malloc(k1dBytes);
  fill_pattern(source, k1dBytes, seed);
  for (size_t i = 0; i < k1dMemsetCount; i++) memcpy(source + k1dMemsetOffset + 4 * i, &k1dMemsetValue, 4);
  assert_memory_equal(b->out1, source, k1dBytes);
  free(source);

  for (int k = 0; k < CHAINS; k++) {
    const chain_t* c = &kChains[k];
    const size_t n_out = stage_bytes(k, 3);
    const size_t n_dev = stage_bytes(k, 2);
    unsigned char* chain_source = checked_malloc(stage_bytes(k, 0));
    unsigned char* expected = checked_malloc(n_out > n_dev ? n_out : n_dev);
    unsigned char* got = checked_malloc(n_dev);
    print_message("the %dD chain\n", c->dims);

    fill_pattern(chain_source, stage_bytes(k, 0), seed + 2 + 2 * (unsigned)k);
    fill_pattern(expected, n_out, seed + 3 + 2 * (unsigned)k);
    box_apply(expected, &c->place[3], chain_source, &c->place[0], c->width, c->height, c->depth);
    assert_memory_equal(b->stage[k][3], expected, n_out);
    fill_pattern(expected, n_dev, seed + 6 + (unsigned)k);
    box_apply(expected, &c->place[2], chain_source, &c->place[0], c->width, c->height, c->depth);
    assert_ok(gpumem_copy(got, b->stage[k][2], n_dev));
    assert_memory_equal(got, expected, n_dev);

    free(chain_source);
    free(expected);
    free(got);
  }
}

/* Captures a chain's three copies, stage to stage, on the capturing stream. */
static void chain_capture(const graph_buffers_t* b, int k, gpumem_stream_t s) {
  const chain_t* c = &kChains[k];
  for (int i = 0; i + 1 < STAGES; i++) {
    const gpumem_copy3d_t c3 = copy3d_of(at(b->stage[k][i + 1], &c->place[i + 1]), at(b->stage[k][i], &c->place[i]),
                                         c->width, c->height, c->depth);
    const gpumem_copy2d_t c2 = copy2d_of_3d(&c3);
    assert_ok(c->dims == 3 ? gpumem_copy3d_async(&c3, s) : gpumem_copy2d_async(&c2, s));
  }
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
  graph_buffers_t b = graph_buffers_create();
  gpumem_stream_t launch = test_stream_create(0);
  graph_inputs(&b, 10);

  gpumem_stream_t s = begin_global_capture();
  assert_ok(gpumem_copy_async(b.dev1, b.in1, k1dBytes, s));
  assert_ok(gpumem_memset_async(b.dev1 + k1dMemsetOffset, k1dMemsetValue, 4, k1dMemsetCount, s));
  assert_ok(gpumem_copy_async(b.out1, b.dev1, k1dBytes, s));
  for (int k = 0; k < CHAINS; k++) chain_capture(&b, k, s);
  void* graph = NULL;
  assert_int_equal(((test_cu_fn_end_capture)test_cu_symbol("cuStreamEndCapture"))(s, &graph), 0);
  assert_non_null(graph);
  test_stream_destroy(s);

  /* Captured, not run: the destinations still hold their poison. */
  unsigned char* poison = checked_malloc(k1dBytes);
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
  graph_buffers_destroy(&b);
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
