/* CUDA arrays: descriptions, creation in every format and rank, handles, destruction. */
#define _POSIX_C_SOURCE 200809L

#include <pthread.h>

#include "test_util.h"

#define FILL 0xa5

static const int32_t kFormats[] = {GPUMEM_FORMAT_U8,  GPUMEM_FORMAT_U16, GPUMEM_FORMAT_U32, GPUMEM_FORMAT_I8,
                                   GPUMEM_FORMAT_I16, GPUMEM_FORMAT_I32, GPUMEM_FORMAT_F16, GPUMEM_FORMAT_F32};
static const uint32_t kChannels[] = {1, 2, 4};

/* Small extents of each rank: height 0 is 1D, depth 0 is 2D. */
struct extent {
  size_t width, height, depth;
};
static const struct extent kExtents[] = {{64, 0, 0}, {32, 16, 0}, {8, 8, 4}};

static gpumem_array_desc_t make_desc(int32_t device, int32_t format, uint32_t channels, size_t width, size_t height,
                                     size_t depth) {
  gpumem_array_desc_t desc = GPUMEM_ARRAY_DESC_INIT;
  desc.device = device;
  desc.format = format;
  desc.channels = channels;
  desc.width = width;
  desc.height = height;
  desc.depth = depth;
  return desc;
}

static void assert_all_bytes(const void* p, unsigned char value, size_t n) {
  const unsigned char* b = p;
  for (size_t i = 0; i < n; ++i) {
    if (b[i] != value) {
      print_error("byte %zu is 0x%02x, expected 0x%02x\n", i, b[i], value);
      fail();
    }
  }
}

static void assert_desc_cleared(const gpumem_array_desc_t* desc, size_t struct_size) {
  assert_int_equal(desc->struct_size, struct_size);
  assert_int_equal(desc->device, 0);
  assert_int_equal(desc->format, 0);
  assert_int_equal(desc->channels, 0);
  assert_int_equal(desc->width, 0);
  assert_int_equal(desc->height, 0);
  assert_int_equal(desc->depth, 0);
}

/* Creation must fail with INVALID_ARGUMENT, a detail containing the fragment, and a cleared output. */
static void assert_create_refused(const gpumem_array_desc_t* desc, const char* fragment) {
  gpumem_array_t* array = (gpumem_array_t*)0x1;
  assert_status(gpumem_array_create(desc, &array), GPUMEM_ERROR_INVALID_ARGUMENT);
  assert_detail_contains(fragment);
  assert_null(array);
  assert_int_equal(gpumem_last_cuda_result(), 0);
}

/* ---- gpumem_array_desc_init ---- */

static void test_array_desc_init_null_desc(void** state) {
  (void)state;
  assert_status(gpumem_array_desc_init(NULL, sizeof(gpumem_array_desc_t)), GPUMEM_ERROR_INVALID_ARGUMENT);
  assert_detail_contains("desc is NULL");
}

static void test_array_desc_init_small_struct_size(void** state) {
  (void)state;
  const size_t sizes[] = {0, sizeof(size_t), sizeof(gpumem_array_desc_t) - 1};
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; ++i) {
    gpumem_array_desc_t desc;
    memset(&desc, FILL, sizeof desc);
    assert_status(gpumem_array_desc_init(&desc, sizes[i]), GPUMEM_ERROR_INVALID_ARGUMENT);
    char fragment[64];
    snprintf(fragment, sizeof fragment, "struct_size is %zu", sizes[i]);
    assert_detail_contains(fragment);
    /* The caller's struct may be only that large: nothing is written past it. */
    assert_all_bytes((const unsigned char*)&desc + sizes[i], FILL, sizeof desc - sizes[i]);
  }
}

static void test_array_desc_init_fills_defaults(void** state) {
  (void)state;
  const gpumem_array_desc_t expected = GPUMEM_ARRAY_DESC_INIT;
  gpumem_array_desc_t desc;
  memset(&desc, FILL, sizeof desc);
  assert_ok(gpumem_array_desc_init(&desc, sizeof desc));
  assert_int_equal(desc.struct_size, sizeof(gpumem_array_desc_t));
  assert_int_equal(desc.struct_size, expected.struct_size);
  assert_int_equal(desc.device, 0);
  assert_int_equal(desc.format, GPUMEM_FORMAT_F32);
  assert_int_equal(desc.channels, 1);
  assert_int_equal(desc.width, 0);
  assert_int_equal(desc.height, 0);
  assert_int_equal(desc.depth, 0);
  assert_int_equal(desc.device, expected.device);
  assert_int_equal(desc.format, expected.format);
  assert_int_equal(desc.channels, expected.channels);
}

