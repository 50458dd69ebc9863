/* Synchronous calls while a stream is being captured into a CUDA graph: refused with
 * GPUMEM_ERROR_STREAM_CAPTURE, not queued into the graph or run out of order; stream-ordered
 * calls on the capturing stream are captured. */
#include "test_cuda.h"

typedef int (*test_cu_fn_begin_capture)(gpumem_stream_t s, int mode);
typedef int (*test_cu_fn_end_capture)(gpumem_stream_t s, void** graph);
typedef int (*test_cu_fn_graph_destroy)(void* graph);

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

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_stream_capture_refuses_sync_copy_and_memset),
      cmocka_unit_test(test_stream_capture_refuses_sync_alloc),
      cmocka_unit_test(test_stream_capture_records_async_memset),
  };
  if (!gpu_available()) {
    printf("all tests need a GPU: %s\n", gpumem_last_error_detail());
    return 77;
  }
  return cmocka_run_group_tests(tests, NULL, NULL);
}