/* ---- gpumem_array_create: bad input, refused before the driver ---- */

static void test_array_create_null_out(void** state) {
  (void)state;
  const gpumem_array_desc_t desc = make_desc(0, GPUMEM_FORMAT_F32, 1, 64, 0, 0);
  assert_status(gpumem_array_create(&desc, NULL), GPUMEM_ERROR_INVALID_ARGUMENT);
  assert_detail_contains("out_array is NULL");
}

static void test_array_create_null_desc(void** state) {
  (void)state;
  assert_create_refused(NULL, "desc is NULL");
}

static void test_array_create_small_struct_size(void** state) {
  (void)state;
  const size_t sizes[] = {0, sizeof(gpumem_array_desc_t) - 1};
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; ++i) {
    gpumem_array_desc_t desc = make_desc(0, GPUMEM_FORMAT_F32, 1, 64, 0, 0);
    desc.struct_size = sizes[i];
    char fragment[64];
    snprintf(fragment, sizeof fragment, "struct_size is %zu", sizes[i]);
    assert_create_refused(&desc, fragment);
  }
}

static void test_array_create_unknown_format(void** state) {
  (void)state;
  const int32_t formats[] = {0, 9, -1, INT32_MAX};
  for (size_t i = 0; i < sizeof formats / sizeof formats[0]; ++i) {
    const gpumem_array_desc_t desc = make_desc(0, formats[i], 1, 64, 0, 0);
    char fragment[64];
    snprintf(fragment, sizeof fragment, "format %d ", (int)formats[i]);
    assert_create_refused(&desc, fragment);
  }
}

static void test_array_create_bad_channels(void** state) {
  (void)state;
  const uint32_t channels[] = {0, 3, 5, 8};
  for (size_t i = 0; i < sizeof channels / sizeof channels[0]; ++i) {
    const gpumem_array_desc_t desc = make_desc(0, GPUMEM_FORMAT_U8, channels[i], 64, 0, 0);
    char fragment[64];
    snprintf(fragment, sizeof fragment, "%u channels", (unsigned)channels[i]);
    assert_create_refused(&desc, fragment);
  }
}

static void test_array_create_zero_width(void** state) {
  (void)state;
  const gpumem_array_desc_t one_d = make_desc(0, GPUMEM_FORMAT_F32, 1, 0, 0, 0);
  assert_create_refused(&one_d, "width is 0");
  const gpumem_array_desc_t three_d = make_desc(0, GPUMEM_FORMAT_F32, 1, 0, 8, 8);
  assert_create_refused(&three_d, "width is 0");
}

static void test_array_create_depth_without_height(void** state) {
  (void)state;
  const gpumem_array_desc_t desc = make_desc(0, GPUMEM_FORMAT_F32, 1, 16, 0, 4);
  assert_create_refused(&desc, "depth 4 without a height");
}

/* ---- handles that are not live arrays ---- */

static void test_array_destroy_null(void** state) {
  (void)state;
  assert_ok(gpumem_array_destroy(NULL));
}

static void test_array_destroy_foreign_handle(void** state) {
  (void)state;
  unsigned char local[64];
  memset(local, FILL, sizeof local);
  assert_status(gpumem_array_destroy((gpumem_array_t*)local), GPUMEM_ERROR_INVALID_HANDLE);
  assert_detail_contains("not a live gpumem array");
  assert_int_equal(gpumem_last_cuda_result(), 0);
  assert_all_bytes(local, FILL, sizeof local);

  int variable = 42;
  assert_status(gpumem_array_destroy((gpumem_array_t*)&variable), GPUMEM_ERROR_INVALID_HANDLE);
  assert_int_equal(variable, 42);
}

static void test_array_get_desc_foreign_handle(void** state) {
  (void)state;
  unsigned char local[64];
  memset(local, FILL, sizeof local);
  gpumem_array_desc_t desc;
  memset(&desc, FILL, sizeof desc);
  desc.struct_size = sizeof desc;
  assert_status(gpumem_array_get_desc((const gpumem_array_t*)local, &desc), GPUMEM_ERROR_INVALID_HANDLE);
  assert_detail_contains("not a live gpumem array");
  assert_desc_cleared(&desc, sizeof desc);
  assert_all_bytes(local, FILL, sizeof local);

  memset(&desc, FILL, sizeof desc);
  desc.struct_size = sizeof desc;
  assert_status(gpumem_array_get_desc(NULL, &desc), GPUMEM_ERROR_INVALID_HANDLE);
  assert_desc_cleared(&desc, sizeof desc);
}

static void test_array_get_desc_bad_output(void** state) {
  (void)state;
  unsigned char local[64];
  memset(local, FILL, sizeof local);
  assert_status(gpumem_array_get_desc((const gpumem_array_t*)local, NULL), GPUMEM_ERROR_INVALID_ARGUMENT);
  assert_detail_contains("out_desc is NULL");

  gpumem_array_desc_t desc;
  memset(&desc, FILL, sizeof desc);
  desc.struct_size = 0;
  assert_status(gpumem_array_get_desc((const gpumem_array_t*)local, &desc), GPUMEM_ERROR_INVALID_ARGUMENT);
  assert_detail_contains("struct_size is 0");
  assert_int_equal(desc.struct_size, 0);
  /* A struct_size of 0 says the caller's struct has no room: nothing past it may be written. */
  assert_all_bytes((const unsigned char*)&desc + sizeof desc.struct_size, FILL, sizeof desc - sizeof desc.struct_size);
}

/* ---- with a GPU ---- */

static void test_array_create_every_format_channels_rank(void** state) {
  (void)state;
  require_gpu();
  for (size_t f = 0; f < sizeof kFormats / sizeof kFormats[0]; ++f) {
    for (size_t c = 0; c < sizeof kChannels / sizeof kChannels[0]; ++c) {
      for (size_t r = 0; r < sizeof kExtents / sizeof kExtents[0]; ++r) {
        const struct extent e = kExtents[r];
        const gpumem_array_desc_t want = make_desc(0, kFormats[f], kChannels[c], e.width, e.height, e.depth);
        gpumem_array_t* array = NULL;
        assert_ok(gpumem_array_create(&want, &array));
        assert_non_null(array);

        gpumem_array_desc_t got;
        memset(&got, FILL, sizeof got);
        got.struct_size = sizeof got;
        assert_ok(gpumem_array_get_desc(array, &got));
        assert_int_equal(got.struct_size, sizeof got);
        assert_int_equal(got.device, want.device);
        assert_int_equal(got.format, want.format);
        assert_int_equal(got.channels, want.channels);
        assert_int_equal(got.width, want.width);
        assert_int_equal(got.height, want.height);
        assert_int_equal(got.depth, want.depth);

        assert_ok(gpumem_array_destroy(array));
        /* The handle's memory is gone, but the registry answers for it. */
        assert_status(gpumem_array_destroy(array), GPUMEM_ERROR_INVALID_HANDLE);
        assert_detail_contains("not a live gpumem array");
        memset(&got, FILL, sizeof got);
        got.struct_size = sizeof got;
        assert_status(gpumem_array_get_desc(array, &got), GPUMEM_ERROR_INVALID_HANDLE);
        assert_desc_cleared(&got, sizeof got);
      }
    }
  }
}

static void test_array_create_distinct_handles(void** state) {
  (void)state;
  require_gpu();
  const gpumem_array_desc_t desc = make_desc(0, GPUMEM_FORMAT_U8, 1, 64, 0, 0);
  gpumem_array_t* a = NULL;
  gpumem_array_t* b = NULL;
  assert_ok(gpumem_array_create(&desc, &a));
  assert_ok(gpumem_array_create(&desc, &b));
  assert_ptr_not_equal(a, b);
  /* Destroying one leaves the other live. */
  assert_ok(gpumem_array_destroy(a));
  gpumem_array_desc_t got;
  got.struct_size = sizeof got;
  assert_ok(gpumem_array_get_desc(b, &got));
  assert_int_equal(got.width, 64);
  assert_ok(gpumem_array_destroy(b));
}

static void test_array_create_oversized_extents(void** state) {
  (void)state;
  require_gpu();
  const gpumem_array_desc_t one_d = make_desc(0, GPUMEM_FORMAT_U8, 1, (size_t)1 << 30, 0, 0);
  assert_create_refused(&one_d, "exceeds");
  assert_detail_contains("width 1,073,741,824");
  const gpumem_array_desc_t two_d = make_desc(0, GPUMEM_FORMAT_U8, 1, 32, (size_t)1 << 20, 0);
  assert_create_refused(&two_d, "exceeds");
  assert_detail_contains("height 1,048,576");
  const gpumem_array_desc_t three_d = make_desc(0, GPUMEM_FORMAT_U8, 1, 8, 8, (size_t)1 << 20);
  assert_create_refused(&three_d, "exceeds");
  assert_detail_contains("depth 1,048,576");
}

static void test_array_create_invalid_device(void** state) {
  (void)state;
  require_gpu();
  const int32_t count = gpu_count();
  const int32_t bad[] = {-1, count};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; ++i) {
    const gpumem_array_desc_t desc = make_desc(bad[i], GPUMEM_FORMAT_F32, 1, 64, 0, 0);
    gpumem_array_t* array = (gpumem_array_t*)0x1;
    assert_status(gpumem_array_create(&desc, &array), GPUMEM_ERROR_INVALID_DEVICE);
    assert_null(array);
    char fragment[32];
    snprintf(fragment, sizeof fragment, "device %d ", (int)bad[i]);
    assert_detail_contains(fragment);
  }
}

#define THREADS 8
#define ARRAYS_PER_THREAD 16

struct destroyer {
  pthread_barrier_t* barrier;
  gpumem_array_t* arrays[ARRAYS_PER_THREAD];
  gpumem_status_t created[ARRAYS_PER_THREAD];
  gpumem_status_t destroyed[ARRAYS_PER_THREAD];
};

/* cmocka's assertions may only run on the test's own thread: workers record statuses instead. */
static void* run_destroyer(void* arg) {
  struct destroyer* d = arg;
  for (int i = 0; i < ARRAYS_PER_THREAD; ++i) {
    const gpumem_array_desc_t desc = make_desc(0, GPUMEM_FORMAT_F32, 1 + (uint32_t)(i % 2), 32, 16, 0);
    d->arrays[i] = NULL;
    d->created[i] = gpumem_array_create(&desc, &d->arrays[i]);
  }
  pthread_barrier_wait(d->barrier);
  for (int i = 0; i < ARRAYS_PER_THREAD; ++i)
    d->destroyed[i] = d->created[i] == GPUMEM_SUCCESS ? gpumem_array_destroy(d->arrays[i]) : GPUMEM_ERROR_INTERNAL;
  return NULL;
}

static void test_array_destroy_concurrently(void** state) {
  (void)state;
  require_gpu();
  pthread_barrier_t barrier;
  assert_int_equal(pthread_barrier_init(&barrier, NULL, THREADS), 0);
  static struct destroyer workers[THREADS];
  pthread_t threads[THREADS];
  for (int t = 0; t < THREADS; ++t) {
    workers[t].barrier = &barrier;
    assert_int_equal(pthread_create(&threads[t], NULL, run_destroyer, &workers[t]), 0);
  }
  for (int t = 0; t < THREADS; ++t) assert_int_equal(pthread_join(threads[t], NULL), 0);
  pthread_barrier_destroy(&barrier);
  for (int t = 0; t < THREADS; ++t) {
    for (int i = 0; i < ARRAYS_PER_THREAD; ++i) {
      assert_int_equal(workers[t].created[i], GPUMEM_SUCCESS);
      assert_int_equal(workers[t].destroyed[i], GPUMEM_SUCCESS);
    }
  }
  /* Every one is gone from the registry, none twice. */
  for (int t = 0; t < THREADS; ++t)
    for (int i = 0; i < ARRAYS_PER_THREAD; ++i)
      assert_status(gpumem_array_destroy(workers[t].arrays[i]), GPUMEM_ERROR_INVALID_HANDLE);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_array_desc_init_null_desc),
      cmocka_unit_test(test_array_desc_init_small_struct_size),
      cmocka_unit_test(test_array_desc_init_fills_defaults),
      cmocka_unit_test(test_array_create_null_out),
      cmocka_unit_test(test_array_create_null_desc),
      cmocka_unit_test(test_array_create_small_struct_size),
      cmocka_unit_test(test_array_create_unknown_format),
      cmocka_unit_test(test_array_create_bad_channels),
      cmocka_unit_test(test_array_create_zero_width),
      cmocka_unit_test(test_array_create_depth_without_height),
      cmocka_unit_test(test_array_destroy_null),
      cmocka_unit_test(test_array_destroy_foreign_handle),
      cmocka_unit_test(test_array_get_desc_foreign_handle),
      cmocka_unit_test(test_array_get_desc_bad_output),
      cmocka_unit_test(test_array_create_every_format_channels_rank),
      cmocka_unit_test(test_array_create_distinct_handles),
      cmocka_unit_test(test_array_create_oversized_extents),
      cmocka_unit_test(test_array_create_invalid_device),
      cmocka_unit_test(test_array_destroy_concurrently),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
